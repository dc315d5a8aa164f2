"""The ``sparklog`` console command, shaped like Kafka's shell tools.

Each sub-command lives in its own module of :mod:`sparklog.cli` exposing
``add_parser(subparsers)`` (which sets ``func`` on its parser to a ``run(args) -> int``).
Errors of sparklog print one line (``sparklog: error: ...``) and exit with status 1;
usage errors exit with 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ..errors import SparklogError

#: Sub-command modules, in the order ``sparklog --help`` lists them.
COMMAND_MODULES = ["topics", "produce", "consume", "groups", "broker", "dump_log", "etl",
                   "quickstart", "spark_jar", "classpath"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available sub-command."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="sparklog", description="sparklog: a partitioned log on HDFS, read by Spark.")
    parser.add_argument("--version", action="version", version=f"sparklog {__version__}")
    parser.add_argument("--log-level", default="WARNING",
                        help="Python logging level (default WARNING)")
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
    return parser


def main(argv=None) -> int:
    """Entry point of the ``sparklog`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SparklogError as exc:
        print(f"sparklog: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
