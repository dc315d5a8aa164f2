"""Offset requests shared by the consumer and the admin client: ListOffsets routed to
each partition's leader (with a metadata refresh and retry on NotLeader), and the
group's committed offsets (OffsetFetch)."""

from __future__ import annotations

import time

from ...errors import NotLeaderError, UnknownTopicOrPartitionError
from ...protocol.apis import ApiKey
from ...protocol.codec import error_from
from ..types import OffsetAndMetadata, TopicPartition
from .network import NetworkClient

_ATTEMPTS = 5


def _by_topic(items: dict) -> list[dict]:
    """``{tp: partition item}`` -> the protocol's ``[{name, partitions: [...]}]``."""
    topics: dict[str, list] = {}
    for tp, item in items.items():
        topics.setdefault(tp[0], []).append(item)
    return [{"name": t, "partitions": p} for t, p in topics.items()]


def list_offsets(client: NetworkClient, wanted: dict) -> dict:
    """``{TopicPartition: timestamp}`` (-1 latest, -2 earliest, else ms) ->
    ``{TopicPartition: (offset, timestamp)}``; offset -1 when no record has a timestamp
    at or after the one asked. Raises the partition's error (UnknownTopicOrPartition...)."""
    out = {}
    pending = {TopicPartition(*tp): ts for tp, ts in wanted.items()}
    for attempt in range(_ATTEMPTS):
        by_node: dict[int, dict] = {}
        for tp, ts in pending.items():
            leader = client.metadata.leader_for(tp)
            if leader < 0:
                client.topic_info(tp.topic, refresh=True)
                leader = client.metadata.leader_for(tp)
            by_node.setdefault(leader, {})[tp] = ts
        retry = {}
        for node, parts in by_node.items():
            body = {"topics": _by_topic({tp: {"partition": tp.partition, "timestamp": ts}
                                         for tp, ts in parts.items()})}
            resp = client.request(ApiKey.LIST_OFFSETS, body, node_id=node)
            for t in resp["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition"])
                    exc = error_from(p, f"ListOffsets of {tp.topic}-{tp.partition}")
                    if exc is None:
                        out[tp] = (p["offset"], p.get("timestamp", -1))
                    elif exc.retriable and attempt < _ATTEMPTS - 1 and \
                            not isinstance(exc, UnknownTopicOrPartitionError):
                        retry[tp] = parts[tp]
                    else:
                        raise exc
        if not retry:
            return out
        pending = retry
        client.refresh_metadata(sorted({tp.topic for tp in retry}))
        time.sleep(client.retry_backoff)
    raise NotLeaderError(f"no leader answered ListOffsets for {sorted(pending)}")


def fetch_committed(client: NetworkClient, group_id: str, partitions=None, *,
                    coordinator=None) -> dict:
    """``{TopicPartition: OffsetAndMetadata}`` committed by ``group_id`` for
    ``partitions`` (all of the group's when None); partitions without a commit are
    left out. Asked of the group's coordinator (``coordinator``: a
    :class:`~sparklog.clients.network.coordinator.GroupCoordinator` already in use, else
    found first)."""
    from .coordinator import GroupCoordinator

    topics: list[dict] | None = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topics = [{"name": t, "partitions": p} for t, p in by_topic.items()]
    if coordinator is None:
        coordinator = GroupCoordinator(client, group_id)
    resp = coordinator.request(ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": topics})
    out = {}
    for t in resp["topics"]:
        for p in t["partitions"]:
            exc = error_from(p, f"committed offset of group {group_id!r} for "
                                f"{t['name']}-{p['partition']}")
            if exc is not None:
                raise exc
            if p["offset"] >= 0:
                out[TopicPartition(t["name"], p["partition"])] = OffsetAndMetadata(
                    p["offset"], p.get("metadata", ""))
    return out


def commit_request(group_id: str, offsets: dict, generation_id: int = -1,
                   member_id: str = "") -> dict:
    """The OffsetCommit body for ``{tp: int | OffsetAndMetadata}``; raises
    InvalidArgumentError for a negative or non-int offset."""
    from ...errors import InvalidArgumentError

    items = {}
    for tp, value in offsets.items():
        tp = TopicPartition(*tp)
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        if isinstance(om.offset, bool) or not isinstance(om.offset, int) or om.offset < 0:
            raise InvalidArgumentError(
                f"commit offset for {tp.topic}-{tp.partition} must be an int >= 0, "
                f"got {om.offset!r}")
        items[tp] = {"partition": tp.partition, "offset": om.offset, "metadata": om.metadata}
    return {"group_id": group_id, "generation_id": generation_id, "member_id": member_id,
            "topics": _by_topic(items)}
