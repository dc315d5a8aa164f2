"""Topic administration in cluster mode: create, delete and alter flow through ZooKeeper.

The storage stays the truth about a topic's existence and config (:class:`TopicStore`);
ZooKeeper carries what the controller acts on (Kafka 0.8's flow):

* **create**: the topic is written to the storage (its config, atomically), then
  ``/brokers/topics/<t>`` with each partition's preference list; the controller's watch
  elects the leaders. The call waits until every partition has a leader (or ``wait_s``).
  A broker dying between the two writes leaves a storage-only topic, which the next
  controller registers itself.
* **delete**: ``/admin/delete_topics/<t>`` asks the controller, which takes the leaders
  away, renames the storage directory away (:meth:`TopicStore.retire_topic`: the topic
  vanishes for every reader) and deletes the topic's nodes; the call waits for that,
  not for the data's removal (each broker removes retired directories
  ``file.delete.delay.ms`` later: :mod:`sparklog.server.retired`).
* **alter**: configs and partition count change on the storage (next config version);
  more partitions extend ``/brokers/topics/<t>`` (compare-and-set), which the
  controller sees; ``/config/topics/<t>`` gets the new config so that brokers' watches
  reload it (Kafka's config change notification).
"""

from __future__ import annotations

import logging
import time
import zlib

from ..errors import (
    InvalidArgumentError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from ..names import validate_topic_name
from .assignment import preferred_replicas
from .base import NO_LEADER, cas_attempts
from .zkpaths import (
    decode_assignment,
    delete_topic_path,
    dumps,
    encode_assignment,
    topic_config_path,
    topic_path,
)

log = logging.getLogger(__name__)


def _topic_store(store):
    if store.topic_store is None:
        raise InvalidArgumentError("this ZooKeeper store has no storage root (topic_store); "
                                   "topics are created on the storage")
    return store.topic_store


def wait_for_leaders(store, topic: str, num_partitions: int, wait_s: float) -> bool:
    """Wait until the view shows a leader for partitions 0..n-1 of ``topic``; False,
    with a warning naming the partitions still without one, when ``wait_s`` passed
    first (the topic exists: the controller elects their leaders once a broker that
    can take them is up, as Kafka's does)."""
    deadline = time.monotonic() + wait_s
    while True:
        states = [store.view.state(topic, p) for p in range(num_partitions)]
        leaderless = [p for p, s in enumerate(states) if s is None or s.leader == NO_LEADER]
        if not leaderless:
            return True
        if time.monotonic() >= deadline:
            log.warning("topic %s: partitions %s have no leader after %.0f s (are brokers "
                        "running and registered?); they get one when a broker can take them",
                        topic, leaderless, wait_s)
            return False
        time.sleep(0.01)


def create_topic(store, name: str, num_partitions: int = 1, *, schema=None, configs=None,
                 wait_s: float = 10.0):
    """Create a topic on the storage and register it for the controller; return its
    TopicConfig. TopicExistsError if it exists; waits up to ``wait_s`` for leaders."""
    from kazoo.exceptions import NodeExistsError

    validate_topic_name(name)
    if store.client.exists(topic_path(name)) is not None:
        raise TopicExistsError(f"topic {name!r} already exists")
    if store.client.exists(delete_topic_path(name)) is not None:
        raise TopicExistsError(f"topic {name!r} is being deleted; try again shortly")
    config = _topic_store(store).create_topic(name, num_partitions, schema=schema,
                                              configs=configs)
    assignment = preferred_replicas(config.partitions, store.view.brokers(),
                                    start=zlib.crc32(name.encode()))
    try:
        store.client.create(topic_path(name), encode_assignment(assignment), makepath=True)
    except NodeExistsError:
        # we won the storage creation, so the node is ours: a retried create after a
        # lost reply, or a controller that registered the storage topic meanwhile
        pass
    wait_for_leaders(store, name, config.partitions, wait_s)
    return config


def delete_topic(store, name: str, *, wait_s: float = 30.0) -> None:
    """Ask the controller to delete ``name`` and wait until it is gone
    (UnknownTopicOrPartitionError if it does not exist; RequestTimedOutError if the
    controller did not finish within ``wait_s``; ``wait_s`` 0: ask, do not wait)."""
    from kazoo.exceptions import NodeExistsError

    validate_topic_name(name)
    in_zk = store.client.exists(topic_path(name)) is not None
    on_storage = store.topic_store is not None and store.topic_store.topic_exists(name)
    if not in_zk and not on_storage:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    try:
        store.client.create(delete_topic_path(name), b"", makepath=True)
    except NodeExistsError:
        pass
    if wait_s <= 0:
        return
    deadline = time.monotonic() + wait_s
    while store.client.exists(delete_topic_path(name)) is not None:
        if time.monotonic() >= deadline:
            raise RequestTimedOutError(
                f"topic {name!r}: deletion requested, the controller has not finished it "
                f"within {wait_s}s (is a controller elected?)")
        time.sleep(0.02)


def alter_topic(store, name: str, *, configs=None, delete_configs=None, partitions=None,
                wait_s: float = 10.0):
    """Change configs and/or grow the partition count; return the new TopicConfig."""
    from kazoo.exceptions import BadVersionError, NoNodeError

    new = _topic_store(store).alter_topic(name, configs=configs, delete_configs=delete_configs,
                                          partitions=partitions)
    path = topic_path(name)
    for _ in (cas_attempts(f"partition count of {path}") if partitions is not None else ()):
        try:
            data, stat = store.client.get(path)
        except NoNodeError:
            break  # not registered yet: the controller registers it with its full count
        current = decode_assignment(data, path)
        if len(current) >= new.partitions:
            break
        extra = preferred_replicas(new.partitions, store.view.brokers(),
                                   start=zlib.crc32(name.encode()))
        current.update({p: ids for p, ids in extra.items() if p not in current})
        try:
            store.client.set(path, encode_assignment(current), version=stat.version)
            break
        except BadVersionError:
            continue
    store.client.ensure_path(topic_config_path(name))
    store.client.set(topic_config_path(name), dumps(
        {"version": 1, "config": new.configs, "config_version": new.version}))
    if partitions is not None:
        wait_for_leaders(store, name, new.partitions, wait_s)
    return new
