"""The ``sparklog`` console command, shaped like Kafka's shell tools.

Each sub-command lives in its own module of :mod:`sparklog.cli` exposing
``add_parser(subparsers)`` (which sets ``func`` on its parser to a ``run(args) -> int``).
Kafka's action flags (``sparklog topics --list``, ``groups --describe``...) name the
sub-command as in kafka-topics.sh and kafka-consumer-groups.sh
(:func:`kafka_action_flags`). Errors of sparklog print one line (``sparklog: error: ...``) and exit with status 1;
usage errors exit with 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys

from ..errors import SparklogError

#: ``--log-level`` values (Python logging's level names; any case)
LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")

#: Sub-command modules, in the order ``sparklog --help`` lists them.
COMMAND_MODULES = ["topics", "produce", "consume", "groups", "acls", "configs", "broker",
                   "dump_log", "compact", "etl", "quickstart", "spark_jar", "classpath"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available sub-command."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="sparklog", description="sparklog: a partitioned log on HDFS, read by Spark.")
    parser.add_argument("--version", action="version", version=f"sparklog {__version__}")
    _add_log_level(parser, "WARNING")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.{name}":
                continue  # sub-command not part of this build
            raise
        before = set(sub.choices)
        module.add_parser(sub)
        for command in set(sub.choices) - before:  # modules may rely on run(args)
            if sub.choices[command].get_default("func") is None and hasattr(module, "run"):
                sub.choices[command].set_defaults(func=module.run)
    _prepare_subparsers(parser)
    return parser


def _add_log_level(parser, default) -> None:
    parser.add_argument("--log-level", default=default, type=str.upper, choices=LOG_LEVELS,
                        metavar="LEVEL",
                        help=f"Python logging level: {', '.join(LOG_LEVELS)} (default "
                             "WARNING; before or after the sub-command)")


_RST = re.compile(r":\w+:`~?(?:[\w.]*\.)?([^`]+)`|``([^`]+)``")


def plain_text(text):
    """Help text without the docstrings' reST markup (````x````, ``:class:`~a.B```)."""
    return _RST.sub(lambda m: m.group(1) or m.group(2), text) if text else text


def _prepare_subparsers(parser) -> None:
    """Every (nested) sub-command takes ``--log-level`` too (given after it, it wins over
    one given before), remembers its parser so that an unknown argument is reported
    with the sub-command's usage, and shows its help texts as plain text."""
    parser.description = plain_text(parser.description)
    parser.epilog = plain_text(parser.epilog)
    for action in parser._actions:
        action.help = plain_text(action.help)
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for choice in action._choices_actions:
            choice.help = plain_text(choice.help)
        for sub in dict.fromkeys(action.choices.values()):
            if "--log-level" not in sub._option_string_actions:
                _add_log_level(sub, argparse.SUPPRESS)
            sub.set_defaults(_parser=sub)
            _prepare_subparsers(sub)


def _command_modules() -> dict:
    """command name -> its module's ``KAFKA_ACTION_FLAGS`` (Kafka's ``--list``-style
    action flags -> sub-command names), for the commands that have them."""
    out = {}
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError:
            continue
        flags = getattr(module, "KAFKA_ACTION_FLAGS", None)
        if flags:
            out[name] = flags
    return out


def kafka_action_flags(argv: list, commands: dict, parser=None) -> list:
    """``argv`` with Kafka's action flags (kafka-topics.sh's ``--list``, ``--create``...,
    kafka-consumer-groups.sh's ``--describe``, ``--reset-offsets``...) turned into the
    sub-command they name: ``topics --describe --topic T`` is ``topics describe --topic
    T``. Only when no sub-command is given; two action flags are a usage error (of
    ``parser``)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):  # options before the command
        i += 2 if argv[i] == "--log-level" else 1
    if i >= len(argv) or argv[i] not in commands:
        return argv
    flags = commands[argv[i]]
    rest = argv[i + 1:]
    if rest and not rest[0].startswith("-"):
        return argv  # the sub-command is given
    given = [a for a in rest if a in flags]
    if len(given) > 1 and parser is not None:
        parser.error(f"{argv[i]}: give one action, not {' and '.join(given)}")
    if not given:
        return argv
    rest.remove(given[0])
    return [*argv[:i + 1], flags[given[0]], *rest]


def main(argv=None) -> int:
    """Entry point of the ``sparklog`` command."""
    parser = build_parser()
    argv = kafka_action_flags(list(sys.argv[1:] if argv is None else argv),
                              _command_modules(), parser)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the sub-command's usage, not the top-level one
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SparklogError as exc:
        print(f"sparklog: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM stopping a tool (cli.interrupt)
        return getattr(exc, "exit_status", 130)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
