"""SCRAM credentials and ACLs in the coordination store.

JSON documents, each read and changed as a whole with compare-and-set (two
administrators changing them at once both succeed, one after the other):

* ``users``: ``{user: {mechanism: "salt=...,stored_key=...,server_key=...,iterations=N"}}``
  (Kafka's credential text; never a password);
* ``acls``: ``{"acls": [binding, ...]}`` (see :class:`~sparklog.security.acl.AclBinding`);
* ``salt-key``: ``{"key": <base64 of 32 random bytes>}``, written once: the key of the
  made-up salts of unknown users (:meth:`SecurityStore.unknown_user_key`);
* ``producer-ids``: the same form, the key of producer tokens
  (:mod:`sparklog.security.binding`).

They are the coordination store's shared documents ``security/<name>``
(:meth:`~sparklog.coordination.base.CoordinationStore.update_document`): in cluster mode
the znodes ``/sparklog/security/<name>`` under the chroot, readable by the brokers only
under ``zookeeper.set.acl``; in standalone mode versioned files of the storage root's
coordination directory, next to the consumer offsets, owner-only (0700 directories, 0600
files) with only the newest version kept (:mod:`sparklog.coordination.local`).
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time

from ..coordination.base import CoordinationStore
from ..errors import CoordinationError
from .scram import HASHES, ScramCredential

log = logging.getLogger(__name__)

#: the document of the key of unknown users' made-up salts
SALT_KEY = "salt-key"
#: the document of the key of producer tokens
PRODUCER_TOKEN_KEY = "producer-ids"


class SecurityStore:
    """Credentials and ACL documents over a coordination store (module docstring)."""

    def __init__(self, store: CoordinationStore):
        self.store = store
        #: name -> [doc, read at (monotonic), refresh running]
        self._cache: dict[str, list] = {}

    def cached(self, name: str, max_age: float) -> dict:
        """The document ``name`` as last read: read now the first time (or after
        :meth:`forget`), else refreshed on a background thread once older than
        ``max_age`` seconds, so that callers on the broker's event loop never wait
        for the store (ZooKeeper) after the first read."""
        entry = self._cache.get(name)
        if entry is None:
            entry = self._cache[name] = [self.read(name), time.monotonic(), False]
        elif time.monotonic() - entry[1] >= max_age and not entry[2]:
            entry[2] = True

            def refresh():
                try:
                    entry[0] = self.read(name)
                except Exception as exc:  # noqa: BLE001 - keep the last copy; retried later
                    # (a ZooKeeper session lost or expired is the usual cause: one line,
                    # the traceback at DEBUG)
                    log.warning("reading %s from the coordination store failed (%s); "
                                "the last copy is used", name,
                                ": ".join(filter(None, (type(exc).__name__, str(exc)))))
                    log.debug("reading %s failed", name, exc_info=True)
                finally:
                    entry[1], entry[2] = time.monotonic(), False
            threading.Thread(target=refresh, name=f"sparklog-{name}-refresh",
                             daemon=True).start()
        return entry[0]

    def forget(self, name: str) -> None:
        """Drop the cached copy of ``name`` (after a change made here)."""
        self._cache.pop(name, None)

    # --- documents ---------------------------------------------------------------------
    def read(self, name: str) -> dict:
        """The document ``name`` ({} when never written)."""
        return self.store.read_document(f"security/{name}")

    def update(self, name: str, change) -> dict:
        """Read-modify-write ``change(doc) -> new doc``; return the new document."""
        return self.store.update_document(f"security/{name}", change)

    # --- SCRAM credentials ---------------------------------------------------------------
    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for a SCRAM mechanism, or None."""
        text = self.read("users").get(user, {}).get(mechanism)
        return ScramCredential.from_text(text) if text else None

    def set_credential(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        """Add or replace a user's credential."""
        if mechanism not in HASHES:
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(f"unknown SCRAM mechanism {mechanism!r}; known: "
                                       f"{', '.join(HASHES)}")

        def put(doc):
            doc.setdefault(user, {})[mechanism] = credential.to_text()
            return doc
        self.update("users", put)

    def delete_credential(self, user: str, mechanism: str) -> bool:
        """Remove a user's credential; False when there was none."""
        found = []

        def drop(doc):
            if doc.get(user, {}).pop(mechanism, None) is not None:
                found.append(True)
            if user in doc and not doc[user]:
                del doc[user]
            return doc
        self.update("users", drop)
        return bool(found)

    def unknown_user_key(self) -> bytes:
        """The cluster's key of unknown users' made-up SCRAM salts
        (:func:`~sparklog.security.scram.unknown_user_credential`), in the document
        ``salt-key`` (:meth:`cluster_key`)."""
        return self.cluster_key(SALT_KEY)

    def cluster_key(self, name: str) -> bytes:
        """The cluster's secret key kept in document ``name``: 32 random bytes stored
        once (the first broker to need it writes it, with compare-and-set, so every
        broker of the cluster and every restart uses the same)."""
        doc = self.read(name)
        if not doc.get("key"):
            doc = self.update(name, lambda d: d if d.get("key") else
                              {"key": base64.b64encode(os.urandom(32)).decode()})
        try:
            key = base64.b64decode(doc["key"], validate=True)
        except (ValueError, TypeError):
            key = b""
        if len(key) < 16:
            raise CoordinationError(f"the coordination store's security/{name} document "
                                    "holds no valid key (base64 of 32 bytes): delete it and "
                                    "restart the brokers to make a new one")
        return key

    def users(self) -> dict[str, list[str]]:
        """Every user with the SCRAM mechanisms it has credentials for."""
        return {u: sorted(m) for u, m in sorted(self.read("users").items())}


__all__ = ["SecurityStore"]
