"""``sparklog produce TOPIC``: the console producer (Kafka's kafka-console-producer.sh).

Each line of standard input becomes one record. With ``--property parse.key=true`` a
line is ``key<key.separator>value`` (separator default tab); a line without the
separator stops the tool, or with ``--property ignore.error=true`` is sent whole as the
value with a null key (Kafka's console producer). Lines for a typed topic are JSON
objects with the topic's columns. A missing topic is created by a broker with
``auto.create.topics.enable=true`` (the producer asks, as Kafka's does); else the tool
fails after ``max.block.ms`` (``--producer-property``) naming the topic.

A record over the size limit (``max.request.size``, the topic's ``max.message.bytes``)
is reported with its line number and the next lines are sent; after sending what it
could the tool exits non-zero if a record was not delivered, naming the lines. SIGINT
and SIGTERM stop it alike: what was sent is flushed (exit status 130 or 143).

Example::

    printf 'k1:hello\\nk2:world\\n' | sparklog produce events \\
        --property parse.key=true --property key.separator=:
"""

from __future__ import annotations

import json
import sys

from ..errors import InvalidArgumentError, RecordTooLargeError, SchemaMismatchError
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

#: failed lines printed one by one at the end; the rest are counted
_FAILURES_SHOWN = 10

_PROPERTIES = {"parse.key", "key.separator", "ignore.error"}


def add_parser(subparsers) -> None:
    """Register ``produce``."""
    p = subparsers.add_parser("produce", help="send lines of stdin as records",
                              description=__doc__.split("\n\n")[0],
                              epilog=" ".join(__doc__.split("\n\n")[1:3]))
    add_console_args(p, "producer",
                     "parse.key=true|false, key.separator=SEP (default \\t), "
                     "ignore.error=true|false",
                     "producer config, Kafka name (linger.ms=5), repeatable")
    p.add_argument("--acks", default="1", choices=["0", "1", "-1", "all"],
                   help="acks (default %(default)s)")
    p.add_argument("--compression-type", default="none", choices=["none", "lz4", "zstd"])
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--input", metavar="FILE", help="read lines from FILE instead of stdin")
    p.set_defaults(func=run)


def run(args) -> int:
    """Send stdin's lines; see the module docstring."""
    args.topic = topic_of(args)
    props = console_properties(args.property, _PROPERTIES)
    parse_key = bool_property(props, "parse.key")
    ignore_error = bool_property(props, "ignore.error")
    separator = unescape(props.get("key.separator", "\t")).encode()
    if not separator:
        raise InvalidArgumentError("key.separator must not be empty")
    configs = client_configs(args.producer_property, "--producer-property")
    configs.setdefault("acks", "all" if args.acks in ("all", "-1") else int(args.acks))
    configs.setdefault("compression_type", args.compression_type)
    failed: list = []  # (line number, error) of records not delivered
    read = 0
    stream = open(args.input, "rb") if args.input else sys.stdin.buffer
    try:
        # SIGTERM stops it as Ctrl-C does: leaving the session flushes what was sent
        with stop_signals(interrupt=True), session(args) as s:
            producer = s.producer(**configs)
            schema = producer.topic_schema(args.topic)
            for number, line in enumerate(stream, 1):
                read = number
                line = line.rstrip(b"\r\n") if line.endswith(b"\n") else line
                key = None
                if parse_key:
                    key, sep, value = line.partition(separator)
                    if not sep:
                        if not ignore_error:
                            raise InvalidArgumentError(
                                f"line {number} has no key separator "
                                f"{separator.decode()!r} (--property ignore.error=true "
                                "sends such lines with a null key)")
                        key, value = None, line  # Kafka's: the whole line, no key
                else:
                    value = line
                if schema is not None:
                    try:
                        value = json.loads(value)
                    except ValueError as exc:
                        raise SchemaMismatchError(
                            f"line {number}: typed topic {args.topic!r} takes JSON objects: "
                            f"{exc}") from None
                try:
                    future = producer.send(args.topic, value, key=key,
                                           partition=args.partition)
                except SchemaMismatchError as exc:  # e.g. a null in a not-null column
                    raise SchemaMismatchError(f"line {number}: {exc}") from None
                except RecordTooLargeError as exc:  # Kafka's goes on with the next line
                    print(f"sparklog: error: line {number} not sent: {exc}", file=sys.stderr)
                    failed.append((number, None))
                    continue
                future.add_errback(lambda exc, n=number: failed.append((n, exc)))
            producer.flush()
    finally:
        if args.input:
            stream.close()
    if failed:
        failed.sort(key=lambda item: item[0])
        causes: dict[str, list[int]] = {}  # failed once sent: lines per distinct error
        for n, error in failed:
            if error is not None:
                causes.setdefault(str(error), []).append(n)
        for cause, lines in list(causes.items())[:_FAILURES_SHOWN]:
            print(f"sparklog: error: {_lines(lines)} not delivered: {cause}", file=sys.stderr)
        numbers = [n for n, _ in failed]
        shown = ", ".join(map(str, numbers[:_FAILURES_SHOWN]))
        more = _more(numbers)
        print(f"sparklog: error: {len(numbers)} of {read} line(s) not delivered: line(s) "
              f"{shown}{more}", file=sys.stderr)
        return 1
    return 0


def _more(numbers: list[int]) -> str:
    """" and N more" when not every line number is shown."""
    return f" and {len(numbers) - _FAILURES_SHOWN} more" if len(numbers) > \
        _FAILURES_SHOWN else ""


def _lines(numbers: list[int]) -> str:
    """"line 3" or "lines 3, 5 and 2 more": the lines one error stopped."""
    if len(numbers) == 1:
        return f"line {numbers[0]}"
    return f"lines {', '.join(map(str, numbers[:_FAILURES_SHOWN]))}{_more(numbers)}"
