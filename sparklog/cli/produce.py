"""``sparklog produce TOPIC``: the console producer (Kafka's kafka-console-producer.sh).

Each line of standard input becomes one record. With ``--property parse.key=true`` a
line is ``key<key.separator>value`` (separator default tab). Lines for a typed topic
are JSON objects with the topic's columns. Exits non-zero, after sending what it could,
if a record was not acknowledged.

Example::

    printf 'k1:hello\\nk2:world\\n' | sparklog produce events \\
        --property parse.key=true --property key.separator=:
"""

from __future__ import annotations

import json
import sys

from ..errors import InvalidArgumentError, SchemaMismatchError
from .clientargs import (
    add_console_args,
    bool_property,
    client_configs,
    console_properties,
    session,
    topic_of,
    unescape,
)

_PROPERTIES = {"parse.key", "key.separator", "ignore.error"}


def add_parser(subparsers) -> None:
    """Register ``produce``."""
    p = subparsers.add_parser("produce", help="send lines of stdin as records",
                              description=__doc__.split("\n\n")[0])
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
    errors = []
    stream = open(args.input, "rb") if args.input else sys.stdin.buffer
    try:
        with session(args) as s:
            producer = s.producer(**configs)
            schema = producer.topic_schema(args.topic)
            for number, line in enumerate(stream, 1):
                line = line.rstrip(b"\r\n") if line.endswith(b"\n") else line
                key = None
                if parse_key:
                    key, sep, value = line.partition(separator)
                    if not sep:
                        message = (f"line {number} has no key separator "
                                   f"{separator.decode()!r}")
                        if not ignore_error:
                            raise InvalidArgumentError(message)
                        print(f"sparklog: skipped: {message}", file=sys.stderr)
                        continue
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
                future.add_errback(errors.append)
            producer.flush()
    finally:
        if args.input:
            stream.close()
    if errors:
        print(f"sparklog: error: {len(errors)} record(s) not delivered: {errors[0]}",
              file=sys.stderr)
        return 1
    return 0
