"""Topic APIs of the broker: Metadata, CreateTopics, DeleteTopics, DescribeConfigs,
AlterConfigs and DescribeLog (segments for the Spark reader).

Each handler is ``async (broker, body, ctx) -> response dict``; per-topic failures are
reported in the topic's ``error_code``/``error_message``, never as a failed request.
"""

from __future__ import annotations

import logging
from functools import partial

import pyarrow as pa

from ...errors import InvalidArgumentError, SparklogError, UnknownTopicOrPartitionError
from ...metadata.topic import TOPIC_CONFIGS, TopicConfig, validate_topic_name
from ...protocol.apis import ApiKey
from ...protocol.codec import error_fields

log = logging.getLogger(__name__)

_OK = {"error_code": 0, "error_message": ""}


def _topic_error(api: str, name, exc: Exception) -> dict:
    """The error fields of one topic of a request; an unexpected error (a bug) is
    logged with its traceback, and still fails only that topic."""
    if not isinstance(exc, SparklogError):
        log.exception("%s of topic %r failed", api, name)
    return error_fields(exc)


def _schema_from_bytes(data, topic: str):
    if data is None:
        return None
    try:
        return pa.ipc.read_schema(pa.py_buffer(bytes(data)))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgumentError(
            f"topic {topic!r}: schema is not an Arrow IPC schema message: {exc}") from None


async def metadata(broker, body, ctx) -> dict:
    """Brokers, and topics with their partitions' leader and leader epoch."""
    names = body["topics"]
    if names is None:
        names = await broker.run_io(broker.topics.list_topics)
    auto = body["allow_auto_topic_creation"] and broker.config.auto_create_topics_enable
    cluster = broker.leadership.metadata() if broker.leadership is not None else None
    topics = []
    for name in names:
        item = {"name": name, "typed": False, "partitions": []}
        try:
            try:
                tc = await broker.topic_config(name)
            except UnknownTopicOrPartitionError:
                if not auto:
                    raise
                validate_topic_name(name)
                await broker.check_new_partitions(name, broker.config.num_partitions)
                await _create(broker, name, broker.config.num_partitions, None, {})
                tc = await broker.topic_config(name)
            item["typed"] = tc.typed
            broker.check_served(tc)
            for p in range(tc.partitions):
                if cluster is not None:  # leaders as the controller assigned them
                    leader, epoch = cluster["leaders"].get((name, p), (-1, -1))
                else:
                    w = broker.partitions.get((name, p))
                    leader, epoch = broker.broker_id, w.log.leader_epoch if w is not None else 0
                item["partitions"].append({"partition": p, **_OK, "leader": leader,
                                           "leader_epoch": epoch})
            item.update(_OK)
        except SparklogError as exc:
            item.update(error_fields(exc))
        topics.append(item)
    host, port = broker.advertised
    brokers = [{"node_id": broker.broker_id, "host": host, "port": port or broker.port}]
    return {**_OK, "cluster_id": await broker.run_io(broker.store.cluster_id),
            "controller_id": cluster["controller_id"] if cluster else broker.broker_id,
            "brokers": cluster["brokers"] if cluster else brokers,
            "topics": topics}


def _create_topic(broker, name, partitions, schema, configs) -> TopicConfig:
    """Create on the storage; in cluster mode also register it for the controller and
    wait for its leaders (:mod:`sparklog.coordination.zkadmin`)."""
    if broker.leadership is not None:
        from ...coordination import zkadmin

        return zkadmin.create_topic(broker.store, name, partitions, schema=schema,
                                    configs=configs)
    return broker.topics.create_topic(name, partitions, schema=schema, configs=configs)


async def _create(broker, name, partitions, schema, configs) -> TopicConfig:
    from ...errors import TopicExistsError

    try:
        tc = await broker.run_io(lambda: _create_topic(broker, name, partitions, schema,
                                                        configs))
    except TopicExistsError:
        if name in broker._topic_cache or not broker.topics.topic_exists(name):
            raise
        tc = await broker.topic_config(name)  # a concurrent auto-creation won: fine
        return tc
    broker.forget_topic(name)
    log.info("topic %s created: %d partition(s)%s", name, tc.partitions,
             ", typed" if tc.typed else "")
    return tc


