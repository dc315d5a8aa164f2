"""Kafka's APIs on a sparklog broker: each Kafka request is answered by the broker's own
handler of the same API (sparklog's protocol follows Kafka's API keys), through the
same authorizer, quotas and metrics; this module only translates.

:class:`KafkaApis` is what a connection of a Kafka listener calls instead of the broker's
request handler (:mod:`sparklog.server.server`): it decodes Kafka's frames with the
codecs generated from Kafka's message specs (:mod:`sparklog.protocol.kafka`), turns the
request into the body of the broker's handler (``dispatch(api_key, body, ctx)``), and
the handler's answer into Kafka's response of the version the client asked for. A
client's record batches are stored as it sent them, and Arrow frames are converted to
Kafka batches on fetch (:mod:`.records`); consumer groups follow Kafka's classic
protocol on the broker's group coordinator (:mod:`sparklog.server.group`): the leader
member assigns, the broker hands its assignment out verbatim.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from kio.schema.consumer_protocol_assignment.v0 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription import v0 as _sub_v0
from kio.schema.consumer_protocol_subscription import v1 as _sub_v1
from kio.schema.consumer_protocol_subscription import v2 as _sub_v2
from kio.schema.consumer_protocol_subscription import v3 as _sub_v3
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from ...errors import InconsistentGroupProtocolError, InvalidArgumentError, SparklogError
from ...format.header import NO_PRODUCER_ID
from ...protocol.apis import REQUESTS, ApiKey, api_name
from ...protocol.codec import error_fields
from ...protocol.kafka import (
    KafkaDecodeError,
    KafkaUnsupportedVersionError,
    RequestHeader,
    api_versions_entries,
    decode_request,
    encode_response_values,
    unsupported_version_response,
)
from ...protocol.kafka.entities import build, plain
from ...protocol.schema import check
from ...security.binding import ProducerIdBinding
from ...security.session import principal_of
from ..group import CONSUMER_PROTOCOL_TYPE
from .records import batches_of_frames, client_batch

log = logging.getLogger(__name__)

#: ``await dispatch(api_key, body, ctx)``: the broker's answer to a decoded request
Dispatch = Callable[[int, dict, Any], Awaitable["dict | None"]]

_KNOWN_CODES = {int(c.value) for c in ErrorCode}
#: sparklog's own error codes -> Kafka's nearest
_KAFKA_CODE = {1002: 87, 1001: 15}
#: readers of ConsumerProtocolSubscription by version (a newer one read as v3)
_SUBSCRIPTION_READERS = [entity_reader(m.ConsumerProtocolSubscription)
                         for m in (_sub_v0, _sub_v1, _sub_v2, _sub_v3)]
_ASSIGNMENT_WRITER = entity_writer(ConsumerProtocolAssignment)
_ASSIGNMENT_READER = entity_reader(ConsumerProtocolAssignment)
#: DescribeConfigs resource types (Kafka's ConfigResource.Type)
_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4
#: DescribeConfigs config sources (Kafka's): set on the topic, a default
_TOPIC_CONFIG, _DEFAULT_CONFIG = 1, 5


def kafka_code(code: int) -> int:
    """The Kafka error code of a sparklog error code."""
    code = _KAFKA_CODE.get(code, code)
    return code if code in _KNOWN_CODES else -1


def _err(fields: dict) -> dict:
    """``error_code``/``error_message`` of a sparklog answer, in Kafka's codes."""
    return {"error_code": kafka_code(fields.get("error_code", 0)),
            "error_message": fields.get("error_message") or None}


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a consumer's ConsumerProtocolSubscription (any version: fields a
    newer version adds after v3's are ignored, as Kafka's consumer does)."""
    data = memoryview(metadata)
    if len(data) < 2:
        raise InvalidArgumentError("JoinGroup: protocol metadata shorter than its version")
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        raise InvalidArgumentError(f"JoinGroup: consumer subscription version {version}")
    try:
        sub, _ = _SUBSCRIPTION_READERS[min(version, 3)](data, 2)
    except Exception as exc:
        raise InvalidArgumentError(
            f"JoinGroup: protocol metadata is not a consumer subscription: {exc}") from None
    return list(sub.topics)


def assignment_partitions(data: bytes) -> list:
    """The ``[{name, partitions}]`` of a ConsumerProtocolAssignment (any version: what a
    newer one adds after v0's fields is ignored); empty when the bytes are not one (the
    leader's bytes are handed out verbatim all the same)."""
    view = memoryview(data)
    if len(view) < 2 or int.from_bytes(view[:2], "big", signed=True) < 0:
        return []
    try:
        assignment, _ = _ASSIGNMENT_READER(view, 2)
    except Exception:
        return []
    return [{"name": t.topic, "partitions": [int(p) for p in t.partitions]}
            for t in assignment.assigned_partitions]


def assignment_bytes(assignment: list) -> bytes:
    """A ConsumerProtocolAssignment v0 of sparklog's ``[{name, partitions}]``."""
    import io

    out = io.BytesIO()
    out.write(b"\x00\x00")
    _ASSIGNMENT_WRITER(out, build(ConsumerProtocolAssignment, {"assigned_partitions": [
        {"topic": a["name"], "partitions": a["partitions"]} for a in assignment]}))
    return out.getvalue()


class KafkaApis:
    """Answers the requests of Kafka listeners (module docstring).

    ``dispatch`` is the broker's :meth:`~sparklog.server.broker.Broker.dispatch`;
    ``address(session)`` the advertised (host, port) of the listener a session
    connected to; ``broker_id`` the broker's id; ``binding`` the cluster's :class:`~sparklog.security.binding.ProducerIdBinding`: a
    Kafka client carries no producer token, so a Produce request's token is the one
    binding its batches' producer id to the connection's principal, which any broker
    of the cluster computes, whichever broker answered InitProducerId."""

    def __init__(self, dispatch: Dispatch, *, broker_id: int, address,
                 binding: ProducerIdBinding):
        self.dispatch = dispatch
        self.broker_id = broker_id
        self.address = address
        self.binding = binding
        self._handlers = {
            ApiKey.API_VERSIONS: self.api_versions, ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets, 23: self.offset_for_leader_epoch,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group, 14: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat, ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit, ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.LIST_GROUPS: self.list_groups, ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.CREATE_TOPICS: self.create_topics, ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
        }

    # --- the connection's side -----------------------------------------------------------
    @staticmethod
    def decode(payload) -> tuple[RequestHeader, Any]:
        """(header, request) of a Kafka frame; the request is None for an ApiVersions
        above the versions served (answered with KIP-511's error). Malformed bytes and
        other unsupported versions raise InvalidArgumentError: the connection closes,
        as Kafka's does."""
        try:
            # kio reads a read-only buffer: a large request's is viewed, not copied
            return decode_request(payload if isinstance(payload, bytes)
                                  else memoryview(payload).toreadonly())
        except KafkaUnsupportedVersionError as exc:
            if exc.header.api_key == ApiKey.API_VERSIONS:
                return exc.header, None
            raise InvalidArgumentError(f"Kafka request refused: {exc}") from None
        except KafkaDecodeError as exc:
            raise InvalidArgumentError(f"Kafka request refused: {exc}") from None

    @staticmethod
    def sasl_body(header: RequestHeader, request) -> dict:
        """The broker's body of a SaslHandshake or SaslAuthenticate request."""
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            return {"mechanism": request.mechanism}
        if header.api_key == ApiKey.SASL_AUTHENTICATE:
            return {"auth_bytes": bytes(request.auth_bytes)}
        raise InvalidArgumentError(
            f"Kafka request of api key {header.api_key} before authentication")

    def encode(self, header: RequestHeader, answer: dict) -> bytes:
        """The Kafka frame of a sparklog answer to SaslHandshake/SaslAuthenticate or of a
        refusal (``error_code``/``error_message`` only)."""
        fields = _err(answer)
        if header.api_key == ApiKey.SASL_AUTHENTICATE:
            fields.update(auth_bytes=answer.get("auth_bytes", b""),
                          session_lifetime=answer.get("session_lifetime_ms", 0))
        elif header.api_key == ApiKey.SASL_HANDSHAKE:
            fields.update(mechanisms=answer.get("mechanisms", []))
        return self._frame(header, fields)

    def _frame(self, header: RequestHeader, fields: dict) -> bytes:
        return b"".join(encode_response_values(header, fields))

    async def handle(self, header: RequestHeader, request, ctx) -> bytes | None:
        """The encoded answer to one request (None: none due, a Produce with acks=0)."""
        if request is None:
            return unsupported_version_response(header)
        handler = self._handlers.get(header.api_key)
        try:
            if handler is None:
                raise InvalidArgumentError(f"api key {header.api_key} is not served")
            fields = await handler(header.api_version, plain(request), ctx)
        except SparklogError as exc:
            log.info("Kafka %s request %d from %s (%s) refused: %s", header.api_key,
                     header.correlation_id, ctx.client_host, ctx.client_id, exc)
            fields = self._refusal(header, request, error_fields(exc))
        if fields is None:
            return None
        return self._frame(header, fields)

    def _refusal(self, header: RequestHeader, request, answer: dict) -> dict:
        """A whole request refused: the error at the top and on every item asked for."""
        err = _err(answer)
        req = plain(request)
        key = header.api_key
        if key == ApiKey.PRODUCE:
            return {"responses": [{"name": t["name"], "partition_responses": [
                {"index": p["index"], **err, "base_offset": -1}
                for p in t["partition_data"]]} for t in req["topic_data"]]}
        if key == ApiKey.FETCH:
            return {**err, "responses": [{"topic": t["topic"], "partitions": [
                {"partition_index": p["partition"], **err, "high_watermark": -1}
                for p in t["partitions"]]} for t in req["topics"]]}
        if key == ApiKey.METADATA:
            return {"brokers": [], "topics": [{"name": t["name"], **err, "partitions": []}
                                              for t in req.get("topics") or []]}
        return err

    async def _call(self, api_key: int, body: dict, ctx) -> dict:
        """The broker's answer to ``body``, checked (and its defaults filled) by the
        broker's request spec first, as a request of its own protocol would be."""
        body = check(body, REQUESTS[api_key], api_name(api_key))
        return await self.dispatch(api_key, body, ctx) or {}

    # --- connection set-up -----------------------------------------------------------
    async def api_versions(self, version: int, req: dict, ctx) -> dict:
        """ApiVersions: the versions of :data:`~sparklog.protocol.kafka.ADVERTISED`."""
        return {"error_code": 0, "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, lo, hi in api_versions_entries()]}

    async def metadata(self, version: int, req: dict, ctx) -> dict:
        """Metadata: brokers on the listener the client connected to, topics with their
        partitions' leader (each partition's only replica: HDFS keeps the copies).
        Before v4 a request may create topics (Kafka's rule); v0's empty list and
        later versions' null mean every topic."""
        topics = req.get("topics")
        names = None if topics is None or (version == 0 and not topics) \
            else [t["name"] for t in topics]
        auto = req.get("allow_auto_topic_creation", True) if version >= 4 else True
        answer = await self._call(ApiKey.METADATA, {
            "topics": names, "allow_auto_topic_creation": auto}, ctx)
        out_topics = []
        for t in answer["topics"]:
            parts = [{"partition_index": p["partition"], **_err(p), "leader_id": p["leader"],
                      "leader_epoch": p["leader_epoch"],
                      "replica_nodes": [p["leader"]] if p["leader"] >= 0 else [],
                      "isr_nodes": [p["leader"]] if p["leader"] >= 0 else []}
                     for p in t["partitions"]]
            out_topics.append({"name": t["name"], **_err(t), "is_internal": False,
                               "partitions": parts, "topic_authorized_operations": -2147483648})
        return {"brokers": [{"node_id": b["node_id"], "host": b["host"], "port": b["port"]}
                            for b in answer["brokers"]],
                "cluster_id": answer.get("cluster_id") or None,
                "controller_id": answer.get("controller_id", -1), "topics": out_topics}

    # --- records ---------------------------------------------------------------------
    async def init_producer_id(self, version: int, req: dict, ctx) -> dict:
        """InitProducerId: the broker's id and epoch. A Kafka client carries no producer
        token, so that the id may only be used by the principal that obtained it, the
        pair is recorded cluster-wide before the answer
        (:meth:`~sparklog.security.binding.ProducerIdBinding.claim`); :meth:`_token`
        then computes the token for that principal only."""
        answer = await self._call(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": req.get("transactional_id"),
            "transaction_timeout_ms": req.get("transaction_timeout", 60000),
            "producer_id": req.get("producer_id", -1),
            "producer_epoch": req.get("producer_epoch", -1)}, ctx)
        if not answer.get("error_code") and answer.get("producer_id", -1) >= 0:
            principal = str(principal_of(getattr(ctx, "session", None)))
            await asyncio.get_running_loop().run_in_executor(
                None, self.binding.claim, answer["producer_id"], principal)
        return {**_err(answer), "producer_id": answer.get("producer_id", -1),
                "producer_epoch": answer.get("producer_epoch", -1)}

    async def _token(self, producer_id: int, ctx) -> bytes | None:
        """The token binding ``producer_id`` (a batch's) to the connection's principal
        when that principal obtained it (:meth:`init_producer_id`, through any broker);
        None when the batch names none or it is another's (the broker then refuses the
        partition with INVALID_PRODUCER_ID_MAPPING)."""
        if producer_id == NO_PRODUCER_ID:
            return None
        principal = str(principal_of(getattr(ctx, "session", None)))
        if not self.binding.known(producer_id, principal) \
                and not await asyncio.get_running_loop().run_in_executor(
                    None, self.binding.obtained, producer_id, principal):
            return None
        return self.binding.token(producer_id, principal)

    async def produce(self, version: int, req: dict, ctx) -> dict | None:
        """Produce (v3+): each partition's one batch goes to the broker's Produce as it
        is (the second frame kind), which checks it as Kafka's LogValidator does and
        against the producer state, and appends it with only its base offset and
        leader epoch patched; a partition whose batch is refused is answered with the
        error naming the batch and field, the others are appended."""
        refused: dict[tuple[str, int], dict] = {}
        topics = []
        for t in req["topic_data"]:
            parts = []
            for p in t["partition_data"]:
                try:
                    records = p["records"] or b""
                    header = client_batch(records, f"{t['name']}-{p['index']}", version)
                    token = await self._token(header.producer_id, ctx)
                    parts.append({"partition": p["index"], "records": records,
                                  "producer_token": token})
                except SparklogError as exc:
                    refused[(t["name"], p["index"])] = _err(error_fields(exc))
            topics.append({"name": t["name"], "partitions": parts})
        acks = req["acks"]
        answer = None
        if any(t["partitions"] for t in topics):
            answer = await self._call(ApiKey.PRODUCE, {
                "acks": acks, "timeout_ms": req.get("timeout", 30000),
                "topics": [t for t in topics if t["partitions"]]}, ctx)
        if acks == 0:
            return None
        results: dict[str, list] = {}
        if answer is not None and answer.get("error_code"):
            raise _answer_error(answer)
        for t in (answer or {}).get("topics", []):
            for p in t["partitions"]:
                results.setdefault(t["name"], []).append({
                    "index": p["partition"], **_err(p), "base_offset": p["base_offset"],
                    "log_append_time": p.get("log_append_time_ms", -1),
                    "log_start_offset": p.get("log_start_offset", -1)})
        for (name, index), err in refused.items():
            results.setdefault(name, []).append({"index": index, **err, "base_offset": -1,
                                                 "log_append_time": -1, "log_start_offset": -1})
        return {"responses": [{"name": n, "partition_responses": ps}
                              for n, ps in results.items()]}

    async def fetch(self, version: int, req: dict, ctx) -> dict:
        """Fetch (v4-12, no fetch sessions: session id 0): the broker's frames from the
        one holding each fetch offset, as Kafka batches (stored ones unchanged, Arrow
        frames converted); read_committed reads up to the high watermark (transactions
        wait)."""
        answer = await self._call(ApiKey.FETCH, {
            "max_wait_ms": req.get("max_wait", 500), "min_bytes": req.get("min_bytes", 1),
            "max_bytes": req.get("max_bytes", 52428800),
            "topics": [{"name": t["topic"], "partitions": [
                {"partition": p["partition"], "fetch_offset": p["fetch_offset"],
                 "partition_max_bytes": p["partition_max_bytes"]}
                for p in t["partitions"]]} for t in req["topics"]]}, ctx)
        if answer.get("error_code"):
            raise _answer_error(answer)
        responses = []
        for t in answer["topics"]:
            parts = []
            for p in t["partitions"]:
                item = {"partition_index": p["partition"], **_err(p),
                        "high_watermark": p["high_watermark"],
                        "last_stable_offset": p["high_watermark"],
                        "log_start_offset": p["log_start_offset"],
                        "aborted_transactions": None, "preferred_read_replica": -1,
                        "records": b""}
                if not p.get("error_code"):
                    try:
                        item["records"] = batches_of_frames(p["records"])
                    except SparklogError as exc:
                        item.update(_err(error_fields(exc)))
                parts.append(item)
            responses.append({"topic": t["name"], "partitions": parts})
        return {"error_code": 0, "session_id": 0, "responses": responses}

    async def list_offsets(self, version: int, req: dict, ctx) -> dict:
        """ListOffsets (v1-7): earliest (-2), latest (-1) or the first offset at a time."""
        answer = await self._call(ApiKey.LIST_OFFSETS, {"topics": [
            {"name": t["name"], "partitions": [
                {"partition": p["partition_index"], "timestamp": p["timestamp"]}
                for p in t["partitions"]]} for t in req["topics"]]}, ctx)
        if answer.get("error_code"):
            raise _answer_error(answer)
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition"], **_err(p), "offset": p.get("offset", -1),
             "timestamp": p.get("timestamp", -1), "leader_epoch": -1}
            for p in t["partitions"]]} for t in answer["topics"]]}

    async def offset_for_leader_epoch(self, version: int, req: dict, ctx) -> dict:
        """OffsetForLeaderEpoch (v2-4): a partition's log has one line of history (a
        leader never truncates what it acknowledged: HDFS holds one copy), so the end of
        any epoch a consumer asks about is the log end; -1 when the partition is not
        served here."""
        answer = await self._call(ApiKey.LIST_OFFSETS, {"topics": [
            {"name": t["topic"], "partitions": [
                {"partition": p["partition"], "timestamp": -1} for p in t["partitions"]]}
            for t in req["topics"]]}, ctx)
        asked = {(t["topic"], p["partition"]): p["leader_epoch"]
                 for t in req["topics"] for p in t["partitions"]}
        return {"topics": [{"topic": t["name"], "partitions": [
            {"partition": p["partition"], **_err(p),
             "leader_epoch": asked.get((t["name"], p["partition"]), -1),
             "end_offset": p.get("offset", -1) if not p.get("error_code") else -1}
            for p in t["partitions"]]} for t in answer.get("topics", [])]}

    # --- groups ----------------------------------------------------------------------
    async def find_coordinator(self, version: int, req: dict, ctx) -> dict:
        """FindCoordinator (v0-4; v4 batches keys): the broker's answer, with the
        address of the coordinator on this listener."""
        keys = req.get("coordinator_keys") if version >= 4 else [req["key"]]
        found = []
        for key in keys or []:
            try:
                answer = await self._call(ApiKey.FIND_COORDINATOR, {
                    "key": key, "key_type": req.get("key_type", 0)}, ctx)
            except SparklogError as exc:
                answer = error_fields(exc)
            node = answer.get("node_id", -1)
            host, port = answer.get("host", ""), answer.get("port", -1)
            if node == self.broker_id:
                host, port = self.address(getattr(ctx, "session", None))
            found.append({"key": key, **_err(answer), "node_id": node, "host": host,
                          "port": port})
        if version >= 4:
            return {"coordinators": found}
        first = found[0] if found else {"error_code": 15, "node_id": -1, "host": "", "port": -1}
        return {k: v for k, v in first.items() if k != "key"}

    async def join_group(self, version: int, req: dict, ctx) -> dict:
        """JoinGroup: Kafka's classic protocol on the broker's coordinator (the member's
        protocols and their metadata passed untouched; the leader gets every member's
        metadata of the chosen protocol and assigns). Any protocol type is served, as by
        Kafka: ``consumer`` (the subscribed topics are read from the consumer protocol's
        metadata), ``connect``, ``sr``...; a JoinGroup without a protocol type or
        protocols answers INCONSISTENT_GROUP_PROTOCOL, as Kafka's."""
        kind = req.get("protocol_type") or ""
        protocols = req.get("protocols") or []
        if not kind or not protocols:
            raise InconsistentGroupProtocolError(
                f"JoinGroup of group {req.get('group_id')!r}: a member names its protocol "
                f"type and at least one protocol (protocol type {kind!r}, "
                f"{len(protocols)} protocol(s))")
        topics = subscription_topics(protocols[0]["metadata"]) \
            if kind == CONSUMER_PROTOCOL_TYPE else []
        answer = await self._call(ApiKey.JOIN_GROUP, {
            "group_id": req["group_id"], "member_id": req.get("member_id", ""),
            "topics": topics, "session_timeout_ms": req.get("session_timeout", 10000),
            "rebalance_timeout_ms": req.get("rebalance_timeout",
                                            req.get("session_timeout", 30000)),
            "protocol_type": kind, "group_instance_id": req.get("group_instance_id"),
            "protocols": [{"name": p["name"], "metadata": bytes(p["metadata"])}
                          for p in protocols]}, ctx)
        if answer.get("error_code"):
            return {**_err(answer), "generation_id": -1, "member_id": req.get("member_id", ""),
                    "leader": "", "protocol_name": None, "members": []}
        return {"error_code": 0, "generation_id": answer["generation_id"],
                "protocol_type": kind, "protocol_name": answer.get("protocol_name"),
                "leader": answer["leader_id"], "member_id": answer["member_id"],
                "skip_assignment": answer.get("skip_assignment", False),
                "members": [{"member_id": m["member_id"],
                             "group_instance_id": m.get("group_instance_id"),
                             "metadata": m["metadata"]}
                            for m in answer.get("member_protocols", [])]}

    async def sync_group(self, version: int, req: dict, ctx) -> dict:
        """SyncGroup: the leader's assignment of the member, verbatim (the leader's
        request carries everyone's; a follower's waits for it), with the group's
        protocol type and protocol (v5+: those the request names must be the group's,
        else INCONSISTENT_GROUP_PROTOCOL)."""
        answer = await self._call(ApiKey.SYNC_GROUP, {
            "group_id": req["group_id"], "generation_id": req["generation_id"],
            "member_id": req["member_id"], "group_instance_id": req.get("group_instance_id"),
            "protocol_type": req.get("protocol_type"),
            "protocol_name": req.get("protocol_name"),
            "assignments": [{"member_id": a["member_id"], "assignment": bytes(a["assignment"]),
                             "partitions": assignment_partitions(a["assignment"])}
                            for a in req.get("assignments") or []]}, ctx)
        return {**_err(answer), "protocol_type": answer.get("protocol_type"),
                "protocol_name": answer.get("protocol_name"),
                "assignment": answer.get("assignment", b"")}

    async def heartbeat(self, version: int, req: dict, ctx) -> dict:
        """Heartbeat: the broker's (REBALANCE_IN_PROGRESS makes the member rejoin,
        FENCED_INSTANCE_ID stops a fenced static member)."""
        answer = await self._call(ApiKey.HEARTBEAT, {
            "group_id": req["group_id"], "generation_id": req["generation_id"],
            "member_id": req["member_id"],
            "group_instance_id": req.get("group_instance_id")}, ctx)
        return _err(answer)

    async def leave_group(self, version: int, req: dict, ctx) -> dict:
        """LeaveGroup (v0-2 one member, v3+ a batch of members, each by member id or a
        static member's instance id)."""
        members = req.get("members") if version >= 3 else [{"member_id": req["member_id"]}]
        out = []
        for m in members or []:
            try:
                answer = await self._call(ApiKey.LEAVE_GROUP, {
                    "group_id": req["group_id"], "member_id": m["member_id"],
                    "group_instance_id": m.get("group_instance_id")}, ctx)
            except SparklogError as exc:
                answer = error_fields(exc)
            out.append({"member_id": m["member_id"],
                        "group_instance_id": m.get("group_instance_id"), **_err(answer)})
        if version >= 3:
            return {"error_code": 0, "members": out}
        return {k: v for k, v in out[0].items() if k.startswith("error")} if out else {}

    async def offset_commit(self, version: int, req: dict, ctx) -> dict:
        """OffsetCommit (v2-9), applied in the order the connection sent them: Kafka
        handles a connection's requests one at a time, and a consumer's asynchronous
        commits go out without waiting for the answers, so the last one acknowledged
        must be the one stored (the connection's ordering lock, as for Produce)."""
        async with ctx.order:
            return await self._offset_commit(req, ctx)

    async def _offset_commit(self, req: dict, ctx) -> dict:
        answer = await self._call(ApiKey.OFFSET_COMMIT, {
            "group_id": req["group_id"],
            "generation_id": req.get("generation_id_or_member_epoch",
                                     req.get("generation_id", -1)),
            "member_id": req.get("member_id", ""),
            "group_instance_id": req.get("group_instance_id"),
            "topics": [{"name": t["name"], "partitions": [
                {"partition": p["partition_index"], "offset": p["committed_offset"],
                 "metadata": p.get("committed_metadata") or ""}
                for p in t["partitions"]]} for t in req["topics"]]}, ctx)
        if answer.get("error_code"):
            err = _err(answer)
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], **err} for p in t["partitions"]]}
                for t in req["topics"]]}
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition"], **_err(p)} for p in t["partitions"]]}
            for t in answer["topics"]]}

    async def offset_fetch(self, version: int, req: dict, ctx) -> dict:
        """OffsetFetch (v1-7 one group, v8+ a batch of groups)."""
        groups = req["groups"] if version >= 8 else [
            {"group_id": req["group_id"], "topics": req.get("topics")}]
        out = []
        for g in groups:
            asked = g.get("topics")
            body = {"group_id": g["group_id"], "topics": None if asked is None else [
                {"name": t["name"], "partitions": t["partition_indexes"]} for t in asked]}
            try:
                answer = await self._call(ApiKey.OFFSET_FETCH, body, ctx)
            except SparklogError as exc:
                answer = {**error_fields(exc), "topics": []}
            out.append({"group_id": g["group_id"], **_err(answer), "topics": [
                {"name": t["name"], "partitions": [
                    {"partition_index": p["partition"], **_err(p),
                     "committed_offset": p.get("offset", -1), "committed_leader_epoch": -1,
                     "metadata": p.get("metadata", "")}
                    for p in t["partitions"]]} for t in answer.get("topics", [])]})
        if version >= 8:
            return {"groups": out}
        return {k: v for k, v in out[0].items() if k != "group_id"}

    async def list_groups(self, version: int, req: dict, ctx) -> dict:
        """ListGroups: the broker's groups with their protocol type (``consumer`` for
        sparklog's own consumers' groups and those with only committed offsets)."""
        answer = await self._call(ApiKey.LIST_GROUPS, {}, ctx)
        return {**_err(answer), "groups": [
            {"group_id": g["group_id"],
             "protocol_type": g.get("protocol_type") or CONSUMER_PROTOCOL_TYPE,
             "group_state": g["state"], "group_type": "classic"}
            for g in answer.get("groups", [])]}

    async def describe_groups(self, version: int, req: dict, ctx) -> dict:
        """DescribeGroups: state, protocol type and protocol, members with their
        metadata and the assignment the leader gave them, verbatim (a group of
        sparklog's own consumers: the broker's assignment as Kafka's bytes, protocol
        type ``consumer``, protocol ``range``)."""
        answer = await self._call(ApiKey.DESCRIBE_GROUPS, {"groups": list(req["groups"])}, ctx)
        return {"groups": [
            {"group_id": g["group_id"], **_err(g), "group_state": g.get("state", "Dead"),
             "protocol_type": g.get("protocol_type") or CONSUMER_PROTOCOL_TYPE,
             "protocol_data": g["protocol"] if g.get("protocol_type") else "range",
             "authorized_operations": -2147483648,
             "members": [{"member_id": m["member_id"], "client_id": m.get("client_id", ""),
                          "client_host": m.get("client_host", ""),
                          "group_instance_id": m.get("group_instance_id"),
                          "member_metadata": m.get("metadata", b""),
                          "member_assignment": m["assigned"] if g.get("protocol_type")
                          else assignment_bytes(m.get("assignment", []))}
                         for m in g.get("members", [])]}
            for g in answer.get("groups", [])]}

    # --- topics ------------------------------------------------------------------------
    async def create_topics(self, version: int, req: dict, ctx) -> dict:
        """CreateTopics (v2-7): partitions and configs; the replication factor is HDFS's
        business (``dfs.replication``) and is not used."""
        answer = await self._call(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": t["name"], "num_partitions": t["num_partitions"],
                        "configs": {c["name"]: c["value"] for c in t.get("configs", [])
                                    if c.get("value") is not None}}
                       for t in req["topics"]],
            "validate_only": req.get("validate_only", False),
            "timeout_ms": req.get("timeout", 30000)}, ctx)
        # v5+: Kafka's Java admin reads the created topic's configs and replication
        # factor (a null list fails it); every partition has one replica, its leader
        return {"topics": [{"name": t["name"], **_err(t),
                            "num_partitions": t.get("num_partitions", -1),
                            "replication_factor": -1 if t.get("error_code") else 1,
                            "configs": []}
                           for t in answer["topics"]]}

    async def delete_topics(self, version: int, req: dict, ctx) -> dict:
        """DeleteTopics (v1-6; by name: topic ids wait)."""
        names = [t["name"] for t in req["topics"]] if version >= 6 else list(req["topic_names"])
        if any(n is None for n in names):
            raise InvalidArgumentError("DeleteTopics by topic id is not served: name the topics")
        answer = await self._call(ApiKey.DELETE_TOPICS, {
            "topics": names, "timeout_ms": req.get("timeout", 30000)}, ctx)
        return {"responses": [{"name": t["name"], **_err(t)} for t in answer["topics"]]}

    async def describe_configs(self, version: int, req: dict, ctx) -> dict:
        """DescribeConfigs (v1-4) of topics (every key, its value and whether it is set
        on the topic); a broker resource is answered with no configs."""
        results = []
        for r in req["resources"]:
            item = {"resource_type": r["resource_type"], "resource_name": r["resource_name"],
                    "error_code": 0, "error_message": None, "configs": []}
            if r["resource_type"] == _TOPIC_RESOURCE:
                try:
                    answer = await self._call(ApiKey.DESCRIBE_CONFIGS,
                                              {"topics": [r["resource_name"]]}, ctx)
                    topic = answer["topics"][0]
                    item.update(_err(topic))
                    keys = r.get("configuration_keys")
                    explicit = set(topic.get("explicit", []))
                    item["configs"] = [
                        {"name": k, "value": _config_text(v), "read_only": False,
                         "config_source": _TOPIC_CONFIG if k in explicit else _DEFAULT_CONFIG,
                         "is_sensitive": False, "is_default": k not in explicit}
                        for k, v in sorted(topic.get("configs", {}).items())
                        if keys is None or k in keys]
                except SparklogError as exc:
                    item.update(_err(error_fields(exc)))
            elif r["resource_type"] != _BROKER_RESOURCE:
                item.update(error_code=42, error_message=(
                    f"resource type {r['resource_type']} is not served (topics: 2, "
                    "brokers: 4)"))
            results.append(item)
        return {"results": results}


def _config_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _answer_error(answer: dict) -> SparklogError:
    """A request-level error of the broker's answer as an exception (refuses it whole)."""
    exc = SparklogError(answer.get("error_message") or f"error {answer.get('error_code')}")
    exc.code = answer.get("error_code", -1)
    return exc
