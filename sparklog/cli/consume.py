"""``sparklog consume TOPIC``: the console consumer (Kafka's kafka-console-consumer.sh).

Prints one record per line (values as bytes, typed rows as JSON). Without ``--group``
it reads every partition (or ``--partition``) from the end, or from the beginning with
``--from-beginning``; with ``--group`` it joins the group, starts at its committed
offsets and commits what it printed. ``--include REGEX`` reads every topic whose name
matches instead of one (Kafka's form). Stops after ``--max-messages`` records or
``--timeout-ms`` without one, then prints ``Processed a total of N messages`` on stderr.

SIGINT (Ctrl-C) and SIGTERM stop it the same way: the batch in hand is printed, the
group's offsets committed after it and the group left; the exit status is 130 or 143
(a second signal stops it at once).

Properties (Kafka's formatter): ``print.key``, ``print.timestamp``, ``print.offset``,
``print.partition``, ``print.headers``, ``print.value`` (default true),
``key.separator`` (default tab), ``line.separator`` (default newline). ``--formatter``
takes the name of Kafka's default formatter (the only one there is here).
"""

from __future__ import annotations

import json
import sys
import time

from ..clients.types import TopicPartition
from ..errors import InvalidArgumentError, UnknownTopicOrPartitionError
from .clientargs import (
    add_console_args,
    bool_property,
    client_configs,
    console_properties,
    session,
    topic_of,
    unescape,
)
from .interrupt import stop_signals

_PROPERTIES = {"print.key", "print.timestamp", "print.offset", "print.partition",
               "print.headers", "print.value", "key.separator", "line.separator"}
#: the class names of Kafka's DefaultMessageFormatter, which this tool's output follows
DEFAULT_FORMATTERS = ("kafka.tools.DefaultMessageFormatter",
                      "org.apache.kafka.tools.consumer.DefaultMessageFormatter")


def add_parser(subparsers) -> None:
    """Register ``consume``."""
    p = subparsers.add_parser("consume", help="print records of a topic",
                              description=__doc__.split("\n\n")[0],
                              epilog=__doc__.split("\n\n")[2])
    add_console_args(p, "consumer",
                     "formatter property (print.key=true, key.separator=:...), repeatable",
                     "consumer config, Kafka name, repeatable")
    p.add_argument("--formatter", metavar="CLASS", default=DEFAULT_FORMATTERS[0],
                   help="the message formatter: only Kafka's default one, "
                        "kafka.tools.DefaultMessageFormatter (its properties: --property)")
    p.add_argument("--include", metavar="REGEX",
                   help="consume every topic whose name matches REGEX (instead of a topic; "
                        "topics created later join within metadata.max.age.ms)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when there is no committed one")
    p.add_argument("--group", help="consumer group: join it and commit offsets")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", help="with --partition: earliest, latest or an offset")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout-ms", type=int,
                   help="stop when no record arrives for this long")
    p.set_defaults(func=run)


def _text(value) -> bytes:
    if value is None:
        return b"null"
    if isinstance(value, bytes):
        return value
    return json.dumps(value, default=str, sort_keys=True).encode()


def run(args) -> int:
    """Print records; see the module docstring."""
    if args.include is not None:
        if args.topic or args.topic_pos or args.partition is not None:
            raise InvalidArgumentError("--include takes no topic and no --partition")
    else:
        args.topic = topic_of(args)
    props = console_properties(args.property, _PROPERTIES)
    if args.formatter not in DEFAULT_FORMATTERS:
        raise InvalidArgumentError(
            f"--formatter {args.formatter!r} is not available: only Kafka's default "
            f"formatter ({DEFAULT_FORMATTERS[0]}), configured with --property print.key=true...")
    flags = {k: bool_property(props, k, k == "print.value")
             for k in _PROPERTIES if k.startswith("print.")}
    sep = unescape(props.get("key.separator", "\t")).encode()
    eol = unescape(props.get("line.separator", "\n")).encode()
    if args.max_messages is not None and args.max_messages < 1:
        raise InvalidArgumentError("--max-messages must be >= 1")
    if args.offset is not None and args.partition is None:
        raise InvalidArgumentError("--offset needs --partition")
    if args.group and args.partition is not None:
        raise InvalidArgumentError("--group and --partition cannot be combined")
    configs = client_configs(args.consumer_property, "--consumer-property")
    configs.setdefault("auto_offset_reset", "earliest" if args.from_beginning else "latest")
    out = sys.stdout.buffer
    count = 0
    # the signals stay caught while the consumer closes: its commit and leave finish
    with stop_signals() as stop, session(args) as s:
        consumer = s.consumer(group_id=args.group, **configs)
        if args.include is not None:
            consumer.subscribe(pattern=args.include)
        elif args.group:
            consumer.subscribe([args.topic])
        else:
            parts = consumer.partitions_for_topic(args.topic)
            if parts is None:
                raise UnknownTopicOrPartitionError(f"topic {args.topic!r} does not exist")
            if args.partition is not None and args.partition not in parts:
                raise InvalidArgumentError(
                    f"topic {args.topic!r} has no partition {args.partition} "
                    f"(it has {len(parts)})")
            chosen = [args.partition] if args.partition is not None else sorted(parts)
            tps = [TopicPartition(args.topic, p) for p in chosen]
            consumer.assign(tps)
            if args.offset is not None:
                _seek(consumer, tps[0], args.offset)
        last = time.monotonic()
        try:
            while not stop and (args.max_messages is None or count < args.max_messages):
                left = None if args.max_messages is None else args.max_messages - count
                batch = consumer.poll(timeout_ms=200, max_records=left)
                if not batch:
                    if args.timeout_ms is not None and \
                            (time.monotonic() - last) * 1000 >= args.timeout_ms:
                        break
                    continue
                last = time.monotonic()
                for records in batch.values():  # a batch polled is printed whole
                    for r in records:
                        out.write(_format(r, flags, sep) + eol)
                        count += 1
                out.flush()
        finally:
            print(f"Processed a total of {count} messages", file=sys.stderr)
    # leaving the session closed the consumer: with --group it committed the positions
    # after the records printed and left the group (SIGINT and SIGTERM alike)
    return stop.exit_status


def _seek(consumer, tp, spec: str) -> None:
    if spec == "earliest":
        consumer.seek_to_beginning(tp)
    elif spec == "latest":
        consumer.seek_to_end(tp)
    else:
        try:
            offset = int(spec)
        except ValueError:
            raise InvalidArgumentError(
                f"--offset must be earliest, latest or a number, got {spec!r}") from None
        consumer.seek(tp, offset)


def _format(r, flags, sep: bytes) -> bytes:
    parts = []
    if flags["print.timestamp"]:
        kind = "LogAppendTime" if r.timestamp_type == 1 else "CreateTime"
        parts.append(f"{kind}:{r.timestamp}".encode())
    if flags["print.partition"]:
        parts.append(f"Partition:{r.partition}".encode())
    if flags["print.offset"]:
        parts.append(f"Offset:{r.offset}".encode())
    if flags["print.headers"]:
        parts.append(b",".join(k.encode() + b":" + (v if v is not None else b"null")
                               for k, v in r.headers) or b"NO_HEADERS")
    if flags["print.key"]:
        parts.append(_text(r.key))
    if flags["print.value"]:
        parts.append(_text(r.value))
    return sep.join(parts)
