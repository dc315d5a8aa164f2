"""ZooKeeper ACLs of a secured cluster (``zookeeper.set.acl=true``).

Brokers authenticate to ZooKeeper with digest credentials
(``zookeeper.digest.credentials=user:password``, sparklog's own property: Kafka takes
them from a JAAS file) and create every node with ACLs that let only that identity
change it; everyone may read the cluster's state (brokers, topics, leaders), as with
Kafka's ``zookeeper.set.acl``, except the credentials and ACLs under
``/sparklog/security``, which only the brokers' identity may read. A client without
the credentials cannot move leaders or epochs, change offsets, credentials or ACLs.

Nodes created before ``zookeeper.set.acl`` was turned on keep their open ACLs (Kafka
has ``zookeeper-security-migration`` for that); start a secured cluster on a fresh
chroot.
"""

from __future__ import annotations

from ..errors import InvalidConfigError

#: nodes (and their children) only the brokers' identity may read
PRIVATE_PREFIX = "/sparklog/security"


def digest_auth(credentials: str) -> tuple[str, str]:
    """``user:password`` split (InvalidConfigError when malformed)."""
    user, sep, password = (credentials or "").partition(":")
    if not sep or not user or not password:
        raise InvalidConfigError("zookeeper.digest.credentials must be user:password")
    return user, password


def kazoo_security(credentials: str) -> dict:
    """Keyword arguments for :class:`kazoo.client.KazooClient`: the digest auth and
    the default ACL (the identity may do anything, the world may read)."""
    from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

    user, password = digest_auth(credentials)
    return {"auth_data": [("digest", f"{user}:{password}")],
            "default_acl": [make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE]}


def private_acl(credentials: str) -> list:
    """The ACL of :data:`PRIVATE_PREFIX` nodes: the identity only."""
    from kazoo.security import make_digest_acl

    user, password = digest_auth(credentials)
    return [make_digest_acl(user, password, all=True)]


__all__ = ["PRIVATE_PREFIX", "digest_auth", "kazoo_security", "private_acl"]
