"""``sparklog etl``: exactly-once incremental jobs from the command line.

``sparklog etl run --subscribe T --app-id A --output URI --format delta|parquet
(--sql "SELECT ... FROM input" | --transform module:function)
[--path ROOT | --bootstrap-server H:P] [--max-records-per-run N]`` (without ``--path``
or ``--bootstrap-server``: ``$SPARKLOG_BOOTSTRAP_SERVERS``) reads what ``A``
has not committed to ``URI`` yet, transforms it and commits the result with the offsets
in one atomic step (see docs/exactly-once.md). Run it again and it picks up exactly the
new records. The same arguments work under ``spark-submit``
(``deploy/hadoop-ha/bin/submit-etl.sh``).

Ctrl-C (SIGINT) or SIGTERM stops a run with one line saying so: its Spark jobs are
cancelled, and what it did not commit is removed by the next run, so running it again
is safe (exit status 130 or 143).

``sparklog etl describe --output URI [--app-id A] [--path ROOT | --bootstrap-server H:P]``
prints the applications' committed offsets and lag, as ``sparklog groups describe``
does for consumer groups.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import signal
import sys
import threading

from ..errors import InvalidArgumentError, SparklogError
from .interrupt import STOP_SIGNALS, Stopped, StopRequest

log = logging.getLogger(__name__)


def add_parser(subparsers) -> None:
    """Register ``etl run`` and ``etl describe``."""
    parser = subparsers.add_parser(
        "etl", help="exactly-once incremental jobs (topic -> Delta/Parquet)",
        description="Exactly-once incremental Spark jobs: offsets committed with the output.")
    sub = parser.add_subparsers(dest="etl_command", metavar="ACTION")
    run_p = sub.add_parser("run", help="run one incremental job",
                           epilog=__doc__.split("\n\n")[2])
    add_run_arguments(run_p)
    run_p.set_defaults(func=run)
    desc = sub.add_parser("describe", help="committed offsets and lag of applications")
    desc.add_argument("--output", required=True, help="output URI (Delta table or Parquet dir)")
    desc.add_argument("--app-id", default=None, help="one application (default: all)")
    _add_source_arguments(desc, required=False)
    desc.set_defaults(func=describe)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _add_source_arguments(parser, required: bool) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--path", default=None, help="storage root URL of the log (no broker)")
    where.add_argument("--bootstrap-server", default=None,
                       help="broker HOST:PORT[,...] (default $SPARKLOG_BOOTSTRAP_SERVERS"
                            + (", required without --path" if required else "") + ")")
    parser.set_defaults(_source_required=required)


def source_of(args) -> None:
    """Without ``--path`` or ``--bootstrap-server``, ``$SPARKLOG_BOOTSTRAP_SERVERS`` is
    the broker, as for the other commands; InvalidArgumentError when ``etl run`` has
    none of the three."""
    if args.path is None and args.bootstrap_server is None:
        env = os.environ.get("SPARKLOG_BOOTSTRAP_SERVERS", "").strip()
        if env:
            args.bootstrap_server = env
        elif getattr(args, "_source_required", False):
            raise InvalidArgumentError(
                "etl run needs the log: --path ROOT (the storage, no broker) or "
                "--bootstrap-server HOST:PORT (or $SPARKLOG_BOOTSTRAP_SERVERS)")


def add_run_arguments(parser) -> None:
    """The arguments of ``etl run`` (shared with the spark-submit entry script)."""
    parser.add_argument("--subscribe", required=True, help="topic(s), comma-separated")
    parser.add_argument("--app-id", required=True,
                        help="application id: names the job's transaction in the output")
    parser.add_argument("--output", required=True, help="output URI (path, file://, hdfs://)")
    parser.add_argument("--format", choices=("delta", "parquet"), default="delta",
                        help="output format (default delta)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--sql", default=None, help='SQL over the view "input"')
    how.add_argument("--transform", default=None, metavar="MODULE:FUNCTION",
                     help="a function DataFrame -> DataFrame")
    _add_source_arguments(parser, required=True)
    parser.add_argument("--max-records-per-run", type=int, default=None,
                        help="cap the records one run reads (shared across partitions)")
    parser.add_argument("--partition-by", default=None,
                        help="output partition columns, comma-separated")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="first run only: earliest (default), latest or Kafka JSON")
    parser.add_argument("--fail-on-data-loss", choices=("true", "false"), default="true",
                        help="fail (default) or skip when offsets were deleted by retention")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another option of the sparklog source (repeatable)")
    parser.add_argument("--master", default=None,
                        help="Spark master when not run by spark-submit (default local[*])")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress lines on stderr, no Spark progress bar")


def load_transform(spec: str | None):
    """``module:function`` -> the function (InvalidArgumentError naming what is missing)."""
    if spec is None:
        return None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgumentError(f"--transform {spec!r} must be MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgumentError(f"--transform {spec!r}: cannot import {module_name}: {exc}") \
            from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise InvalidArgumentError(f"--transform {spec!r}: {module_name} has no function {attr}")
    return func


def _source_options(items) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgumentError(f"--source-option {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def spark_session(app_name: str, master: str | None = None, *, quiet: bool = False):
    """The active session (spark-submit, notebooks) or a new one; workers run this
    interpreter. A new session gets the JVM reader's jar when it can be built, and with
    ``quiet`` no console progress bar (``spark.ui.showConsoleProgress=false``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if quiet:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    if SparkSession.getActiveSession() is None:
        from ..spark.jvm import with_jvm_reader

        for key, value in with_jvm_reader({}).items():
            builder = builder.config(key, value)
    return builder.getOrCreate()


def run(args) -> int:
    """``etl run``: one incremental job; prints its summary (or JSON)."""
    from ..spark.jobs import run_incremental

    source_of(args)
    transform = args.sql if args.sql is not None else load_transform(args.transform)
    partition_by = [c.strip() for c in args.partition_by.split(",") if c.strip()] \
        if args.partition_by else None
    spark = spark_session(f"sparklog-etl-{args.app_id}", args.master, quiet=args.quiet)

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"[etl {args.app_id}] {line}", file=sys.stderr, flush=True)

    try:
        with interruptible(spark) as stop:
            try:
                result = run_incremental(
                    spark, app_id=args.app_id, subscribe=args.subscribe, output=args.output,
                    format=args.format, transform=transform, path=args.path,
                    bootstrap_servers=args.bootstrap_server,
                    max_records_per_run=args.max_records_per_run, partition_by=partition_by,
                    starting_offsets=args.starting_offsets,
                    fail_on_data_loss=args.fail_on_data_loss == "true",
                    source_options=_source_options(args.source_option), progress=progress)
            except Exception as exc:
                if stop.signal is not None:  # the Spark job the signal cancelled
                    raise Stopped(stop.signal) from None
                raise spark_error(exc, "--sql" if args.sql is not None else "--transform") \
                    from None
    except KeyboardInterrupt:
        print(f"sparklog: etl run {args.app_id} interrupted; it is safe to rerun: a run "
              "commits its output and its offsets together or not at all",
              file=sys.stderr, flush=True)
        raise
    print(json.dumps(result.to_dict(), indent=1) if args.json else result.summary())
    return 0