async def create_topics(broker, body, ctx) -> dict:
    """CreateTopics (or just validate them with ``validate_only``)."""
    out = []
    for t in body["topics"]:
        name = t["name"]
        item = {"name": name, "num_partitions": -1}
        try:
            count = t["num_partitions"]
            if count == -1:
                count = broker.config.num_partitions
            schema = _schema_from_bytes(t["schema"], name)
            if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
                await broker.check_new_partitions(name, count)
            if body["validate_only"]:
                tc = TopicConfig(name, count, schema, t["configs"])
                broker.log_config(tc)
                if await broker.run_io(broker.topics.topic_exists, name):
                    from ...errors import TopicExistsError

                    raise TopicExistsError(f"topic {name!r} already exists")
            else:
                broker.log_config(TopicConfig(name, count, schema, t["configs"]))
                tc = await broker.run_io(lambda: _create_topic(broker, name, count, schema,
                                                                t["configs"]))
                broker.forget_topic(name)
                log.info("topic %s created by %s: %d partition(s)", name, ctx.client_id,
                         tc.partitions)
            item.update(_OK, num_partitions=tc.partitions)
        except Exception as exc:  # noqa: BLE001 - one topic's failure is its own
            item.update(_topic_error("CreateTopics", name, exc))
        out.append(item)
    return {**_OK, "topics": out}


async def delete_topics(broker, body, ctx) -> dict:
    """DeleteTopics: close the partitions' writers, then remove the topic's data."""
    out = []
    for name in body["topics"]:
        item = {"name": name}
        try:
            if not broker.config.delete_topic_enable:
                raise InvalidArgumentError(
                    f"topic {name!r} not deleted: delete.topic.enable is false on this broker")
            tc = await broker.topic_config(name, refresh=True)
            if broker.leadership is not None:  # the controller deletes it everywhere
                from ...coordination import zkadmin

                await broker.run_io(zkadmin.delete_topic, broker.store, name)
                broker.forget_topic(name)
                item.update(_OK)
                out.append(item)
                continue
            broker.deleting.add(name)
            try:
                # only partitions ever opened have a directory (and a leader to release):
                # a topic of many partitions, never used, is deleted without visiting each
                used = await broker.run_io(_used_partitions, broker, tc)
                writers = [broker.partitions.pop(key) for key in list(broker.partitions)
                           if key[0] == name]
                for w in writers:
                    await w.close()
                await broker.run_io(broker.topics.delete_topic, name)
                for p in sorted(used | {w.partition for w in writers}):
                    await broker.run_io(broker.store.release_leadership, name, p,
                                        broker.broker_id)
            finally:
                broker.deleting.discard(name)
                broker.forget_topic(name)
            if broker.metrics is not None:
                broker.metrics.forget_topic(name)
            log.info("topic %s deleted by %s", name, ctx.client_id)
            item.update(_OK)
        except Exception as exc:  # noqa: BLE001 - one topic's failure is its own
            item.update(_topic_error("DeleteTopics", name, exc))
        out.append(item)
    return {**_OK, "topics": out}


def _used_partitions(broker, tc: TopicConfig) -> set[int]:
    """Numbers of the topic's partitions that have a directory (were ever opened)."""
    listed = broker.fileio.list(broker.topics.topic_dir(tc.name))
    return {int(i.name) for i in listed if i.is_dir and i.name.isdigit()}


def effective_configs(broker, tc: TopicConfig) -> dict:
    """Every topic config key: the topic's value, else the broker's default, else the
    built-in default."""
    out = {k: default for k, (_, default) in TOPIC_CONFIGS.items()}
    out.update({k: v for k, v in broker.config.log_defaults.items() if k in out})
    out.update(tc.configs)
    return out


