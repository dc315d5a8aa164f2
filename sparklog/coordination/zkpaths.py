"""The ZooKeeper layout of a sparklog cluster (Kafka 0.8's, under one chroot).

Every path below is relative to the chroot of the connect string
(``host:port[,host:port...][/chroot]``); the value of each node is UTF-8 JSON in Kafka's
schema (``version`` 1), so Kafka operators' habits (``zkCli.sh get /brokers/ids/1``) work:

* ``/brokers/ids/<id>`` (ephemeral): ``{"version","host","port","timestamp","jmx_port"}``
* ``/brokers/topics/<topic>``: ``{"version","partitions":{"0":[broker ids]}}``
* ``/brokers/topics/<topic>/partitions/<p>/state``:
  ``{"version","controller_epoch","leader","leader_epoch","isr"}``
* ``/controller`` (ephemeral): ``{"version","brokerid","timestamp"}``
* ``/controller_epoch``: the epoch as a decimal number
* ``/admin/delete_topics/<topic>``: empty, a deletion request for the controller
* ``/admin/controlled_shutdown/<id>``: empty, a broker asks to lose its leaderships
* ``/config/topics/<topic>``: ``{"version","config":{...},"config_version"}``
* ``/latest_producer_id_block``: ``{"version","broker","block_start","block_end"}``
* ``/cluster/id``: ``{"version","id"}``
* ``/consumers/<group>/ids/<consumer id>`` (ephemeral):
  ``{"version","subscription":{topic:1},"pattern","timestamp"}``
* ``/consumers/<group>/owners/<topic>/<p>`` (ephemeral): the owning consumer id
* ``/consumers/<group>/offsets/<topic>/<p>``: the committed offset (the next to read)
* ``/coordinators/slots/<slot>`` (ephemeral): ``{"version","brokerid","timestamp"}``, the
  broker coordinating the consumer groups of that slot; ``/coordinators/brokers/<id>``
  (ephemeral, empty): a broker able to coordinate groups
  (:mod:`sparklog.coordination.coordinators`)
* ``/sparklog/<name>``: sparklog's own shared documents (JSON objects:
  ``/sparklog/security/users``, ``/sparklog/security/acls``; readable by the brokers'
  identity only under ``zookeeper.set.acl``)

Every node not marked ephemeral is persistent. With HDFS replication in place of Kafka's ISR, a partition's ``isr`` is just ``[leader]``
and the assignment list of ``/brokers/topics/<topic>`` is every broker that may lead it,
in preference order (the first is the preferred leader).
"""

from __future__ import annotations

import json
import time

from ..errors import CoordinationError, InvalidConfigError
from ..names import validate_topic_name, znode_name
from .base import NO_LEADER, BrokerInfo, LeaderAndEpoch, validate_group_id

BROKERS_IDS = "/brokers/ids"
BROKERS_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
ADMIN_CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
CONFIG_TOPICS = "/config/topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
CONSUMERS = "/consumers"
DOCUMENTS = "/sparklog"

#: persistent nodes created on first connection (Kafka creates the same set)
PERSISTENT_PATHS = (BROKERS_IDS, BROKERS_TOPICS, ADMIN_DELETE_TOPICS,
                    ADMIN_CONTROLLED_SHUTDOWN, CONFIG_TOPICS, CONSUMERS)


# --- connect string ----------------------------------------------------------------------


def parse_zk_connect(connect) -> tuple[str, str]:
    """Split ``host:port[,host:port...][/chroot]`` into (hosts, chroot).

    The chroot is "" when absent, else starts with "/" and has no trailing "/".
    InvalidConfigError names the problem (empty, no port, bad port, bad chroot).
    """
    if not isinstance(connect, str) or not connect.strip():
        raise InvalidConfigError(f"zookeeper.connect must be a non-empty string, got {connect!r}")
    connect = connect.strip()
    slash = connect.find("/")
    hosts, chroot = (connect, "") if slash < 0 else (connect[:slash], connect[slash:])
    if not hosts:
        raise InvalidConfigError(f"zookeeper.connect {connect!r} names no host")
    for item in hosts.split(","):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfigError(
                f"zookeeper.connect {connect!r}: {item!r} is not host:port")
    chroot = chroot.rstrip("/")
    if chroot:
        parts = chroot.split("/")[1:]
        if any(p in ("", ".", "..") or any(ord(c) < 32 for c in p) for p in parts):
            raise InvalidConfigError(f"zookeeper.connect {connect!r}: bad chroot {chroot!r}")
    return hosts, chroot


# --- paths ---------------------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    """``/brokers/ids/<id>``."""
    return f"{BROKERS_IDS}/{check_broker_id(broker_id)}"


def topic_path(topic: str) -> str:
    """``/brokers/topics/<topic>`` (the topic name is validated)."""
    return f"{BROKERS_TOPICS}/{validate_topic_name(topic)}"


