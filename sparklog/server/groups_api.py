"""Group APIs of the broker: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
ListGroups, DescribeGroups, DeleteGroups, OffsetCommit and OffsetFetch.

Membership is the :class:`~sparklog.server.group.GroupCoordinator`'s (memory);
offsets are the coordination store's (persistent). One broker coordinates each group
for the whole cluster (:mod:`sparklog.coordination.coordinators`): FindCoordinator
names it from any broker, and the group's requests sent elsewhere answer
NotCoordinator (a request-level error). ListGroups answers every broker's groups with
committed offsets. :class:`GroupApis` holds the collaborators; each handler is
``async (body, ctx) -> response dict``.
"""

from __future__ import annotations

from ..coordination.base import CommittedOffset
from ..errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InvalidArgumentError,
    NonEmptyGroupError,
    SparklogError,
)
from ..metadata import validate_partition
from ..names import validate_group_id
from ..protocol.apis import COORDINATOR_KEY_GROUP, NO_OFFSET, ApiKey
from ..protocol.codec import error_fields
from .group import CONSUMER_PROTOCOL_TYPE, EMPTY, GroupCoordinator

_OK = {"error_code": 0, "error_message": ""}


class GroupApis:
    """The group handlers (module docstring) and what they use: ``groups`` (the
    broker's :class:`~sparklog.server.group.GroupCoordinator`), ``store`` (the
    coordination store, which keeps committed offsets), ``partitions`` (the broker's
    :class:`~sparklog.server.partitions.PartitionManager`, for topic configs),
    ``run_io`` (runs a blocking call on the I/O threads), ``cluster`` (True in
    ZooKeeper mode, where Kafka 0.8 consumer groups registered there are described
    too, and FindCoordinator names brokers from the store's view) and ``listener``
    (``(session) -> (host, port)``, this broker's advertised address on the
    connection's listener: FindCoordinator's answer standalone)."""

    def __init__(self, groups: GroupCoordinator, store, partitions, *, run_io,
                 cluster: bool = False, listener=None):
        self.groups = groups
        self.store = store
        self.partitions = partitions
        self.run_io = run_io
        self.cluster = cluster
        self.listener = listener

    def handlers(self) -> dict:
        """api key -> ``handler(body, ctx)``."""
        return {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
        }

    async def find_coordinator(self, body, ctx) -> dict:
        """FindCoordinator (key type group): the broker coordinating the group, the same
        from every broker; CoordinatorNotAvailable while none does."""
        if body["key_type"] != COORDINATOR_KEY_GROUP:
            raise InvalidArgumentError(
                f"FindCoordinator key_type {body['key_type']} is not served: only "
                f"{COORDINATOR_KEY_GROUP} (a consumer group; sparklog has no transaction "
                "coordinator)")
        group_id = validate_group_id(body["key"])
        node = self.groups.coordinators.coordinator(group_id)
        session = getattr(ctx, "session", None)
        if not self.cluster:
            host, port = self.listener(session)
            return {**_OK, "node_id": node, "host": host, "port": port}
        broker = self.store.view.brokers().get(node) if node >= 0 else None
        if broker is None:
            raise CoordinatorNotAvailableError(
                f"group {group_id!r}: no live broker coordinates it now"
                + (f" (broker {node} holds its slot but is not registered)" if node >= 0
                   else "") + "; retry")
        listener = getattr(getattr(session, "listener", None), "name", None)
        host, port = broker.endpoint(listener)
        return {**_OK, "node_id": node, "host": host, "port": port}

    async def join_group(self, body, ctx) -> dict:
        """JoinGroup: waits for the rebalance; returns the member's assignment
        (sparklog's own consumers) or, with ``protocol_type`` and ``protocols`` (Kafka's
        clients), the generation's protocol and, to the leader, the members' metadata."""
        return await self.groups.join(
            body["group_id"], body["member_id"], body["topics"], client_id=ctx.client_id,
            client_host=ctx.client_host, session_timeout_ms=body["session_timeout_ms"],
            rebalance_timeout_ms=body["rebalance_timeout_ms"],
            protocol_type=body.get("protocol_type"), protocols=body.get("protocols"),
            group_instance_id=body.get("group_instance_id"))

    async def sync_group(self, body, ctx) -> dict:
        """SyncGroup (client-assigned groups): the leader's assignment of the member,
        with the group's protocol type and protocol."""
        assigned = await self.groups.sync(
            body["group_id"], body["generation_id"], body["member_id"],
            body.get("assignments") or [],
            group_instance_id=body.get("group_instance_id"),
            protocol_type=body.get("protocol_type"), protocol_name=body.get("protocol_name"))
        kind, name = self.groups.protocol(body["group_id"])
        return {**_OK, "assignment": assigned, "protocol_type": kind, "protocol_name": name}

    async def heartbeat(self, body, ctx) -> dict:
        """Heartbeat: errors tell the member to rejoin."""
        self.groups.heartbeat(body["group_id"], body["generation_id"], body["member_id"],
                              group_instance_id=body.get("group_instance_id"))
        return dict(_OK)

    async def leave_group(self, body, ctx) -> dict:
        """LeaveGroup (by member id, or by a static member's instance id)."""
        self.groups.leave(body["group_id"], body["member_id"],
                          group_instance_id=body.get("group_instance_id"))
        return dict(_OK)

    async def _known_groups(self) -> dict[str, str]:
        """State of every group with members here or committed offsets."""
        groups = {g: EMPTY for g in await self.run_io(self.store.list_groups)}
        for group_id, group in self.groups.groups.items():
            if group.members or group_id in groups:
                groups[group_id] = group.state
        return groups

    async def list_groups(self, body, ctx) -> dict:
        """ListGroups: groups with members here or with committed offsets, with their
        protocol type (the members' for Kafka's classic protocol, ``connect`` for Kafka
        Connect's workers; ``consumer`` for the others: sparklog's own consumers and
        groups that only have committed offsets)."""
        groups = await self._known_groups()
        return {**_OK, "groups": [
            {"group_id": g, "state": s,
             "protocol_type": self.groups.protocol(g)[0] or CONSUMER_PROTOCOL_TYPE}
            for g, s in sorted(groups.items())]}

    async def _describe(self, group_id: str, known: dict) -> dict:
        """The DescribeGroups item of one group (raises for a bad group id)."""
        item = self.groups.describe(group_id)
        if self.cluster and not item["members"]:
            from ..coordination.zkgroups import group_description

            # cluster mode: Kafka 0.8's consumer groups registered in ZooKeeper
            zk_item = await self.run_io(group_description, self.store, group_id)
            if zk_item["members"]:
                item = zk_item
        if item["state"] == "Dead" and group_id in known:
            item["state"] = EMPTY
        return item

    async def describe_groups(self, body, ctx) -> dict:
        """DescribeGroups: state, generation, members and their assignments."""
        known = await self._known_groups()
        out = []
        for group_id in body["groups"]:
            try:
                item = await self._describe(group_id, known)
            except SparklogError as exc:
                item = {"group_id": group_id, "state": "Dead", **error_fields(exc)}
            out.append(item)
        return {**_OK, "groups": out}

    async def delete_groups(self, body, ctx) -> dict:
        """DeleteGroups: forget groups without members (their committed offsets); a group
        with members answers NonEmptyGroup, an unknown one GroupIdNotFound."""
        known = await self._known_groups()
        out = []
        for group_id in body["groups"]:
            item = {"group_id": group_id, **_OK}
            try:
                described = await self._describe(group_id, known)
                if described["members"]:
                    raise NonEmptyGroupError(
                        f"group {group_id!r} has {len(described['members'])} active member(s): "
                        "stop its consumers first")
                if group_id not in known:
                    raise GroupIdNotFoundError(f"consumer group {group_id!r} does not exist")
                await self.run_io(self.store.delete_offsets, group_id)
                self.groups.groups.pop(group_id, None)
            except SparklogError as exc:
                item.update(error_fields(exc))
            out.append(item)
        return {**_OK, "groups": out}

    async def offset_commit(self, body, ctx) -> dict:
        """OffsetCommit: all partitions of the request are stored in one atomic write."""
        group_id = body["group_id"]
        failure = None
        try:
            validate_group_id(group_id)  # an invalid id: each partition's error, as Kafka
        except SparklogError as exc:
            failure = exc
        else:
            self.groups.check_coordinator(group_id)  # request-level: the client re-finds it
            try:
                self.groups.check_commit(group_id, body["generation_id"], body["member_id"],
                                         group_instance_id=body.get("group_instance_id"))
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
                    tc = await self.partitions.topic_config(t["name"])
                    validate_partition(p["partition"], tc.partitions, t["name"])
                    offsets[(t["name"], p["partition"])] = CommittedOffset(
                        p["offset"], p["metadata"])
                except SparklogError as exc:
                    item.update(error_fields(exc))
                results.append((t["name"], item))
        if offsets:
            try:
                await self.run_io(self.store.commit_offsets, group_id, offsets)
            except SparklogError as exc:
                for topic, item in results:
                    if not item["error_code"]:
                        item.update(error_fields(exc))
        topics: dict[str, list] = {}
        for topic, item in results:
            topics.setdefault(topic, []).append(item)
        return {**_OK, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}

    async def offset_fetch(self, body, ctx) -> dict:
        """OffsetFetch: committed offsets (-1 where none)."""
        group_id = body["group_id"]
        self.groups.check_coordinator(group_id)
        if body["topics"] is None:
            found = await self.run_io(self.store.fetch_offsets, group_id)
            keys = sorted(found)
        else:
            keys = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
            found = await self.run_io(self.store.fetch_offsets, group_id, keys)
        topics: dict[str, list] = {}
        for topic, partition in keys:
            om = found.get((topic, partition))
            topics.setdefault(topic, []).append({
                "partition": partition, **_OK,
                "offset": om.offset if om is not None else NO_OFFSET,
                "metadata": om.metadata if om is not None else ""})
        return {**_OK, "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}
