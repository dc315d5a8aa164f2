"""Topic APIs of the broker: Metadata, CreateTopics, DeleteTopics, DescribeConfigs,
AlterConfigs and DescribeLog (segments for the Spark reader).

:class:`TopicApis` holds the collaborators they use; each handler is
``async (body, ctx) -> response dict``; per-topic failures are reported in the topic's
``error_code``/``error_message``, never as a failed request.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Callable

import pyarrow as pa

from ..errors import InvalidArgumentError, SparklogError, UnknownTopicOrPartitionError
from ..metadata.topic import TOPIC_CONFIGS, TopicConfig, validate_topic_name
from ..protocol.apis import ApiKey
from ..protocol.codec import error_fields
from .config import BrokerConfig
from .partitions import PartitionManager

log = logging.getLogger(__name__)

_OK = {"error_code": 0, "error_message": ""}


def _topic_error(api: str, name, exc: Exception) -> dict:
    """The error fields of one topic of a request; an unexpected error (a bug) is
    logged with its traceback, and still fails only that topic."""
    if not isinstance(exc, SparklogError):
        log.exception("%s of topic %r failed", api, name)
    return error_fields(exc)


def deduplicate(api_key: int, body: dict) -> None:
    """Name each topic (and partition) of a Metadata or DescribeLog request once, in
    the order first asked, before the authorizer and the handler see it: Kafka's
    Metadata handler makes a set of the topics asked, so a request repeating one name
    100,000 times costs one look-up (and one audit line), not 100,000. DescribeLog's
    entries of one topic are merged (all partitions when any entry asks for all)."""
    if api_key == ApiKey.METADATA:
        if body["topics"] is not None:
            body["topics"] = list(dict.fromkeys(body["topics"]))
    elif api_key == ApiKey.DESCRIBE_LOG:
        merged: dict = {}
        for t in body["topics"]:
            parts = None if t["partitions"] is None else dict.fromkeys(t["partitions"])
            seen = merged.get(t["name"])
            if seen is None:
                merged[t["name"]] = {**t, "partitions": parts}
            elif seen["partitions"] is not None:
                if parts is None:
                    seen["partitions"] = None
                else:
                    seen["partitions"].update(parts)
        body["topics"] = [
            t if t["partitions"] is None else {**t, "partitions": list(t["partitions"])}
            for t in merged.values()]


def _schema_from_bytes(data, topic: str):
    if data is None:
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(bytes(data)))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgumentError(
            f"topic {topic!r}: schema is not an Arrow IPC schema message: {exc}") from None


def effective_configs(config: BrokerConfig, tc: TopicConfig) -> dict:
    """Every topic config key: the topic's value, else the broker's default (of
    ``config``), else the built-in default."""
    out = {k: default for k, (_, default) in TOPIC_CONFIGS.items()}
    out.update({k: v for k, v in config.log_defaults.items() if k in out})
    out.update(tc.configs)
    return out


class TopicApis:
    """The topic handlers (module docstring) and what they use: ``partitions`` (the
    broker's :class:`~sparklog.server.partitions.PartitionManager`), ``store``
    (the coordination store), ``config`` (the broker's properties), ``run_io`` (runs a
    blocking call on the I/O threads), ``leadership`` (the broker's
    :class:`~sparklog.server.leadership.StandaloneLeadership`: topics are created
    and deleted on the storage directly; or cluster mode's
    :class:`~sparklog.server.leadership.BrokerLeadership`: through the controller), ``listener`` (returns the
    ``(host, port)`` clients of a connection's session are told to use), ``storage_uri`` (the root readers read from) and
    ``cleaner`` (the broker's log cleaner, for the dirty ratio of compacted partitions;
    None when ``log.cleaner.enable=false``)."""

    def __init__(self, partitions: PartitionManager, store, config: BrokerConfig, *, run_io,
                 leadership, listener, storage_uri: str, cleaner=None,
                 cluster_id: str = ""):
        self.partitions = partitions
        self.topics = partitions.topics
        self.store = store
        self.config = config
        self.broker_id = config.broker_id
        self.run_io = run_io
        self.leadership = leadership
        self.listener = listener
        self.storage_uri = storage_uri
        self.cleaner = cleaner
        # the broker's, read at its start: a Metadata answer (leaders and brokers from
        # the watched view, topic configs cached) then waits for no storage I/O thread,
        # which a stalled HDFS write pipeline can hold for many seconds
        self.cluster_id = cluster_id

    def _dirty_ratio(self, topic: str, partition: int) -> float:
        """The log cleaner's last dirty ratio of a compacted partition led here (-1
        when unknown: not led here, not compacted, or the cleaner is off)."""
        stats = self.cleaner.stats.get((topic, partition)) if self.cleaner else None
        return stats.dirty_ratio if stats is not None else -1.0

    def handlers(self) -> dict:
        """api key -> ``handler(body, ctx)``."""
        return {
            ApiKey.METADATA: self.metadata,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.DESCRIBE_LOG: self.describe_log,
        }

    async def metadata(self, body, ctx) -> dict:
        """Brokers, and topics with their partitions' leader and leader epoch."""
        names = body["topics"]
        if names is None:
            names = await self.run_io(self.topics.list_topics)
        auto = body["allow_auto_topic_creation"] and self.config.auto_create_topics_enable
        listener = getattr(getattr(getattr(ctx, "session", None), "listener", None), "name",
                           None)
        cluster = self.leadership.metadata(listener)
        topics = []
        for name in names:
            item = {"name": name, "typed": False, "partitions": []}
            try:
                try:
                    tc = await self.partitions.topic_config(name)
                except UnknownTopicOrPartitionError:
                    if not auto:
                        raise
                    validate_topic_name(name)
                    count = self.config.num_partitions
                    await self.partitions.check_new_partitions(name, count)
                    await self._create(name, count, None, {})
                    tc = await self.partitions.topic_config(name)
                item["typed"] = tc.typed
                self.partitions.check_served(tc)
                for p in range(tc.partitions):
                    if cluster is not None:  # leaders as the controller assigned them
                        leader, epoch = cluster["leaders"].get((name, p), (-1, -1))
                    else:
                        w = self.partitions.writers.get((name, p))
                        epoch = w.log.leader_epoch if w is not None else 0
                        leader = self.broker_id
                    item["partitions"].append({"partition": p, **_OK, "leader": leader,
                                               "leader_epoch": epoch,
                                               "dirty_ratio": self._dirty_ratio(name, p)})
                item.update(_OK)
            except SparklogError as exc:
                item.update(error_fields(exc))
            topics.append(item)
        host, port = self.listener(getattr(ctx, "session", None))
        brokers = [{"node_id": self.broker_id, "host": host, "port": port}]
        return {**_OK, "cluster_id": self.cluster_id or await self.run_io(self.store.cluster_id),
                "controller_id": cluster["controller_id"] if cluster else self.broker_id,
                "brokers": cluster["brokers"] if cluster else brokers,
                "topics": topics}

    def _create_topic(self, name, partitions, schema, configs) -> TopicConfig:
        """Create on the storage; in cluster mode also register it for the controller and
        wait for its leaders (:mod:`sparklog.coordination.zkadmin`)."""
        if self.leadership.cluster:
            from ..coordination import zkadmin

            return zkadmin.create_topic(self.store, name, partitions, schema=schema,
                                        configs=configs)
        return self.topics.create_topic(name, partitions, schema=schema, configs=configs)

    async def _create(self, name, partitions, schema, configs) -> TopicConfig:
        from ..errors import TopicExistsError

        try:
            tc = await self.run_io(lambda: self._create_topic(name, partitions, schema,
                                                              configs))
        except TopicExistsError:
            if self.partitions.cached(name) or not self.topics.topic_exists(name):
                raise
            return await self.partitions.topic_config(name)  # a concurrent creation won
        self.partitions.forget_topic(name)
        log.info("topic %s created: %d partition(s)%s", name, tc.partitions,
                 ", typed" if tc.typed else "")
        return tc

    async def create_topics(self, body, ctx) -> dict:
        """CreateTopics (or just validate them with ``validate_only``)."""
        out = []
        for t in body["topics"]:
            name = t["name"]
            item = {"name": name, "num_partitions": -1}
            try:
                count = t["num_partitions"]
                if count == -1:
                    count = self.config.num_partitions
                schema = _schema_from_bytes(t["schema"], name)
                if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
                    await self.partitions.check_new_partitions(name, count)
                if body["validate_only"]:
                    tc = TopicConfig(name, count, schema, t["configs"])
                    self.partitions.log_config(tc)
                    if await self.run_io(self.topics.topic_exists, name):
                        from ..errors import TopicExistsError

                        raise TopicExistsError(f"topic {name!r} already exists")
                else:
                    self.partitions.log_config(TopicConfig(name, count, schema, t["configs"]))
                    tc = await self.run_io(lambda: self._create_topic(name, count, schema,
                                                                      t["configs"]))
                    self.partitions.forget_topic(name)
                    log.info("topic %s created by %s: %d partition(s)", name, ctx.client_id,
                             tc.partitions)
                item.update(_OK, num_partitions=tc.partitions)
            except Exception as exc:  # noqa: BLE001 - one topic's failure is its own
                item.update(_topic_error("CreateTopics", name, exc))
            out.append(item)
        return {**_OK, "topics": out}

    async def delete_topics(self, body, ctx) -> dict:
        """DeleteTopics, answered once the deletion is decided, as Kafka answers it: the
        topic is gone for every reader (its directory renamed away), its leaders, log
        ends and committed offsets released; its data is removed in the background
        ``file.delete.delay.ms`` later (:mod:`~sparklog.server.retired`). In cluster
        mode the controller decides: the answer waits for it at most ``timeout_ms``
        (REQUEST_TIMED_OUT after; 0 or less: not at all, as Kafka's), and until then
        the topic cannot be created again (TOPIC_ALREADY_EXISTS, "being deleted")."""
        out = []
        for name in body["topics"]:
            item = {"name": name}
            try:
                if not self.config.delete_topic_enable:
                    raise InvalidArgumentError(
                        f"topic {name!r} not deleted: delete.topic.enable is false on this "
                        "broker")
                await self.partitions.topic_config(name, refresh=True)  # it exists
                if self.leadership.cluster:  # the controller deletes it everywhere
                    from ..coordination import zkadmin

                    wait_s = max(body["timeout_ms"], 0) / 1000
                    await self.run_io(partial(zkadmin.delete_topic, self.store, name,
                                              wait_s=wait_s))
                    self.partitions.forget_topic(name)
                    if self.partitions.retired is not None:
                        self.partitions.retired.poke()
                else:
                    await self.partitions.delete_topic(name)
                log.info("topic %s deleted by %s", name, ctx.client_id)
                item.update(_OK)
            except Exception as exc:  # noqa: BLE001 - one topic's failure is its own
                item.update(_topic_error("DeleteTopics", name, exc))
            out.append(item)
        return {**_OK, "topics": out}

    async def describe_configs(self, body, ctx) -> dict:
        """DescribeConfigs of topics: effective configs, explicit keys, schema."""
        out = []
        for name in body["topics"]:
            item = {"name": name}
            try:
                tc = await self.partitions.topic_config(name, refresh=True)
                item.update(_OK, num_partitions=tc.partitions,
                            schema=tc.schema.serialize().to_pybytes() if tc.schema is not None else None,
                            configs=effective_configs(self.config, tc),
                            explicit=sorted(tc.configs))
            except SparklogError as exc:
                item.update(error_fields(exc))
            out.append(item)
        return {**_OK, "topics": out}

    async def alter_configs(self, body, ctx) -> dict:
        """AlterConfigs: set/delete topic configs, grow the partition count."""
        out = []
        for t in body["topics"]:
            name = t["name"]
            item = {"name": name}
            try:
                current = await self.partitions.topic_config(name, refresh=True)
                merged = {k: v for k, v in {**current.configs, **t["set"]}.items()
                          if k not in t["delete"]}
                count = t["num_partitions"] or current.partitions
                if count < current.partitions:
                    raise InvalidArgumentError(
                        f"topic {name!r} has {current.partitions} partitions; the count can "
                        f"only grow, not shrink to {count}")
                await self.partitions.check_new_partitions(name, count, current.partitions)
                probe = TopicConfig(name, count, current.schema, merged)
                self.partitions.log_config(probe)  # refuses bad configs
                if not body["validate_only"]:
                    alter: Callable[..., object]
                    if self.leadership.cluster:  # new partitions get leaders too
                        from ..coordination import zkadmin

                        alter = partial(zkadmin.alter_topic, self.store)
                    else:
                        alter = self.topics.alter_topic
                    await self.run_io(lambda: alter(
                        name, configs=t["set"], delete_configs=t["delete"],
                        partitions=t["num_partitions"]))
                    tc = await self.partitions.reload_topic(name)
                    log.info("topic %s altered by %s: set %s, deleted %s, partitions %d", name,
                             ctx.client_id, sorted(t["set"]), t["delete"], tc.partitions)
                item.update(_OK)
            except SparklogError as exc:
                item.update(error_fields(exc))
            out.append(item)
        return {**_OK, "topics": out}

    async def describe_log(self, body, ctx) -> dict:
        """DescribeLog: per partition the offsets and the segment files, for readers that
        read the storage directly (Spark)."""
        out = []
        for t in body["topics"]:
            name = t["name"]
            item = {"name": name, "typed": False, "partitions": []}
            try:
                tc = await self.partitions.topic_config(name)
                self.partitions.check_served(tc)
                item["typed"] = tc.typed
                numbers = t["partitions"]
                if numbers is None:
                    numbers = range(tc.partitions)
                for p in numbers:
                    part = {"partition": p, "log_start_offset": -1, "high_watermark": -1,
                            "log_end_offset": -1, "segments": []}
                    try:
                        w = await self.partitions.writer(name, p)
                        part.update(_OK, **await self.run_io(_describe_partition, w.log))
                    except SparklogError as exc:
                        part.update(error_fields(exc))
                    item["partitions"].append(part)
                item.update(_OK)
            except SparklogError as exc:
                item.update(error_fields(exc))
            out.append(item)
        return {**_OK, "storage_root": self.storage_uri, "topics": out}


def _describe_partition(plog) -> dict:
    """The DescribeLog item of one partition log (blocking: call through ``run_io``)."""
    view = plog.view()
    segs = []
    for i, (seg, size) in enumerate(view.segments):
        last = i == len(view.segments) - 1
        if seg.next_offset <= view.log_start_offset and not last:
            continue
        segs.append({"base_offset": seg.base_offset, "path": seg.path, "size": size,
                     "sealed": bool(seg.sealed)})
    return {"log_start_offset": view.log_start_offset, "high_watermark": view.high_watermark,
            "log_end_offset": view.log_end_offset, "segments": segs}