def _in_py4j(frame) -> bool:
    """True when ``frame`` (or a caller of it) is py4j's: the driver waits on the JVM."""
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("py4j"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def interruptible(spark):
    """SIGINT (Ctrl-C) and SIGTERM during ``etl run``, in place of PySpark's handler
    (which calls the JVM from inside the call it interrupts and fails it, with some
    hundred lines of py4j errors): Python's and Spark's logging are silenced, the
    running Spark jobs are cancelled from another thread, and :class:`Stopped` is
    raised in the driver's own code as soon as it is back from the JVM (at once when
    it was not waiting on it). A second signal raises at once. Yields the
    :class:`~sparklog.cli.interrupt.StopRequest`."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def back_in_python(frame, event, arg):  # a trace function: sys.settrace
        if event == "call" and frame.f_globals.get("__name__", "").startswith("sparklog"):
            sys.settrace(None)
            raise Stopped(stop.signal or signal.SIGINT)

    def cancel() -> None:
        try:
            spark.sparkContext.setLogLevel("OFF")
            spark.sparkContext.cancelAllJobs()
        except Exception:  # the JVM may be gone (a SIGTERM to the process group)
            pass

    cancelling: list[threading.Thread] = []

    def handle(signum, frame) -> None:
        if stop.signal is not None:
            raise Stopped(signum)
        stop.signal = signum
        logging.disable(logging.CRITICAL)
        if not _in_py4j(frame):
            raise Stopped(signum)
        cancelling.append(threading.Thread(target=cancel, name="sparklog-etl-cancel",
                                           daemon=True))
        cancelling[0].start()
        sys.settrace(back_in_python)

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    silenced = logging.root.manager.disable
    try:
        yield stop
    finally:
        sys.settrace(None)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for thread in cancelling:
            thread.join(10)
        logging.disable(silenced)  # called in-process (a notebook): logging comes back


def spark_error(exc: Exception, what: str) -> Exception:
    """A Spark failure (bad SQL, a failing transform) as one line: InvalidArgumentError
    naming ``what`` for an analysis or parse error of the query, SparklogError for
    others; the Java stack and the Python traceback are logged at DEBUG. Other
    exceptions are returned unchanged."""
    try:
        from pyspark.errors import AnalysisException, PySparkException
    except ImportError:
        return exc
    if isinstance(exc, SparklogError) or not isinstance(exc, PySparkException):
        return exc
    log.debug("the Spark job failed", exc_info=exc)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    hint = " (details: --log-level DEBUG)"
    if isinstance(exc, AnalysisException):  # ParseException is one
        return InvalidArgumentError(f"{what}: {first}{hint}")
    return SparklogError(f"Spark job failed: {type(exc).__name__}: {first}{hint}")


def format_descriptions(descriptions) -> list[str]:
    """Kafka-style table lines (GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG,
    then the application's committed TXN-VERSION and its OUTPUT) for
    :class:`~sparklog.spark.jobs.ApplicationDescription` objects."""
    rows = [("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "TXN-VERSION", "OUTPUT")]
    for d in descriptions:
        for p in d.partitions:
            rows.append((d.app_id, p.topic, str(p.partition),
                         "-" if p.current_offset is None else str(p.current_offset),
                         "-" if p.log_end_offset is None else str(p.log_end_offset),
                         "-" if p.lag is None else str(p.lag),
                         "-" if d.version is None else str(d.version),
                         f"{d.format}:{d.output}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def describe(args) -> int:
    """``etl describe``: committed offsets and lag of the output's applications."""
    from ..spark.jobs import describe_application, list_applications

    source_of(args)
    apps = [args.app_id] if args.app_id else list_applications(args.output)
    descriptions = [describe_application(args.output, a, path=args.path,
                                         bootstrap_servers=args.bootstrap_server)
                    for a in apps]
    for line in format_descriptions(descriptions):
        print(line)
    return 0