async def describe_configs(broker, body, ctx) -> dict:
    """DescribeConfigs of topics: effective configs, explicit keys, schema."""
    out = []
    for name in body["topics"]:
        item = {"name": name}
        try:
            tc = await broker.topic_config(name, refresh=True)
            item.update(_OK, num_partitions=tc.partitions,
                        schema=tc.schema.serialize().to_pybytes() if tc.typed else None,
                        configs=effective_configs(broker, tc), explicit=sorted(tc.configs))
        except SparklogError as exc:
            item.update(error_fields(exc))
        out.append(item)
    return {**_OK, "topics": out}


async def alter_configs(broker, body, ctx) -> dict:
    """AlterConfigs: set/delete topic configs, grow the partition count."""
    out = []
    for t in body["topics"]:
        name = t["name"]
        item = {"name": name}
        try:
            current = await broker.topic_config(name, refresh=True)
            merged = {k: v for k, v in {**current.configs, **t["set"]}.items()
                      if k not in t["delete"]}
            count = t["num_partitions"] or current.partitions
            if count < current.partitions:
                raise InvalidArgumentError(
                    f"topic {name!r} has {current.partitions} partitions; the count can only "
                    f"grow, not shrink to {count}")
            await broker.check_new_partitions(name, count, current.partitions)
            probe = TopicConfig(name, count, current.schema, merged)
            log_config = broker.log_config(probe)
            if not body["validate_only"]:
                if broker.leadership is not None:  # new partitions get leaders too
                    from ...coordination import zkadmin

                    alter = partial(zkadmin.alter_topic, broker.store)
                else:
                    alter = broker.topics.alter_topic
                await broker.run_io(lambda: alter(
                    name, configs=t["set"], delete_configs=t["delete"],
                    partitions=t["num_partitions"]))
                broker.forget_topic(name)
                tc = await broker.topic_config(name)
                for (topic, _), w in list(broker.partitions.items()):
                    if topic == name:
                        w.topic = tc
                        w.log.config = log_config
                log.info("topic %s altered by %s: set %s, deleted %s, partitions %d", name,
                         ctx.client_id, sorted(t["set"]), t["delete"], tc.partitions)
            item.update(_OK)
        except SparklogError as exc:
            item.update(error_fields(exc))
        out.append(item)
    return {**_OK, "topics": out}


async def describe_log(broker, body, ctx) -> dict:
    """DescribeLog: per partition the offsets and the segment files, for readers that
    read the storage directly (Spark)."""
    out = []
    for t in body["topics"]:
        name = t["name"]
        item = {"name": name, "typed": False, "partitions": []}
        try:
            tc = await broker.topic_config(name)
            broker.check_served(tc)
            item["typed"] = tc.typed
            numbers = t["partitions"] if t["partitions"] is not None else range(tc.partitions)
            for p in numbers:
                part = {"partition": p, "log_start_offset": -1, "high_watermark": -1,
                        "log_end_offset": -1, "segments": []}
                try:
                    w = await broker.writer(name, p)
                    part.update(_OK, **await broker.run_io(_describe_partition, w.log))
                except SparklogError as exc:
                    part.update(error_fields(exc))
                item["partitions"].append(part)
            item.update(_OK)
        except SparklogError as exc:
            item.update(error_fields(exc))
        out.append(item)
    return {**_OK, "storage_root": broker.storage_uri, "topics": out}


def _describe_partition(plog) -> dict:
    with plog._lock:  # one consistent view of offsets and segments
        hw = plog.high_watermark
        segments = plog.segments
        # readable bytes of the active segment end at the high watermark
        active_size = getattr(plog, "_hw_position", segments[-1].size)
        segs = []
        for i, seg in enumerate(segments):
            last = i == len(segments) - 1
            size = active_size if last else seg.size
            if seg.next_offset <= plog.log_start_offset and not last:
                continue
            segs.append({"base_offset": seg.base_offset, "path": seg.path, "size": size,
                         "sealed": bool(seg.sealed)})
        return {"log_start_offset": plog.log_start_offset, "high_watermark": hw,
                "log_end_offset": plog.log_end_offset, "segments": segs}


#: api key -> ``handler(broker, body, ctx)``
HANDLERS = {
    ApiKey.METADATA: metadata,
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.ALTER_CONFIGS: alter_configs,
    ApiKey.DESCRIBE_LOG: describe_log,
}