def partitions_path(topic: str) -> str:
    """``/brokers/topics/<topic>/partitions``."""
    return f"{topic_path(topic)}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    """``/brokers/topics/<topic>/partitions/<p>/state``."""
    return f"{partitions_path(topic)}/{int(partition)}/state"


def delete_topic_path(topic: str) -> str:
    """``/admin/delete_topics/<topic>``."""
    return f"{ADMIN_DELETE_TOPICS}/{validate_topic_name(topic)}"


def controlled_shutdown_path(broker_id: int) -> str:
    """``/admin/controlled_shutdown/<id>``."""
    return f"{ADMIN_CONTROLLED_SHUTDOWN}/{check_broker_id(broker_id)}"


def topic_config_path(topic: str) -> str:
    """``/config/topics/<topic>``."""
    return f"{CONFIG_TOPICS}/{validate_topic_name(topic)}"


def group_path(group: str) -> str:
    """``/consumers/<group>`` (the group id in its escaped form,
    sparklog.names.znode_name: unchanged for ``[A-Za-z0-9._-]`` ids)."""
    return f"{CONSUMERS}/{znode_name(validate_group_id(group))}"


def group_ids_path(group: str) -> str:
    """``/consumers/<group>/ids``."""
    return f"{group_path(group)}/ids"


def group_owners_path(group: str, topic: str) -> str:
    """``/consumers/<group>/owners/<topic>``."""
    return f"{group_path(group)}/owners/{validate_topic_name(topic)}"


def group_offsets_path(group: str, topic: str) -> str:
    """``/consumers/<group>/offsets/<topic>``."""
    return f"{group_path(group)}/offsets/{validate_topic_name(topic)}"


def document_path(name: str) -> str:
    """``/sparklog/<name>``: a shared document (``name`` a relative path)."""
    return f"{DOCUMENTS}/{name}"


def check_broker_id(broker_id) -> int:
    """Return ``broker_id`` if it is a non-negative int (broker.id), else InvalidConfigError."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise InvalidConfigError(f"broker.id must be a non-negative int, got {broker_id!r}")
    return broker_id


# --- node values -----------------------------------------------------------------------------


def dumps(value) -> bytes:
    """Encode a node value as compact UTF-8 JSON."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def loads(data: bytes, path: str):
    """Decode a node's JSON value; CoordinationError names the path when it is not JSON."""
    try:
        return json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CoordinationError(f"ZooKeeper node {path} holds invalid JSON: {exc}") from None


def decode_node(data: bytes, path: str, what: str, convert):
    """``convert`` applied to a node's JSON value; CoordinationError naming the path when
    the value is not JSON or does not have the shape of ``what`` (``convert`` raised
    TypeError, KeyError, ValueError or AttributeError)."""
    value = loads(data, path)
    try:
        return convert(value)
    except (TypeError, KeyError, ValueError, AttributeError):
        raise CoordinationError(f"ZooKeeper node {path} is not {what}: {value!r}") from None


def _object(value) -> dict:
    """A JSON object as a dict ({} for an empty node); TypeError for anything else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(type(value).__name__)
    return value


def decode_document(data: bytes, path: str) -> dict:
    """A shared document's JSON object ({} for an empty node); CoordinationError names
    the path when the node holds something else."""
    return decode_node(data, path, "a JSON object", _object)


def now_ms() -> int:
    """Wall-clock time in milliseconds (Kafka's node timestamps)."""
    return int(time.time() * 1000)


def encode_broker(broker: BrokerInfo) -> bytes:
    """Kafka's broker registration JSON of ``broker``: ``host``/``port`` (the first
    listener's) and, with listeners, ``endpoints`` as ``NAME://host:port`` (version 4's
    field)."""
    node = {"version": 1, "host": broker.host, "port": broker.port, "jmx_port": -1,
            "timestamp": str(now_ms())}
    if broker.endpoints:
        node["version"] = 4
        node["endpoints"] = [f"{name}://{_bracketed(host)}:{port}"
                             for name, host, port in broker.endpoints]
    return dumps(node)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _endpoint(text: str) -> tuple[str, str, int]:
    name, sep, address = text.partition("://")
    host, _, port = address.rpartition(":")
    if not sep or not name or not host:
        raise ValueError(text)
    return name, host.strip("[]"), int(port)


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    """Decode ``/brokers/ids/<id>`` (CoordinationError when malformed)."""
    return decode_node(
        data, broker_path(broker_id), "a broker registration",
        lambda value: BrokerInfo(broker_id, str(value["host"]), int(value["port"]),
                                 tuple(_endpoint(e) for e in value.get("endpoints", ()))))


def encode_state(state: LeaderAndEpoch, controller_epoch: int) -> bytes:
    """Kafka 0.8's leader-and-isr JSON (``isr`` is ``[leader]``: HDFS replicates)."""
    isr = [state.leader] if state.leader != NO_LEADER else []
    return dumps({"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                  "controller_epoch": controller_epoch, "isr": isr})


def decode_state(data: bytes, path: str) -> tuple[LeaderAndEpoch, int]:
    """Decode a partition's state node into (LeaderAndEpoch, controller epoch)."""
    return decode_node(
        data, path, "a partition state",
        lambda value: (LeaderAndEpoch(int(value["leader"]), int(value["leader_epoch"])),
                       int(value["controller_epoch"])))


def encode_assignment(assignment: dict) -> bytes:
    """Value of ``/brokers/topics/<topic>``: {partition: [broker ids]}."""
    return dumps({"version": 1,
                  "partitions": {str(p): list(ids) for p, ids in sorted(assignment.items())}})


def decode_assignment(data: bytes, path: str) -> dict[int, list[int]]:
    """Decode ``/brokers/topics/<topic>`` into {partition: [broker ids]}."""
    return decode_node(
        data, path, "a topic assignment",
        lambda value: {int(p): [int(b) for b in ids] for p, ids in value["partitions"].items()})
