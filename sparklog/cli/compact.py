"""``sparklog compact``: clean a compacted topic's partitions from the command line.

    sparklog compact TOPIC --storage URL [--partitions 0,2] [--force]
        [--dedupe-buffer-size BYTES] [--io-max-bytes-per-second RATE]
        [--spark [--master MASTER]]

Runs the broker cleaner's cleaning (:func:`sparklog.log.cleaner.clean`) on each
partition of TOPIC in the storage root URL, one after the other, for partitions no
broker leads (offline maintenance, a broker with ``log.cleaner.enable=false``). It opens
each partition as its writer: the storage lease that a leading broker holds makes
this refuse a partition being served (that broker's cleaner compacts it), so one
cleaner at a time cleans a partition. A cleaning runs when the partition is due
(``min.cleanable.dirty.ratio``, ``max.compaction.lag.ms``), or whenever something is
dirty with ``--force``. One line per partition says what was done.

With ``--spark`` each partition is cleaned by a Spark job instead
(:mod:`sparklog.spark.jobs.compaction`: the key map built by Spark, the cleaned segments
written by tasks, the swap committed here, in the driver, which holds the partition's
lease throughout), in the active Spark session (``spark-submit``:
deploy/hadoop-ha/sparklog/compact_driver.py) or a new one (``--master``); progress lines
go to stderr.
"""

from __future__ import annotations

import sys
import time

from ..errors import InvalidArgumentError, LeaseHeldError


def add_parser(subparsers) -> None:
    """Register ``compact``."""
    parser = subparsers.add_parser(
        "compact", help="clean a compacted topic's partitions (those no broker leads)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--storage", required=True, metavar="URL",
                        help="storage root (file://, hdfs://, webhdfs:// or a local path)")
    parser.add_argument("--partitions", default=None, metavar="P[,P...]",
                        help="partitions to clean (default: all)")
    parser.add_argument("--force", action="store_true",
                        help="clean whatever is dirty, even below min.cleanable.dirty.ratio")
    parser.add_argument("--dedupe-buffer-size", type=int, default=128 << 20, metavar="BYTES",
                        help="key map memory (log.cleaner.dedupe.buffer.size)")
    parser.add_argument("--io-max-bytes-per-second", type=float, default=None,
                        metavar="RATE", help="I/O throttle (log.cleaner.io.max.bytes.per.second)")
    parser.add_argument("--spark", action="store_true",
                        help="clean each partition with a Spark job (large partitions)")
    parser.add_argument("--master", default=None,
                        help="Spark master of a new session with --spark (default: "
                             "the active session's, or Spark's default)")
    parser.set_defaults(func=run)


def run(args, out=None) -> int:
    """Clean the partitions; 0 when every partition was cleaned or had nothing due, 1
    when one was refused (led by a live broker)."""
    from ..log.cleaner import Throttle, clean
    from ..log.config import LogConfig
    from ..log.partition import PartitionLog
    from ..metadata import TopicStore
    from ..storage import open_fileio

    out = out or sys.stdout
    store = TopicStore(args.storage, open_fileio(args.storage))
    topic = store.describe_topic(args.topic)  # UnknownTopicOrPartitionError if absent
    # the topic's own configs over the defaults (a broker's log.* defaults are not
    # known here: set the topic's configs explicitly when they matter)
    config = LogConfig.from_props(topic.configs, ignore_unknown=True)
    if not config.compact:
        raise InvalidArgumentError(
            f"topic {args.topic!r} has cleanup.policy={config.cleanup_policy}: "
            f"only compacted topics are cleaned")
    partitions = range(topic.partitions) if args.partitions is None else \
        [int(p) for p in args.partitions.split(",") if p.strip()]
    throttle = Throttle(args.io_max_bytes_per_second)
    spark = None
    if getattr(args, "spark", False):
        from .etl import spark_session

        spark = spark_session(f"sparklog-compact-{args.topic}", args.master)
    status = 0
    for p in partitions:
        name = f"{args.topic}-{p}"
        try:
            plog = PartitionLog.open(store.fileio, store.partition_dir(args.topic, p), config)
        except LeaseHeldError:
            print(f"{name}: led by a live broker (its log cleaner compacts it); skipped",
                  file=out)
            status = 1
            continue
        try:
            start = time.monotonic()
            if spark is not None:
                from ..spark.jobs.compaction import compact_partition

                result = compact_partition(
                    spark, plog, force=args.force,
                    progress=lambda line: print(f"[compact] {line}", file=sys.stderr,
                                                flush=True))
            else:
                result = clean(plog, force=args.force, throttle=throttle,
                               dedupe_buffer_size=args.dedupe_buffer_size)
        finally:
            plog.close()
        if result is None:
            print(f"{name}: nothing due", file=out)
        else:
            print(f"{name}: cleaned offsets below {result.end_offset}: "
                  f"{result.segments_replaced} segment(s) into {result.segments_written}, "
                  f"{result.bytes_read / 1e6:.1f} MB read, {result.bytes_written / 1e6:.1f} "
                  f"MB written, {result.records_removed} records removed "
                  f"({time.monotonic() - start:.1f} s)", file=out)
    return status
