"""Exactly-once incremental jobs: read what is new since the last run, commit the result
together with the offsets it consumed.

One run of application ``A`` into a sink (Delta table or Parquet directory):

1. ``cleanup``: finish or remove what earlier crashed runs of ``A`` left behind;
2. ``plan``: load ``A``'s last commit *from the output itself*; for every subscribed
   partition, read from the committed offset (new partitions, and the first run, from
   ``startingOffsets``) up to the high watermark, with an optional per-run record limit
   shared across partitions the way Spark's Kafka source shares
   ``maxOffsetsPerTrigger``; the run's transaction version is the last one plus one;
3. ``read``: a DataFrame of exactly those ranges (``format("sparklog")`` with explicit
   ``startingOffsets``/``endingOffsets``), handed to the user's transform;
4. ``stage`` + ``commit``: Spark writes the result where readers cannot see it, the
   driver commits the files and the new offsets in one atomic step (see
   :mod:`.sink`).

A failure at any point, followed by a rerun, gives every input offset's effect exactly
once: before the commit nothing is visible and the offsets did not move; after it,
the rerun starts from the committed offsets. Two runs racing for the same version: one
commits, the other raises ConcurrentTransactionsError having made nothing visible.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from ...errors import (
    ConcurrentTransactionsError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from .faults import fault_point
from .offsets import OffsetRange, advance, validate_app_id
from .records import CommitRecord
from .sink import Sink

log = logging.getLogger(__name__)

#: Source options the job sets itself (a user value would break exactly-once).
_RESERVED_OPTIONS = {"startingoffsets", "endingoffsets", "startingtimestamp",
                     "endingtimestamp", "startingoffsetsbytimestamp",
                     "endingoffsetsbytimestamp", "subscribe", "subscribepattern", "assign",
                     "path", "bootstrap.servers", "kafka.bootstrap.servers",
                     "failondataloss"}


@dataclass
class JobBatch:
    """The input of one run: offset ranges, the DataFrame of their records, and the
    transaction version the run will commit as."""

    app_id: str
    version: int
    attempt: str
    ranges: list
    start_offsets: dict
    end_offsets: dict
    next_offsets: dict
    previous: CommitRecord | None
    df: object = None
    data_loss: list = field(default_factory=list)

    @property
    def input_records(self) -> int:
        """Offsets in the ranges (records, unless the topic is compacted)."""
        return sum(r.count for r in self.ranges)

    @property
    def empty(self) -> bool:
        """True when there is nothing new to read."""
        return not self.ranges


@dataclass
class JobResult:
    """What one run did. ``version`` is the application's *transaction version* (its
    run counter, Delta's ``txn`` version); ``table_version`` the Delta table's version
    (what Delta's history calls the version) after the run, None for Parquet.
    ``committed`` is False when there was nothing new (then ``version`` is the
    application's current transaction version, or None)."""

    app_id: str
    output: str
    format: str
    committed: bool
    version: int | None
    ranges: list
    offsets: dict
    input_records: int = 0
    output_records: int = 0
    files: int = 0
    seconds: float = 0.0
    cleaned: int = 0
    table_version: int | None = None

    def summary(self) -> str:
        """A few human-readable lines describing the run."""
        head = (f"application {self.app_id} -> {self.format} {self.output}: ")
        if not self.committed:
            head += ("nothing new to read" if self.version is None
                     else f"nothing new since transaction version {self.version}")
        else:
            table = "" if self.table_version is None else \
                f" (Delta table version {self.table_version})"
            head += (f"committed transaction version {self.version}{table}: "
                     f"{self.input_records} records from {len(self.ranges)} partition "
                     f"range(s) -> {self.output_records} rows in {self.files} file(s)")
        lines = [head + f" ({self.seconds:.1f} s)"]
        for r in self.ranges:
            lines.append(f"  {r.topic}-{r.partition}: offsets [{r.from_offset}, "
                         f"{r.until_offset})  {r.count} records")
        if self.offsets:
            lines.append("  next offsets: " + ", ".join(
                f"{t}-{p}={o}" for (t, p), o in sorted(self.offsets.items())))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-able form."""
        from ..source.stream import offsets_to_json

        return {"appId": self.app_id, "output": self.output, "format": self.format,
                "committed": self.committed, "version": self.version,
                "tableVersion": self.table_version,
                "ranges": [r.to_dict() for r in self.ranges],
                "offsets": offsets_to_json(self.offsets),
                "inputRecords": self.input_records, "outputRecords": self.output_records,
                "files": self.files, "seconds": round(self.seconds, 3)}


def apply_transform(df, transform):
    """Apply a transform: None (identity), a callable ``DataFrame -> DataFrame``, or a
    SQL string reading the temporary view ``input``."""
    if transform is None:
        return df
    if isinstance(transform, str):
        df.createOrReplaceTempView("input")
        return df.sparkSession.sql(transform)
    if callable(transform):
        result = transform(df)
        if result is None or not hasattr(result, "write"):
            raise InvalidArgumentError(
                f"transform {transform!r} must return a DataFrame, got {type(result).__name__}")
        return result
    raise InvalidArgumentError(
        f"transform must be None, a SQL string or a callable, got {type(transform).__name__}")


class IncrementalJob:
    """An exactly-once incremental job of application ``app_id`` into ``sink``.

    Input: ``subscribe`` (topics, comma-separated string or list) or
    ``subscribe_pattern``, read through the broker at ``bootstrap_servers`` or from
    the storage root ``path`` (no broker). ``max_records_per_run`` caps one run;
    ``starting_offsets`` (``earliest``, ``latest`` or Kafka JSON) applies to the first
    run (later, new partitions start at their earliest offset); ``fail_on_data_loss``
    False skips offsets retention already deleted instead of failing;
    ``source_options`` are more options of the sparklog source (``minPartitions``,
    ``includeHeaders``...). ``progress`` is called with a line of text at each step.

    Use :meth:`run` with a transform, or :meth:`begin` (returns a :class:`JobBatch`
    whose ``df`` is the input) then :meth:`commit` with the result DataFrame.
    """

    def __init__(self, spark, *, app_id: str, sink: Sink, subscribe=None,
                 subscribe_pattern: str | None = None, path: str | None = None,
                 bootstrap_servers: str | None = None, max_records_per_run: int | None = None,
                 starting_offsets="earliest", fail_on_data_loss: bool = True,
                 source_options: dict | None = None, progress=None):
        self.spark = spark
        self.app_id = validate_app_id(app_id)
        if not isinstance(sink, Sink):
            raise InvalidArgumentError(f"sink must be a DeltaSink or ParquetSink, got {sink!r}")
        self.sink = sink
        if (subscribe is None) == (subscribe_pattern is None):
            raise InvalidArgumentError("set exactly one of subscribe and subscribe_pattern")
        if (path is None) == (bootstrap_servers is None):
            raise InvalidArgumentError(
                "set exactly one of path (a storage root) and bootstrap_servers (a broker)")
        if max_records_per_run is not None and (
                isinstance(max_records_per_run, bool) or not isinstance(max_records_per_run, int)
                or max_records_per_run < 1):
            raise InvalidArgumentError(
                f"max_records_per_run must be a positive int, got {max_records_per_run!r}")
        self.max_records_per_run = max_records_per_run
        self.fail_on_data_loss = bool(fail_on_data_loss)
        extra = {str(k): str(v) for k, v in dict(source_options or {}).items()}
        clash = sorted(k for k in extra if k.lower() in _RESERVED_OPTIONS)
        if clash:
            raise InvalidArgumentError(
                f"source options {clash} are set by the job itself; use its parameters")
        self.options = dict(extra)
        if path is not None:
            self.options["path"] = str(path)
        else:
            self.options["bootstrap.servers"] = str(bootstrap_servers)
        if subscribe is not None:
            if not isinstance(subscribe, str):
                subscribe = ",".join(subscribe)
            self.options["subscribe"] = subscribe
        else:
            self.options["subscribePattern"] = subscribe_pattern
        self.options["failOnDataLoss"] = str(self.fail_on_data_loss).lower()
        if isinstance(starting_offsets, dict):  # Kafka's JSON form, or {(t, p): offset}
            if starting_offsets and all(isinstance(k, tuple) for k in starting_offsets):
                from ..source.stream import offsets_to_json

                starting_offsets = offsets_to_json(starting_offsets)
            starting_offsets = json.dumps(starting_offsets)
        self.starting_offsets = str(starting_offsets)
        self._parse({"startingOffsets": self.starting_offsets})  # fail fast on bad options
        self.progress = progress

    # --- helpers ----------------------------------------------------------------------
    def _say(self, text: str) -> None:
        log.info("%s: %s", self.app_id, text)
        if self.progress is not None:
            self.progress(text)

    def _parse(self, more: dict):
        from ..source.options import parse_options

        return parse_options({**self.options, **more}, streaming=None)

    # --- planning -------------------------------------------------------------------------
    def plan(self) -> JobBatch:
        """Load the last commit from the output and plan this run's ranges (no Spark
        job runs). UnknownTopicOrPartitionError if a subscribed topic does not exist;
        OffsetOutOfRangeError when committed offsets are gone (retention) or beyond the
        log end (topic recreated), unless ``fail_on_data_loss`` is False."""
        from ..source.catalogs import open_catalog
        from ..source.planning import (
            partition_states,
            report_data_loss,
            resolve_offsets,
            subscribed_partitions,
        )
        from ..source.stream import rate_limit

        previous = self.sink.last_commit(self.app_id)
        committed = dict(previous.offsets) if previous is not None else {}
        opts = self._parse({"startingOffsets": self.starting_offsets})
        catalog = open_catalog(opts)
        try:
            try:
                parts = subscribed_partitions(catalog, opts.subscription, missing_ok=False)
            except UnknownTopicOrPartitionError as exc:
                raise UnknownTopicOrPartitionError(f"application {self.app_id}: {exc}") \
                    from None
            states = partition_states(catalog, parts)
            fresh = {tp: st for tp, st in states.items() if tp not in committed}
            if previous is None:
                initial = resolve_offsets(catalog, opts.starting, fresh, is_start=True,
                                          strategy=opts.timestamp_strategy)
            else:  # partitions added since the last run start at their beginning
                initial = {tp: st.log_start for tp, st in fresh.items()}
        finally:
            catalog.close()
        starts, lost = {}, []
        for tp, st in sorted(states.items()):
            start = committed.get(tp, initial.get(tp, st.log_start))
            if start > st.high_watermark:
                what = "committed" if tp in committed else "starting"
                message = (f"application {self.app_id}: {what} offset {start} of topic "
                           f"{tp[0]!r} partition {tp[1]}, but the log ends at "
                           f"{st.high_watermark} (topic recreated or truncated?)")
                if self.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        message + "; set failOnDataLoss=false to restart it from offset "
                        f"{st.log_start}", topic=tp[0], partition=tp[1], offset=start,
                        log_start_offset=st.log_start, log_end_offset=st.high_watermark)
                log.warning("%s; restarting from offset %d", message, st.log_start)
                lost.append({"topic": tp[0], "partition": tp[1], "committed": start,
                             "logEnd": st.high_watermark})
                start = st.log_start
            if start < st.log_start:
                report_data_loss(self.fail_on_data_loss, tp[0], tp[1], start, st.log_start,
                                 f"the log now starts at offset {st.log_start}",
                                 st.log_start, st.high_watermark)
                lost.append({"topic": tp[0], "partition": tp[1], "fromOffset": start,
                             "untilOffset": st.log_start})
                start = st.log_start
            starts[tp] = start
        ends = rate_limit(starts, {tp: st.high_watermark for tp, st in states.items()},
                          states, self.max_records_per_run, None)
        ranges = [OffsetRange(t, p, starts[(t, p)], ends[(t, p)])
                  for (t, p) in sorted(states) if ends[(t, p)] > starts[(t, p)]]
        next_offsets = advance({**committed, **starts}, ranges)
        version = 0 if previous is None else previous.version + 1
        return JobBatch(self.app_id, version, uuid.uuid4().hex[:16], ranges, starts,
                        ends, next_offsets, previous, None, lost)

    def read(self, batch: JobBatch):
        """The DataFrame of the batch's ranges (Kafka-shaped, or the typed columns)."""
        from .. import register
        from ..source.stream import offsets_to_json

        register(self.spark)
        reader = self.spark.read.format("sparklog").options(**self.options)
        reader = reader.option("startingOffsets", json.dumps(offsets_to_json(batch.start_offsets)))
        reader = reader.option("endingOffsets", json.dumps(offsets_to_json(batch.end_offsets)))
        return reader.load()

    def begin(self) -> JobBatch | None:
        """Clean up after crashed runs, plan, and attach the input DataFrame. None when
        there is nothing new to read (the application's first run always proceeds,
        to pin its starting offsets)."""
        cleaned = self.sink.cleanup(self.app_id)
        if cleaned:
            self._say(f"removed {cleaned} failed attempt(s) of earlier runs")
        batch = self.plan()
        self._say(f"planned transaction version {batch.version}: {batch.input_records} "
                  f"records in {len(batch.ranges)} range(s)")
        if batch.empty and (batch.previous is not None or not batch.start_offsets):
            return None
        batch.df = self.read(batch)
        fault_point("after-read")
        return batch

    # --- committing ------------------------------------------------------------------------
    def commit(self, batch: JobBatch, result) -> CommitRecord:
        """Write ``result`` (a DataFrame) and commit it with the batch's offsets.

        ConcurrentTransactionsError if another run committed this version first (this
        run's files are deleted). If the commit itself fails with another error its
        outcome is unknown: the files are left for the next run's cleanup, which keeps
        them only if the commit did happen.
        """
        self.sink.validate(result)
        self.spark.sparkContext.setJobDescription(
            f"sparklog job {self.app_id} transaction version {batch.version} -> "
            f"{self.sink.uri}")
        self._say(f"writing transaction version {batch.version} (attempt {batch.attempt})")
        staged = None
        try:
            staged = self.sink.stage(result, self.app_id, batch.version, batch.attempt)
            fault_point("after-files")
            extra = {"dataLoss": batch.data_loss} if batch.data_loss else {}
            record = CommitRecord.for_staged(staged, batch.next_offsets, batch.ranges, extra)
            fault_point("before-commit")
        except BaseException:
            if staged is not None:
                self.sink.abort(staged)
            raise
        finally:
            self.spark.sparkContext.setJobDescription(None)
        self._say(f"committing {len(staged.files)} file(s), {staged.records} rows")
        try:
            record = self.sink.commit(staged, record)
        except ConcurrentTransactionsError:
            self.sink.abort(staged)
            raise
        fault_point("after-commit")
        return record

    def run(self, transform=None) -> JobResult:
        """One run: begin, transform (None, a callable or SQL over view ``input``),
        commit, clean up. Returns a :class:`JobResult` (``summary()`` prints it)."""
        t0 = time.monotonic()
        batch = self.begin()
        if batch is None:
            last = self.sink.last_commit(self.app_id)
            return JobResult(self.app_id, self.sink.uri, self.sink.format, False,
                             last.version if last else None, [],
                             dict(last.offsets) if last else {},
                             seconds=time.monotonic() - t0,
                             table_version=self.sink.table_version())
        record = self.commit(batch, apply_transform(batch.df, transform))
        cleaned = self.sink.cleanup(self.app_id)
        result = JobResult(self.app_id, self.sink.uri, self.sink.format, True, record.version,
                           list(record.ranges), dict(record.offsets), record.input_records,
                           record.output_records, record.files, time.monotonic() - t0,
                           cleaned, self.sink.table_version())
        self._say(result.summary().splitlines()[0])
        return result
