"""The Admin client: topics, configs, offsets and consumer groups (Kafka's AdminClient).

Every method sends one request and raises the first error the broker reports, as a
:mod:`sparklog.errors` class whose message names the topic or partition. Typed topics
take an Arrow schema, given as a ``pyarrow.Schema`` or as a schema spec string (see
:func:`parse_schema`).
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import pyarrow as pa

from ..errors import (
    BrokerNotAvailableError,
    InvalidArgumentError,
    InvalidConfigError,
    SparklogError,
)
from ..names import validate_group_id, validate_topic_name
from ..protocol.apis import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKey
from ..protocol.codec import raise_for_error
from .network.coordinator import coordinator_request
from .network.network import NetworkClient
from .network.offsets import commit_request, fetch_committed, list_offsets
from .types import OffsetAndTimestamp, PartitionInfo, TopicPartition


class _NewTopicFields(NamedTuple):
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict | None = None
    schema: object = None


class NewTopic(_NewTopicFields):
    """A topic to create, with kafka-python's arguments: ``NewTopic(name,
    num_partitions, replication_factor, topic_configs={...})``.

    ``num_partitions`` -1: the broker's ``num.partitions``. ``replication_factor``
    (-1: the storage's default) becomes the topic config ``replication.factor``: the
    HDFS replication (``dfs.replication``) of the topic's files where the storage has
    one (hdfs://, webhdfs://; ignored on file://). ``configs`` (alias
    ``topic_configs``): Kafka-named topic configs; a dict given third, as sparklog's
    earlier ``NewTopic(name, partitions, configs)``, is taken as the configs.
    ``schema`` makes a typed topic (pyarrow.Schema or a spec string for
    :func:`parse_schema`). ``replica_assignments`` has no meaning here (HDFS places
    replicas): only an empty one is accepted."""

    def __new__(cls, name, num_partitions=-1, replication_factor=-1, configs=None,
                schema=None, *, topic_configs=None, replica_assignments=None):
        if isinstance(replication_factor, dict):  # NewTopic(name, partitions, configs)
            replication_factor, configs = -1, replication_factor
        if topic_configs is not None:
            if configs is not None:
                raise InvalidArgumentError(
                    f"topic {name!r}: give configs or topic_configs, not both")
            configs = topic_configs
        if replica_assignments:
            raise InvalidArgumentError(
                f"topic {name!r}: replica_assignments are not supported (HDFS places the "
                "replicas of a topic's files; give replication_factor)")
        return super().__new__(cls, name, num_partitions, replication_factor, configs, schema)


class TopicDescription(NamedTuple):
    """A topic as :meth:`Admin.describe_topics` reports it."""

    name: str
    partitions: list  # of PartitionInfo
    schema: pa.Schema | None
    configs: dict
    explicit: list  # config keys set on the topic (the rest are defaults)

    @property
    def typed(self) -> bool:
        """True for a topic with a declared schema."""
        return self.schema is not None


class GroupDescription(NamedTuple):
    """A consumer group: state, generation and members (each a dict with member_id,
    client_id, client_host and assignment)."""

    group_id: str
    state: str
    generation_id: int
    members: list


# --- schema specs -------------------------------------------------------------------------

_FIELD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.$-]*)\s*:?\s+(.+?)\s*$", re.S)


def parse_schema(spec) -> pa.Schema:
    """An Arrow schema from a spec; raises InvalidArgumentError naming the bad part.

    Accepted forms:

    * a ``pyarrow.Schema`` (returned as is);
    * DDL-ish text: ``"id int64 not null, name string, price double,
      tags list<string>, at timestamp[ms], amount decimal128(10, 2)"``; types are
      Arrow's aliases (``int8``..``int64``, ``uint*``, ``float``/``double``, ``bool``,
      ``string``, ``binary``, ``date32``, ``timestamp[ms, tz=UTC]``...), ``list<T>`` and
      ``struct<a: T, b: T>``;
    * JSON: ``[{"name": "id", "type": "int64", "nullable": false}, ...]``.
    """
    if isinstance(spec, pa.Schema):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError(f"schema spec must be a non-empty string, got {spec!r}")
    text = spec.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
            fields = [pa.field(i["name"], _parse_type(i["type"]), i.get("nullable", True))
                      for i in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgumentError(f"schema JSON is invalid: {exc}") from None
    else:
        fields = [_parse_field(part) for part in _split_top(text, ",")]
    names = [f.name for f in fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidArgumentError(f"schema has duplicate columns {dupes}")
    return pa.schema(fields)


def _split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside of <>, () and []."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _parse_field(text: str) -> pa.Field:
    m = _FIELD.match(text)
    if not m:
        raise InvalidArgumentError(f"schema column {text!r} is not 'name type'")
    name, rest = m.group(1), m.group(2)
    nullable = True
    if re.search(r"\s+not\s+null$", rest, re.I):
        nullable = False
        rest = re.sub(r"\s+not\s+null$", "", rest, flags=re.I)
    return pa.field(name, _parse_type(rest), nullable)


def _parse_type(text: str) -> pa.DataType:
    t = text.strip()
    low = t.lower()
    if low.startswith("list<") and low.endswith(">"):
        return pa.list_(_parse_type(t[5:-1]))
    if low.startswith("struct<") and low.endswith(">"):
        return pa.struct([_parse_field(p) for p in _split_top(t[7:-1], ",")])
    m = re.fullmatch(r"decimal(?:128)?\(\s*(\d+)\s*,\s*(\d+)\s*\)", low)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    m = re.fullmatch(r"timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*tz\s*=\s*([^\]]+))?\]", t)
    if m:
        return pa.timestamp(m.group(1), tz=m.group(2).strip() if m.group(2) else None)
    aliases = {"long": "int64", "int": "int32", "integer": "int32", "short": "int16",
               "byte": "int8", "boolean": "bool", "str": "string", "text": "string",
               "bytes": "binary", "date": "date32", "timestamp": "timestamp[ms]"}
    try:
        return pa.type_for_alias(aliases.get(low, low))
    except (ValueError, KeyError):
        raise InvalidArgumentError(f"unknown column type {t!r} in schema spec") from None


def schema_to_spec(schema: pa.Schema) -> str:
    """The DDL-ish text of a schema (inverse of :func:`parse_schema` for the types it
    knows)."""
    def typ(t):
        if pa.types.is_list(t):
            return f"list<{typ(t.value_type)}>"
        if pa.types.is_struct(t):
            return "struct<" + ", ".join(fld(t.field(i)) for i in range(t.num_fields)) + ">"
        if pa.types.is_decimal(t):
            return f"decimal128({t.precision}, {t.scale})"
        if pa.types.is_timestamp(t):
            return f"timestamp[{t.unit}" + (f", tz={t.tz}]" if t.tz else "]")
        return str(t)

    def fld(f):
        return f"{f.name} {typ(f.type)}" + ("" if f.nullable else " not null")

    return ", ".join(fld(f) for f in schema)


class Admin:
    """Administrative operations; ``Admin(bootstrap_servers="host:port")``; TLS and
    SASL settings as kafka-python names them (``security_protocol``, ``ssl_cafile``,
    ``sasl_mechanism`` ...: :mod:`sparklog.security.client`)."""

    def __init__(self, bootstrap_servers=None, *, client_id: str = "sparklog-admin",
                 request_timeout_ms: int = 30000, **security_configs):
        from ..security.client import CLIENT_SECURITY_DEFAULTS, ClientSecurity

        unknown = set(security_configs) - set(CLIENT_SECURITY_DEFAULTS)
        if unknown:
            raise InvalidConfigError(f"unknown admin config(s) {sorted(unknown)}; known: "
                                     "client_id, request_timeout_ms, "
                                     f"{', '.join(CLIENT_SECURITY_DEFAULTS)}")
        self._client = NetworkClient(bootstrap_servers, client_id=client_id,
                                     request_timeout_ms=request_timeout_ms,
                                     security=ClientSecurity.from_configs(security_configs))
        self._timeout_ms = request_timeout_ms

    # --- topics -----------------------------------------------------------------------
    def create_topics(self, new_topics, validate_only: bool = False) -> None:
        """Create topics (NewTopic items, or names for default settings)."""
        items = []
        for t in new_topics:
            t = NewTopic(t) if isinstance(t, str) else NewTopic(*t)
            validate_topic_name(t.name)
            if isinstance(t.num_partitions, bool) or not isinstance(t.num_partitions, int) \
                    or t.num_partitions == 0 or t.num_partitions < -1:
                raise InvalidArgumentError(
                    f"topic {t.name!r}: num_partitions must be a positive int, "
                    f"got {t.num_partitions!r}")
            configs = dict(t.configs or {})
            if t.replication_factor not in (None, -1):
                rf = t.replication_factor
                if isinstance(rf, bool) or not isinstance(rf, int) or rf < 1:
                    raise InvalidArgumentError(
                        f"topic {t.name!r}: replication_factor must be a positive int or "
                        f"-1, got {rf!r}")
                configs["replication.factor"] = rf
            item = {"name": t.name, "num_partitions": t.num_partitions, "configs": configs}
            if t.schema is not None:
                item["schema"] = parse_schema(t.schema).serialize().to_pybytes()
            items.append(item)
        resp = self._client.request(ApiKey.CREATE_TOPICS, {
            "topics": items, "validate_only": validate_only, "timeout_ms": self._timeout_ms})
        for t in resp["topics"]:
            raise_for_error(t, f"create topic {t['name']!r}")

    def create_topic(self, name: str, partitions: int = -1, configs: dict | None = None,
                     schema=None) -> None:
        """Create one topic (see :class:`NewTopic`)."""
        self.create_topics([NewTopic(name, partitions, configs=configs, schema=schema)])

    def delete_topics(self, topics) -> None:
        """Delete topics and their data."""
        topics = [validate_topic_name(t) for t in ([topics] if isinstance(topics, str)
                                                    else topics)]
        resp = self._client.request(ApiKey.DELETE_TOPICS, {
            "topics": topics, "timeout_ms": self._timeout_ms})
        for t in resp["topics"]:
            raise_for_error(t, f"delete topic {t['name']!r}")

    def list_topics(self) -> list[str]:
        """Names of every topic, sorted."""
        return sorted(self._client.refresh_metadata().topics)

    def describe_topics(self, topics=None) -> list[TopicDescription]:
        """Partitions (leader, epoch), schema and configs of topics (default: all)."""
        if topics is None:
            topics = self.list_topics()
        elif isinstance(topics, str):
            topics = [topics]
        topics = [validate_topic_name(t) for t in topics]
        if not topics:
            return []
        meta = self._client.refresh_metadata(topics)
        configs = self._describe_configs(topics)
        out = []
        for name in topics:
            info = meta.topic(name)
            if info is None:
                raise meta.missing(name)
            c = configs[name]
            schema = pa.ipc.read_schema(pa.py_buffer(c["schema"])) if c.get("schema") \
                else None
            out.append(TopicDescription(name, list(info.partitions), schema,
                                        dict(c.get("configs", {})), list(c.get("explicit", []))))
        return out

    def _describe_configs(self, topics) -> dict:
        resp = self._client.request(ApiKey.DESCRIBE_CONFIGS, {"topics": list(topics)})
        out = {}
        for t in resp["topics"]:
            raise_for_error(t, f"topic {t['name']!r}")
            out[t["name"]] = t
        return out

    def describe_configs(self, topics) -> dict:
        """``{topic: {config: effective value}}``."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        return {n: dict(t.get("configs", {})) for n, t in self._describe_configs(topics).items()}

    def alter_configs(self, configs: dict, *, delete: dict | None = None,
                      validate_only: bool = False) -> None:
        """Set topic configs: ``{topic: {key: value}}``; ``delete``: ``{topic: [keys]}``
        back to their defaults."""
        delete = delete or {}
        items = []
        for topic in sorted(set(configs) | set(delete)):
            validate_topic_name(topic)
            items.append({"name": topic, "set": dict(configs.get(topic) or {}),
                          "delete": list(delete.get(topic) or [])})
        self._alter(items, validate_only)

    def create_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (Kafka's CreatePartitions)."""
        validate_topic_name(topic)
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise InvalidArgumentError(f"partition count must be a positive int, got {total!r}")
        self._alter([{"name": topic, "num_partitions": total}], False)

    def _alter(self, items, validate_only) -> None:
        resp = self._client.request(ApiKey.ALTER_CONFIGS,
                                    {"topics": items, "validate_only": validate_only})
        for t in resp["topics"]:
            raise_for_error(t, f"alter topic {t['name']!r}")

    # --- offsets ----------------------------------------------------------------------
    def list_offsets(self, specs: dict) -> dict:
        """``{TopicPartition: "earliest" | "latest" | ms timestamp}`` ->
        ``{TopicPartition: OffsetAndTimestamp}`` (offset -1: no record at or after the
        timestamp)."""
        wanted = {}
        for tp, spec in specs.items():
            tp = TopicPartition(*tp)
            if spec == "earliest":
                wanted[tp] = EARLIEST_TIMESTAMP
            elif spec == "latest":
                wanted[tp] = LATEST_TIMESTAMP
            elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
                wanted[tp] = spec
            else:
                raise InvalidArgumentError(
                    f"offset spec for {tp} must be 'earliest', 'latest' or a ms timestamp, "
                    f"got {spec!r}")
        for topic in {tp.topic for tp in wanted}:
            self._client.topic_info(topic, refresh=True)
        return {tp: OffsetAndTimestamp(o, t)
                for tp, (o, t) in list_offsets(self._client, wanted).items()}

    def delete_records(self, offsets: dict) -> dict:
        """Kafka's ``delete_records``: ``{TopicPartition: offset}`` (-1: the high
        watermark) -> ``{TopicPartition: low watermark}``, the partitions' new log start
        offsets; the records before them are deleted. For a partition offline because
        its log lost its tail (its directory or newest segments were deleted outside
        the broker), give -1 or its old end offset: the loss is accepted and the log
        restarts there, never below (docs/operations.md, "Lost partition data")."""
        by_node: dict[int, dict] = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            validate_topic_name(tp.topic)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -1:
                raise InvalidArgumentError(
                    f"delete_records offset for {tp} must be -1 (the high watermark) or an "
                    f"offset >= 0, got {offset!r}")
            self._client.topic_info(tp.topic, refresh=True)
            by_node.setdefault(self._client.metadata.leader_for(tp), {})[tp] = offset
        out = {}
        for node, parts in by_node.items():
            topics: dict[str, list] = {}
            for tp, offset in parts.items():
                topics.setdefault(tp.topic, []).append(
                    {"partition": tp.partition, "offset": offset})
            resp = self._client.request(ApiKey.DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": self._timeout_ms}, node_id=node)
            for t in resp["topics"]:
                for p in t["partitions"]:
                    raise_for_error(p, f"delete records of {t['name']}-{p['partition']}")
                    out[TopicPartition(t["name"], p["partition"])] = p["low_watermark"]
        return out

    # --- groups -----------------------------------------------------------------------
    def list_consumer_groups(self) -> list[tuple[str, str]]:
        """``[(group_id, state)]`` of every group of the cluster: every broker is asked
        (as Kafka's admin does), since each knows the state of the groups it coordinates
        (the others list a group with committed offsets as ``Empty``). Brokers that
        cannot be reached are skipped while one answers."""
        meta = self._client.refresh_metadata([])
        states: dict[str, str] = {}
        failure: SparklogError | None = None
        answered = False
        for node in sorted(meta.brokers) or [-1]:
            try:
                resp = self._client.request(ApiKey.LIST_GROUPS, {}, node_id=node)
            except BrokerNotAvailableError as exc:
                failure = exc
                continue
            answered = True
            for g in resp["groups"]:
                if states.get(g["group_id"], "Empty") == "Empty":
                    states[g["group_id"]] = g["state"]
        if not answered and failure is not None:
            raise failure
        return sorted(states.items())

    def describe_consumer_groups(self, group_ids) -> list[GroupDescription]:
        """State, generation and members of groups."""
        group_ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)
        for group_id in group_ids:
            validate_group_id(group_id)
        out = []
        for g in self._per_coordinator(ApiKey.DESCRIBE_GROUPS, group_ids):
            raise_for_error(g, f"group {g['group_id']!r}")
            out.append(GroupDescription(g["group_id"], g["state"], g.get("generation_id", -1),
                                        list(g.get("members", []))))
        return out

    def delete_consumer_groups(self, group_ids) -> None:
        """Delete groups without active members, with their committed offsets (Kafka's
        DeleteGroups). Raises NonEmptyGroupError or GroupIdNotFoundError naming the
        group."""
        group_ids = [group_ids] if isinstance(group_ids, str) else list(group_ids)
        for g in self._per_coordinator(ApiKey.DELETE_GROUPS, group_ids):
            raise_for_error(g, f"delete group {g['group_id']!r}")

    def _per_coordinator(self, api_key: int, group_ids) -> list:
        """The ``groups`` items of DescribeGroups/DeleteGroups, each group asked of its
        own coordinator (one broker per group for the whole cluster)."""
        return [item for group_id in group_ids for item in coordinator_request(
            self._client, group_id, api_key, {"groups": [group_id]})["groups"]]

    def alter_consumer_group_offsets(self, group_id: str, offsets: dict) -> None:
        """Commit ``{TopicPartition: int | OffsetAndMetadata}`` for ``group_id`` (Kafka's
        alterConsumerGroupOffsets; the group should have no active members, which
        ``sparklog groups reset-offsets`` checks)."""
        if not isinstance(group_id, str) or not group_id:
            raise InvalidArgumentError(f"group id must be a non-empty str, got {group_id!r}")
        resp = coordinator_request(self._client, group_id, ApiKey.OFFSET_COMMIT,
                                   commit_request(group_id, offsets))
        for t in resp["topics"]:
            for p in t["partitions"]:
                raise_for_error(p, f"commit of {t['name']}-{p['partition']} for group "
                                   f"{group_id!r}")

    def list_consumer_group_offsets(self, group_id: str, partitions=None) -> dict:
        """``{TopicPartition: OffsetAndMetadata}`` committed by ``group_id`` (all its
        partitions, or those given)."""
        return fetch_committed(self._client, validate_group_id(group_id), partitions)

    # --- lifecycle --------------------------------------------------------------------
    # --- security (kafka-acls, kafka-configs --entity-type users) ---------------------
    def create_acls(self, bindings) -> None:
        """Add ACLs (:class:`~sparklog.security.acl.AclBinding` items)."""
        resp = self._client.request(ApiKey.CREATE_ACLS, {
            "creations": [b.to_dict() for b in bindings]})
        for b, r in zip(bindings, resp["results"]):
            raise_for_error(r, f"ACL {b}")

    def describe_acls(self, acl_filter=None) -> list:
        """The ACLs an :class:`~sparklog.security.acl.AclFilter` selects (all by
        default)."""
        from ..security.acl import AclBinding, AclFilter

        flt = acl_filter or AclFilter()
        resp = self._client.request(ApiKey.DESCRIBE_ACLS, {"filter": vars(flt)})
        return [AclBinding(**b) for b in resp["acls"]]

    def delete_acls(self, filters) -> list:
        """Remove the ACLs each filter selects; return those removed."""
        from ..security.acl import AclBinding

        resp = self._client.request(ApiKey.DELETE_ACLS, {"filters": [vars(f) for f in filters]})
        out = []
        for r in resp["results"]:
            raise_for_error(r, "delete ACLs")
            out += [AclBinding(**b) for b in r["acls"]]
        return out

    def alter_user_scram_credentials(self, upsertions=(), deletions=()) -> None:
        """Set SCRAM credentials: ``upsertions`` are ``(user, mechanism, password[,
        iterations])``, ``deletions`` ``(user, mechanism)``. The broker salts and hashes
        the password; it accepts one only over TLS or loopback."""
        body = {"upsertions": [{"name": u[0], "mechanism": u[1], "password": u[2],
                                "iterations": u[3] if len(u) > 3 else 4096}
                               for u in upsertions],
                "deletions": [{"name": u, "mechanism": m} for u, m in deletions]}
        resp = self._client.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        for r in resp["results"]:
            raise_for_error(r, f"SCRAM credential of user {r['name']!r}")

    def describe_user_scram_credentials(self, users=None) -> dict:
        """``{user: [mechanisms]}`` (of the given users, default all)."""
        resp = self._client.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {
            "users": list(users) if users is not None else None})
        out = {}
        for r in resp["users"]:
            raise_for_error(r, f"user {r['name']!r}")
            out[r["name"]] = list(r["mechanisms"])
        return out

    def alter_client_quotas(self, entity_type: str, entity_name: str, set_=None,
                            remove=()) -> None:
        """Set (``{"producer_byte_rate": 1048576}``) and remove quotas of a user or a
        client id (``entity_type`` ``users`` or ``clients``; ``<default>`` for all)."""
        resp = self._client.request(ApiKey.ALTER_CLIENT_QUOTAS, {"entries": [{
            "entity_type": entity_type, "entity_name": entity_name,
            "set": dict(set_ or {}), "remove": list(remove)}]})
        for r in resp["results"]:
            raise_for_error(r, f"quotas of {entity_type} {entity_name!r}")

    def describe_client_quotas(self, entity_type: str | None = None,
                               entity_name: str | None = None) -> dict:
        """``{(entity type, name): {quota: value}}``."""
        resp = self._client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {
            "entity_type": entity_type, "entity_name": entity_name})
        return {(e["entity_type"], e["entity_name"]): dict(e["values"])
                for e in resp["entries"]}

    def close(self) -> None:
        """Close the connections."""
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["Admin", "NewTopic", "TopicDescription", "GroupDescription", "PartitionInfo",
           "parse_schema", "schema_to_spec"]
