"""``sparklog topics create|list|describe|delete|alter|delete-records`` (Kafka's
kafka-topics.sh; ``delete-records`` is kafka-delete-records.sh).

Examples::

    sparklog topics create --topic events --partitions 3 --config retention.ms=86400000
    sparklog topics create --topic trades --schema "sym string not null, px double, qty int64"
    sparklog topics describe --topic events
    sparklog topics alter --topic events --partitions 6 --config retention.ms=3600000

kafka-topics.sh's action flags work too: ``sparklog topics --list``, ``--create``,
``--describe``, ``--alter``, ``--delete`` (``sparklog topics --describe --topic events``).
"""

from __future__ import annotations

import sys

from ..errors import InvalidArgumentError, TopicExistsError, UnknownTopicOrPartitionError
from .clientargs import add_bootstrap, add_topic, parse_key_values, session, topic_of

#: kafka-topics.sh's action flags -> the sub-command (sparklog.cli.main)
KAFKA_ACTION_FLAGS = {f"--{a}": a for a in ("list", "create", "describe", "alter", "delete")}


def add_parser(subparsers) -> None:
    """Register ``topics`` and its actions."""
    parser = subparsers.add_parser("topics", help="create, list, describe, alter, delete topics",
                                   description=__doc__.split("\n\n")[0],
                                   epilog=__doc__.split("\n\n")[-1])
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name, help_text):
        p = actions.add_parser(name, help=help_text)
        add_bootstrap(p)
        p.set_defaults(func=run)
        return p

    p = action("create", "create a topic")
    add_topic(p)
    p.add_argument("--partitions", type=int, default=-1,
                   help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                   help="HDFS replication (dfs.replication) of the topic's files, kept as "
                        "the topic config replication.factor (default: the storage's); "
                        "file:// storage has no replication and ignores it")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config (Kafka names), repeatable")
    p.add_argument("--schema", help="make a typed topic: columns as 'name type[, ...]' or "
                                    "a JSON list of {name, type, nullable}")
    p.add_argument("--if-not-exists", action="store_true",
                   help="succeed if the topic already exists")
    p = action("list", "list topic names")
    p = action("describe", "describe topics: partitions, leaders, configs, schema")
    add_topic(p, required=False)
    p = action("delete", "delete a topic and its data")
    add_topic(p)
    p.add_argument("--if-exists", action="store_true", help="succeed if there is no such topic")
    p = action("alter", "change a topic's configs or grow its partitions")
    add_topic(p)
    p.add_argument("--partitions", type=int, help="new (larger) partition count")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="config to set, repeatable")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="config to reset to its default, repeatable")
    p = action("delete-records", "delete a partition's records before an offset; on a "
                                 "partition whose log lost its tail, accept the loss")
    add_topic(p)
    p.add_argument("--partition", type=int, required=True, help="partition number")
    p.add_argument("--offset", type=int, default=-1,
                   help="delete the records before this offset (default -1: all, up to "
                        "the high watermark; a partition that lost its tail restarts at "
                        "its old end offset)")


def run(args) -> int:
    """Carry out one ``topics`` action."""
    from ..clients.admin import NewTopic, parse_schema, schema_to_spec
    from ..names import COLLISION_WARNING, has_collision_chars, validate_topic_name

    topic = topic_of(args) if args.action != "list" else None
    out = sys.stdout
    with session(args) as s:
        admin = s.admin()
        if args.action == "create":
            configs = parse_key_values(args.config, "--config")
            schema = parse_schema(args.schema) if args.schema else None
            if has_collision_chars(validate_topic_name(topic)):  # as kafka-topics.sh warns
                print(f"WARNING: {COLLISION_WARNING}.", file=sys.stderr)
            try:
                admin.create_topics([NewTopic(topic, args.partitions, args.replication_factor,
                                              configs=configs, schema=schema)])
            except TopicExistsError:
                if not args.if_not_exists:
                    raise
                return 0
            print(f"Created topic {topic}.", file=out)
        elif args.action == "list":
            for name in admin.list_topics():
                print(name, file=out)
        elif args.action == "describe":
            for d in admin.describe_topics([topic] if topic else None):
                explicit = ",".join(f"{k}={d.configs[k]}" for k in sorted(d.explicit)
                                    if k in d.configs)
                print(f"Topic: {d.name}\tPartitionCount: {len(d.partitions)}\t"
                      f"Typed: {'yes' if d.typed else 'no'}\tConfigs: {explicit}", file=out)
                if d.schema is not None:
                    print(f"\tSchema: {schema_to_spec(d.schema)}", file=out)
                for p in d.partitions:
                    dirty = f"\tDirtyRatio: {p.dirty_ratio:.3f}" \
                        if getattr(p, "dirty_ratio", -1.0) >= 0 else ""
                    print(f"\tTopic: {d.name}\tPartition: {p.partition}\tLeader: {p.leader}"
                          f"\tLeaderEpoch: {p.leader_epoch}{dirty}", file=out)
        elif args.action == "delete":
            try:
                admin.delete_topics([topic])
            except UnknownTopicOrPartitionError:
                if not args.if_exists:
                    raise
                return 0
            print(f"Deleted topic {topic}.", file=out)
        elif args.action == "alter":
            configs = parse_key_values(args.config, "--config")
            if args.partitions is None and not configs and not args.delete_config:
                raise InvalidArgumentError(
                    "topics alter: nothing to change (give --partitions, --config or "
                    "--delete-config)")
            if args.partitions is not None:
                admin.create_partitions(topic, args.partitions)
            if configs or args.delete_config:
                admin.alter_configs({topic: configs}, delete={topic: args.delete_config})
            print(f"Altered topic {topic}.", file=out)
        elif args.action == "delete-records":
            from ..clients.types import TopicPartition

            if topic is None:
                raise InvalidArgumentError("delete-records needs --topic")
            tp = TopicPartition(topic, args.partition)
            low = admin.delete_records({tp: args.offset})[tp]
            print(f"Partition {topic}-{args.partition} now starts at offset {low}.",
                  file=out)
    return 0
