"""Group APIs of the broker: JoinGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups, DeleteGroups, OffsetCommit and OffsetFetch.

Membership is the :class:`~sparklog.writer.broker.group.GroupCoordinator`'s (memory);
offsets are the coordination store's (persistent). Each handler is
``async (broker, body, ctx) -> response dict``.
"""

from __future__ import annotations

from ...coordination.base import OffsetAndMetadata
from ...errors import GroupIdNotFoundError, NonEmptyGroupError, SparklogError
from ...metadata import validate_partition
from ...names import validate_group_id
from ...protocol.apis import NO_OFFSET, ApiKey
from ...protocol.codec import error_fields
from .group import EMPTY

_OK = {"error_code": 0, "error_message": ""}


async def join_group(broker, body, ctx) -> dict:
    """JoinGroup: waits for the rebalance; returns the member's assignment."""
    result = await broker.groups.join(
        body["group_id"], body["member_id"], body["topics"], client_id=ctx.client_id,
        client_host=ctx.client_host, session_timeout_ms=body["session_timeout_ms"],
        rebalance_timeout_ms=body["rebalance_timeout_ms"])
    return result


async def heartbeat(broker, body, ctx) -> dict:
    """Heartbeat: errors tell the member to rejoin."""
    broker.groups.heartbeat(body["group_id"], body["generation_id"], body["member_id"])
    return dict(_OK)


async def leave_group(broker, body, ctx) -> dict:
    """LeaveGroup."""
    broker.groups.leave(body["group_id"], body["member_id"])
    return dict(_OK)


async def _known_groups(broker) -> dict[str, str]:
    groups = {g: EMPTY for g in await broker.run_io(broker.store.list_groups)}
    for group_id, group in broker.groups.groups.items():
        if group.members or group_id in groups:
            groups[group_id] = group.state
    return groups


async def list_groups(broker, body, ctx) -> dict:
    """ListGroups: groups with members here or with committed offsets."""
    groups = await _known_groups(broker)
    return {**_OK, "groups": [{"group_id": g, "state": s} for g, s in sorted(groups.items())]}


async def _describe(broker, group_id: str, known: dict) -> dict:
    """The DescribeGroups item of one group (raises for a bad group id)."""
    item = broker.groups.describe(group_id)
    if broker.leadership is not None and not item["members"]:
        from ...coordination.zkgroups import group_description

        # cluster mode: Kafka 0.8's consumer groups registered in ZooKeeper
        zk_item = await broker.run_io(group_description, broker.store, group_id)
        if zk_item["members"]:
            item = zk_item
    if item["state"] == "Dead" and group_id in known:
        item["state"] = EMPTY
    return item


async def describe_groups(broker, body, ctx) -> dict:
    """DescribeGroups: state, generation, members and their assignments."""
    known = await _known_groups(broker)
    out = []
    for group_id in body["groups"]:
        try:
            item = await _describe(broker, group_id, known)
        except SparklogError as exc:
            item = {"group_id": group_id, "state": "Dead", **error_fields(exc)}
        out.append(item)
    return {**_OK, "groups": out}


async def delete_groups(broker, body, ctx) -> dict:
    """DeleteGroups: forget groups without members (their committed offsets); a group
    with members answers NonEmptyGroup, an unknown one GroupIdNotFound."""
    known = await _known_groups(broker)
    out = []
    for group_id in body["groups"]:
        item = {"group_id": group_id, **_OK}
        try:
            described = await _describe(broker, group_id, known)
            if described["members"]:
                raise NonEmptyGroupError(
                    f"group {group_id!r} has {len(described['members'])} active member(s): "
                    "stop its consumers first")
            if group_id not in known:
                raise GroupIdNotFoundError(f"consumer group {group_id!r} does not exist")
            await broker.run_io(broker.store.delete_offsets, group_id)
            broker.groups.groups.pop(group_id, None)
        except SparklogError as exc:
            item.update(error_fields(exc))
        out.append(item)
    return {**_OK, "groups": out}


async def offset_commit(broker, body, ctx) -> dict:
    """OffsetCommit: all partitions of the request are stored in one atomic write."""
    group_id = body["group_id"]
    failure = None
    try:
        validate_group_id(group_id)
        broker.groups.check_commit(group_id, body["generation_id"], body["member_id"])
    except SparklogError as exc:
        failure = exc
    results: list[tuple[str, dict]] = []
    offsets = {}
    for t in body["topics"]:
        for p in t["partitions"]:
            item = {"partition": p["partition"], **_OK}
            try:
                if failure is not None:
                    raise failure
                tc = await broker.topic_config(t["name"])
                validate_partition(p["partition"], tc.partitions, t["name"])
                offsets[(t["name"], p["partition"])] = OffsetAndMetadata(
                    p["offset"], p["metadata"])
            except SparklogError as exc:
                item.update(error_fields(exc))
            results.append((t["name"], item))
    if offsets:
        try:
            await broker.run_io(broker.store.commit_offsets, group_id, offsets)
        except SparklogError as exc:
            for topic, item in results:
                if not item["error_code"]:
                    item.update(error_fields(exc))
    topics: dict[str, list] = {}
    for topic, item in results:
        topics.setdefault(topic, []).append(item)
    return {**_OK, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}


async def offset_fetch(broker, body, ctx) -> dict:
    """OffsetFetch: committed offsets (-1 where none)."""
    group_id = validate_group_id(body["group_id"])
    if body["topics"] is None:
        found = await broker.run_io(broker.store.fetch_offsets, group_id)
        keys = sorted(found)
    else:
        keys = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
        found = await broker.run_io(broker.store.fetch_offsets, group_id, keys)
    topics: dict[str, list] = {}
    for topic, partition in keys:
        om = found.get((topic, partition))
        topics.setdefault(topic, []).append({
            "partition": partition, **_OK,
            "offset": om.offset if om is not None else NO_OFFSET,
            "metadata": om.metadata if om is not None else ""})
    return {**_OK, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}


#: api key -> ``handler(broker, body, ctx)``
HANDLERS = {
    ApiKey.JOIN_GROUP: join_group,
    ApiKey.HEARTBEAT: heartbeat,
    ApiKey.LEAVE_GROUP: leave_group,
    ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DESCRIBE_GROUPS: describe_groups,
    ApiKey.DELETE_GROUPS: delete_groups,
    ApiKey.OFFSET_COMMIT: offset_commit,
    ApiKey.OFFSET_FETCH: offset_fetch,
}
