"""API keys, supported versions and the body schema of every request and response.

Key numbers are Kafka's where Kafka has the API (Produce 0, Fetch 1, ListOffsets 2,
Metadata 3, OffsetCommit 8 ...) so that traces read alike; APIs of sparklog's own start
at 1000 (DescribeLog, for the Spark reader). Bodies are msgpack maps described with the
spec language of :mod:`sparklog.protocol.schema`; the tables below are the reference
(docs/protocol.md is written from them: ``python -m sparklog.protocol.apis`` prints them).

Conventions shared by every API:

* every response map has ``error_code`` (0 = none) and ``error_message`` at the top for
  request-level failures, and the same two fields per topic/partition item;
* error codes are the ``code`` attributes of :mod:`sparklog.errors` classes;
* record data (``records``) is a msgpack ``bin`` holding whole frames, concatenated,
  exactly as stored (the frame format is :mod:`sparklog.format`).
"""

from __future__ import annotations

import enum

from .schema import MapOf, OneOf, Opt, describe


class ApiKey(enum.IntEnum):
    """Numeric API keys (Kafka's numbers where the API exists in Kafka)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_LOG = 1000


#: api key -> (min version, max version) this implementation speaks.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {int(k): (0, 0) for k in ApiKey}

# acks values (Kafka's)
ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1
# ListOffsets special timestamps (Kafka's)
LATEST_TIMESTAMP, EARLIEST_TIMESTAMP = -1, -2
#: ListOffsets: the record of the largest timestamp (Kafka's KIP-734, ListOffsets v7)
MAX_TIMESTAMP = -3
#: "no offset committed" / "no offset for that timestamp"
NO_OFFSET = -1
#: FindCoordinator key types (Kafka's): a consumer group; a transactional id (not served)
COORDINATOR_KEY_GROUP, COORDINATOR_KEY_TRANSACTION = 0, 1

_ERR = {"error_code": int, "error_message": Opt(str, "")}


def _with_err(fields: dict) -> dict:
    out = dict(_ERR)
    out.update(fields)
    return out


_CONFIG_VALUE = OneOf(str, int, float, bool)
#: an ACL binding (the filter form has every field optional: Opt(..., None))
_ACL = {"principal": str, "host": str, "operation": str, "permission": str,
        "resource_type": str, "resource_name": str, "pattern_type": Opt(str, "LITERAL")}
_ACL_FILTER = {k: Opt(str, None) for k in _ACL}
_TOPIC_PARTITIONS = [{"name": str, "partitions": [int]}]

#: api key -> request body spec
REQUESTS: dict[int, dict] = {
    ApiKey.API_VERSIONS: {},
    ApiKey.SASL_HANDSHAKE: {"mechanism": str},
    ApiKey.SASL_AUTHENTICATE: {"auth_bytes": bytes},
    ApiKey.DESCRIBE_ACLS: {"filter": _ACL_FILTER},
    ApiKey.CREATE_ACLS: {"creations": [_ACL]},
    ApiKey.DELETE_ACLS: {"filters": [_ACL_FILTER]},
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": Opt([str], None)},  # None = all
    ApiKey.DESCRIBE_CLIENT_QUOTAS: {"entity_type": Opt(str, None), "entity_name": Opt(str, None)},
    ApiKey.ALTER_CLIENT_QUOTAS: {"entries": [{
        "entity_type": str, "entity_name": str,            # users|clients, <default>
        "set": Opt(MapOf(str, OneOf(int, float)), {}), "remove": Opt([str], [])}]},
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {
        # upsertions carry the password: the broker salts and hashes it (over TLS only)
        "upsertions": Opt([{"name": str, "mechanism": str, "password": str,
                            "iterations": Opt(int, 4096)}], []),
        "deletions": Opt([{"name": str, "mechanism": str}], []),
    },
    ApiKey.METADATA: {
        "topics": Opt([str], None),          # None = every topic
        "allow_auto_topic_creation": Opt(bool, False),
    },
    ApiKey.CREATE_TOPICS: {
        "topics": [{
            "name": str,
            "num_partitions": Opt(int, -1),    # -1 = broker's num.partitions
            "configs": Opt(MapOf(str, _CONFIG_VALUE), {}),
            "schema": Opt(bytes, None),        # Arrow IPC schema message: a typed topic
        }],
        "validate_only": Opt(bool, False),
        "timeout_ms": Opt(int, 30000),
    },
    ApiKey.DELETE_TOPICS: {
        "topics": [str],
        "timeout_ms": Opt(int, 30000),
    },
    ApiKey.DESCRIBE_CONFIGS: {
        "topics": [str],
    },
    ApiKey.ALTER_CONFIGS: {
        "topics": [{
            "name": str,
            "set": Opt(MapOf(str, _CONFIG_VALUE), {}),
            "delete": Opt([str], []),
            "num_partitions": Opt(int, None),  # grow the partition count
        }],
        "validate_only": Opt(bool, False),
    },
    ApiKey.PRODUCE: {
        "acks": Opt(int, ACKS_LEADER),        # 0, 1 or -1 (all)
        "timeout_ms": Opt(int, 30000),
        "topics": [{
            "name": str,
            "partitions": [{
                "partition": int,
                "records": bytes,
                # InitProducerId's token of the producer id the frames name (frames
                # with a producer id need it: docs/security.md)
                "producer_token": Opt(bytes, None),
            }],
        }],
    },
    ApiKey.FETCH: {
        "max_wait_ms": Opt(int, 500),
        "min_bytes": Opt(int, 1),
        "max_bytes": Opt(int, 52428800),
        "topics": [{
            "name": str,
            "partitions": [{
                "partition": int,
                "fetch_offset": int,
                "partition_max_bytes": Opt(int, 1048576),
            }],
        }],
    },
    ApiKey.LIST_OFFSETS: {
        "topics": [{
            "name": str,
            "partitions": [{"partition": int, "timestamp": int}],  # -1 latest, -2 earliest
        }],
    },
    ApiKey.DELETE_RECORDS: {
        "topics": [{
            "name": str,
            # delete the records before offset (-1: the high watermark); an offline
            # partition whose log lost its tail restarts at its old end (offset -1 or it)
            "partitions": [{"partition": int, "offset": int}],
        }],
        "timeout_ms": Opt(int, 30000),
    },
    ApiKey.OFFSET_COMMIT: {
        "group_id": str,
        "generation_id": Opt(int, -1),        # -1: a simple (unmanaged) consumer
        "member_id": Opt(str, ""),
        "group_instance_id": Opt(str, None),
        "topics": [{
            "name": str,
            "partitions": [{"partition": int, "offset": int, "metadata": Opt(str, "")}],
        }],
    },
    ApiKey.OFFSET_FETCH: {
        "group_id": str,
        "topics": Opt(_TOPIC_PARTITIONS, None),  # None = every committed partition
    },
    ApiKey.INIT_PRODUCER_ID: {
        "transactional_id": Opt(str, None),
        "transaction_timeout_ms": Opt(int, 60000),
        "producer_id": Opt(int, -1),          # >= 0 with its epoch: bump the epoch
        "producer_epoch": Opt(int, -1),
    },
    ApiKey.FIND_COORDINATOR: {
        "key": str,                           # the group id
        "key_type": Opt(int, COORDINATOR_KEY_GROUP),
    },
    ApiKey.JOIN_GROUP: {
        "group_id": str,
        "member_id": Opt(str, ""),            # "" on the first join
        "topics": [str],                      # the subscription
        "session_timeout_ms": Opt(int, 10000),
        "rebalance_timeout_ms": Opt(int, 30000),
        # Kafka's classic protocol (the leader assigns; SyncGroup): both or neither
        "protocol_type": Opt(str, None),
        "protocols": Opt([{"name": str, "metadata": bytes}], None),  # preferred first
        "group_instance_id": Opt(str, None),  # a static member (KIP-345)
    },
    ApiKey.SYNC_GROUP: {
        "group_id": str,
        "generation_id": int,
        "member_id": str,
        "group_instance_id": Opt(str, None),
        # the leader's: each member's assignment and the topic-partitions it gives
        "assignments": Opt([{"member_id": str, "assignment": bytes,
                             "partitions": Opt(_TOPIC_PARTITIONS, [])}], []),
        # when given, the group's (else InconsistentGroupProtocol)
        "protocol_type": Opt(str, None),
        "protocol_name": Opt(str, None),
    },
    ApiKey.HEARTBEAT: {
        "group_id": str,
        "generation_id": int,
        "member_id": str,
        "group_instance_id": Opt(str, None),
    },
    ApiKey.LEAVE_GROUP: {
        "group_id": str,
        "member_id": str,                     # "" with a group_instance_id: its member
        "group_instance_id": Opt(str, None),
    },
    ApiKey.LIST_GROUPS: {},
    ApiKey.DESCRIBE_GROUPS: {
        "groups": [str],
    },
    ApiKey.DELETE_GROUPS: {
        "groups": [str],
    },
    ApiKey.DESCRIBE_LOG: {
        "topics": [{"name": str, "partitions": Opt([int], None)}],  # None = all
    },
}

_PARTITION_ERR = {"partition": int, **_ERR}

#: api key -> response body spec
RESPONSES: dict[int, dict] = {
    ApiKey.SASL_HANDSHAKE: _with_err({"mechanisms": [str]}),
    ApiKey.SASL_AUTHENTICATE: _with_err({"auth_bytes": Opt(bytes, b""),
                                         "session_lifetime_ms": Opt(int, 0)}),
    ApiKey.DESCRIBE_ACLS: _with_err({"acls": [_ACL]}),
    ApiKey.CREATE_ACLS: _with_err({"results": [dict(_ERR)]}),
    ApiKey.DELETE_ACLS: _with_err({"results": [_with_err({"acls": [_ACL]})]}),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _with_err({"entries": [{
        "entity_type": str, "entity_name": str, "values": MapOf(str, OneOf(int, float))}]}),
    ApiKey.ALTER_CLIENT_QUOTAS: _with_err({"results": [_with_err({
        "entity_type": str, "entity_name": str})]}),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _with_err({
        "users": [_with_err({"name": str, "mechanisms": [str]})]}),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _with_err({"results": [_with_err({"name": str})]}),
    ApiKey.API_VERSIONS: _with_err({
        "api_versions": [[int]],              # [api_key, min_version, max_version]
        "broker_id": Opt(int, -1),
        "cluster_id": Opt(str, ""),
    }),
    ApiKey.METADATA: _with_err({
        "cluster_id": Opt(str, ""),
        "controller_id": Opt(int, -1),
        "brokers": [{"node_id": int, "host": str, "port": int}],
        "topics": [_with_err({
            "name": str,
            "typed": Opt(bool, False),
            "partitions": [{**_PARTITION_ERR, "leader": int, "leader_epoch": int,
                            # compacted partitions led by the answering broker: its
                            # cleaner's dirty ratio (-1: not known there)
                            "dirty_ratio": Opt(float, -1.0)}],
        })],
    }),
    ApiKey.CREATE_TOPICS: _with_err({
        "topics": [_with_err({"name": str, "num_partitions": Opt(int, -1)})],
    }),
    ApiKey.DELETE_TOPICS: _with_err({
        "topics": [_with_err({"name": str})],
    }),
    ApiKey.DESCRIBE_CONFIGS: _with_err({
        "topics": [_with_err({
            "name": str,
            "num_partitions": Opt(int, -1),
            "schema": Opt(bytes, None),         # Arrow IPC schema message, None = raw topic
            "configs": Opt(MapOf(str, _CONFIG_VALUE), {}),   # every key, effective value
            "explicit": Opt([str], []),         # keys set on the topic (not defaults)
        })],
    }),
    ApiKey.ALTER_CONFIGS: _with_err({
        "topics": [_with_err({"name": str})],
    }),
    ApiKey.PRODUCE: _with_err({
        "topics": [{
            "name": str,
            "partitions": [{
                **_PARTITION_ERR,
                "base_offset": int,             # offset of the first record, -1 on error
                "log_append_time_ms": Opt(int, -1),
                "log_start_offset": Opt(int, -1),
            }],
        }],
        "throttle_time_ms": Opt(int, 0),        # a quota delayed this connection
    }),
    ApiKey.FETCH: _with_err({
        "topics": [{
            "name": str,
            "partitions": [{
                **_PARTITION_ERR,
                "high_watermark": int,
                "log_start_offset": int,
                "records": bytes,               # whole frames from the one holding fetch_offset
            }],
        }],
        "throttle_time_ms": Opt(int, 0),        # a quota delayed this connection
    }),
    ApiKey.DELETE_RECORDS: _with_err({
        "topics": [{
            "name": str,
            "partitions": [{**_PARTITION_ERR,
                            "low_watermark": Opt(int, -1)}],  # the new log start offset
        }],
    }),
    ApiKey.LIST_OFFSETS: _with_err({
        "topics": [{
            "name": str,
            "partitions": [{**_PARTITION_ERR, "offset": int, "timestamp": Opt(int, -1)}],
        }],
    }),
    ApiKey.OFFSET_COMMIT: _with_err({
        "topics": [{"name": str, "partitions": [_PARTITION_ERR]}],
    }),
    ApiKey.OFFSET_FETCH: _with_err({
        "topics": [{
            "name": str,
            "partitions": [{**_PARTITION_ERR, "offset": int, "metadata": Opt(str, "")}],
        }],
    }),
    ApiKey.INIT_PRODUCER_ID: _with_err({
        "producer_id": int,
        "producer_epoch": int,
        "producer_token": Opt(bytes, b""),    # sent with the id's frames in Produce
    }),
    ApiKey.FIND_COORDINATOR: _with_err({     # CoordinatorNotAvailable while none
        "node_id": Opt(int, -1),
        "host": Opt(str, ""),
        "port": Opt(int, -1),
    }),
    ApiKey.JOIN_GROUP: _with_err({
        "generation_id": int,
        "member_id": str,
        "leader_id": Opt(str, ""),
        "members": Opt([str], []),
        "assignment": Opt(_TOPIC_PARTITIONS, []),
        # a member of Kafka's classic protocol: the generation's protocol and, to the
        # leader, every member's metadata of it
        "protocol_type": Opt(str, None),
        "protocol_name": Opt(str, None),
        "skip_assignment": Opt(bool, False),  # a static leader rejoining a Stable group
        "member_protocols": Opt([{"member_id": str, "group_instance_id": Opt(str, None),
                                  "metadata": bytes}], []),
    }),
    ApiKey.SYNC_GROUP: _with_err({"assignment": Opt(bytes, b""),
                                  "protocol_type": Opt(str, None),
                                  "protocol_name": Opt(str, None)}),
    ApiKey.HEARTBEAT: dict(_ERR),
    ApiKey.LEAVE_GROUP: dict(_ERR),
    ApiKey.LIST_GROUPS: _with_err({
        "groups": [{"group_id": str, "state": str,
                    "protocol_type": Opt(str, "consumer")}],  # Kafka's, e.g. connect
    }),
    ApiKey.DESCRIBE_GROUPS: _with_err({
        "groups": [_with_err({
            "group_id": str,
            "state": str,   # Empty | Stable | PreparingRebalance | CompletingRebalance | Dead
            "generation_id": Opt(int, -1),
            "protocol_type": Opt(str, None),    # Kafka's classic protocol: and its
            "protocol": Opt(str, ""),           # protocol of the generation
            "members": Opt([{
                "member_id": str,
                "client_id": Opt(str, ""),
                "client_host": Opt(str, ""),
                "assignment": Opt(_TOPIC_PARTITIONS, []),  # the broker's assignment
                "group_instance_id": Opt(str, None),
                "metadata": Opt(bytes, b""),    # its metadata of the protocol
                "assigned": Opt(bytes, b""),    # the leader's assignment of it
            }], []),
        })],
    }),
    ApiKey.DELETE_GROUPS: _with_err({
        "groups": [_with_err({"group_id": str})],  # NonEmptyGroup, GroupIdNotFound
    }),
    ApiKey.DESCRIBE_LOG: _with_err({
        "storage_root": Opt(str, ""),
        "topics": [_with_err({
            "name": str,
            "typed": Opt(bool, False),
            "partitions": [{
                **_PARTITION_ERR,
                "log_start_offset": int,
                "high_watermark": int,
                "log_end_offset": int,
                "segments": [{
                    "base_offset": int,
                    "path": str,                  # URL of the segment file on the storage
                    "size": int,                  # readable bytes (up to the high watermark)
                    "sealed": bool,
                }],
            }],
        })],
    }),
}

assert set(REQUESTS) == set(RESPONSES) == set(SUPPORTED_VERSIONS)


def api_name(key: int) -> str:
    """CamelCase name of an api key (``ListOffsets``), or ``Api<key>`` if unknown."""
    name = _API_NAMES.get(key)
    if name is None:
        name = f"Api{key}"
    return name


#: api key -> name, built once: every response decoded names its api (for errors)
_API_NAMES = {int(k): "".join(p.capitalize() for p in k.name.split("_")) for k in ApiKey}


def reference_markdown() -> str:
    """The request/response tables as markdown (the source of docs/protocol.md's
    API reference)."""
    lines = []
    for key in ApiKey:
        lo, hi = SUPPORTED_VERSIONS[key]
        lines.append(f"### {api_name(key)} (key {int(key)}, versions {lo}-{hi})\n")
        lines.append(f"- request: `{describe(REQUESTS[key])}`")
        lines.append(f"- response: `{describe(RESPONSES[key])}`\n")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(reference_markdown())
