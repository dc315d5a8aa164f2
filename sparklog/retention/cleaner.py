"""The broker's log cleaner: threads compacting the partitions it leads (Kafka's
LogCleaner with its ``log.cleaner.*`` settings).

``log.cleaner.threads`` threads each take, in turn, the dirtiest partition due for
cleaning (:func:`sparklog.log.cleaner.needs_cleaning`) that no other thread is cleaning,
and clean it with :func:`sparklog.log.cleaner.clean`; all of them share one I/O throttle
of ``log.cleaner.io.max.bytes.per.second`` and each has a key map of
``log.cleaner.dedupe.buffer.size`` divided among the threads, as in Kafka. With no
partition due, a thread waits ``log.cleaner.backoff.ms``. A due partition whose cleaning
could clean nothing (a transaction still open from its first dirty offset on) is not
tried again until its cleanable range changes (a segment sealed, the first dirty offset
moved): the dirty bytes above the last stable offset are not cleanable, as in Kafka.
``log.cleaner.enable=false`` starts no thread.

With ``log.cleaner.process.enable`` (default true) the CPU-heavy part of each cleaning
runs in a helper process (:mod:`.cleaner_process`), so it does not hold the GIL the
broker's event loop and partition writers need; the thread keeps the partition's
maintenance lock, commits the cleaned segments and writes the checkpoint.

Per partition it keeps what Kafka's cleaner manager reports: bytes cleaned (read),
bytes written, the dirty ratio and the time of the last cleaning; :meth:`collect`
yields them as Prometheus families, registered in the broker's registry.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..errors import SparklogError
from ..log.cleaner import Throttle, clean, cleanable_state, needs_cleaning

log = logging.getLogger(__name__)


@dataclass
class PartitionCleaning:
    """What the cleaner knows of one partition (its metrics)."""

    bytes_read: int = 0
    bytes_written: int = 0
    dirty_ratio: float = 0.0
    last_clean_ms: int = -1
    cleanings: int = 0
    #: ``(first dirty, first uncleanable)`` of the last due cleaning that could clean
    #: nothing (a transaction open from the first dirty offset to the end of the sealed
    #: segments: Kafka's last stable offset at the first dirty one); the partition is
    #: not tried again until that range changes. None: not stalled.
    stalled: tuple[int, int] | None = None


class LogCleanerManager:
    """Cleaner threads over ``partitions()`` (a callable returning the open partition
    writers, each with ``.name``, ``.topic_name``, ``.partition`` and ``.log``).
    ``bound(writer)`` gives the offset from which a partition must not be cleaned (the
    offset its producer-state snapshot covers), or None."""

    def __init__(self, partitions, *, threads: int = 1, dedupe_buffer_size: int = 128 << 20,
                 io_max_bytes_per_second: float | None = None, backoff_ms: int = 15000,
                 bound=None, clock=None, worker=None):
        self.partitions = partitions
        self.bound = bound or (lambda writer: None)
        #: runs a cleaning's steps 2-3 (:class:`.cleaner_process.CleanerProcesses`), or
        #: None: in the cleaner thread
        self.worker = worker
        self.threads = threads
        self.dedupe_buffer_size = dedupe_buffer_size
        self.throttle = Throttle(io_max_bytes_per_second)
        self.backoff = backoff_ms / 1000.0
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.stats: dict[tuple[str, int], PartitionCleaning] = {}
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        #: the threads leave together, once none cleans (see :meth:`_run`)
        self._leaving = threading.Barrier(max(threads, 1), action=self._close_worker)

    @classmethod
    def for_broker(cls, partitions, config, storage=None) -> "LogCleanerManager":
        """The cleaner of a broker with BrokerConfig ``config`` (``log.cleaner.*``) over
        the PartitionWriters ``partitions()``: a partition is cleaned only below the
        offset its idempotent-producer snapshot covers (not at all before the first
        snapshot, when it has idempotent producers), so the frames a restarted broker
        replays to rebuild that state stay whole. With ``storage``, ``(URI, FileIO
        options)`` of the broker's storage, and ``log.cleaner.process.enable``, the
        cleanings run in helper processes."""
        worker = None
        if storage is not None and config.log_cleaner_process_enable:
            from .cleaner_process import CleanerProcesses

            rate = config.log_cleaner_io_max_bytes_per_second
            worker = CleanerProcesses(storage[0], storage[1],
                                      workers=config.log_cleaner_threads,
                                      rate=rate / config.log_cleaner_threads)
        return cls(partitions, threads=config.log_cleaner_threads, worker=worker,
                   dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
                   io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
                   backoff_ms=config.log_cleaner_backoff_ms,
                   bound=lambda w: (w.snapshots.covered or 0) if w.state.producers else None)

    def start(self) -> None:
        """Start the cleaner threads."""
        for i in range(self.threads):
            t = threading.Thread(target=self._run, name=f"sparklog-log-cleaner-{i}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Stop the threads (a cleaning in progress finishes its current partition) and
        then the helper processes, if any."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for t in self._threads:
            t.join()
        self._threads = []
        self._close_worker()  # also when no thread ever started

    def _close_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def wake(self) -> None:
        """Look for work now instead of after the backoff."""
        with self._wake:
            self._wake.notify_all()

    def _stats(self, writer) -> PartitionCleaning:
        return self.stats.setdefault((writer.topic_name, writer.partition), PartitionCleaning())

    def _pick(self):
        """The dirtiest due partition no thread is cleaning nor stalled at its current
        range, marked busy, with its cleanable state; or None."""
        now = self.clock()
        best, best_state, best_ratio = None, None, -1.0
        for w in list(self.partitions()):
            plog = w.log
            if plog.closed or not plog.config.compact or w.name in self._busy:
                continue
            try:
                state = cleanable_state(plog, now, self.bound(w))
            except SparklogError as exc:
                log.warning("partition %s: cannot assess cleaning: %s", w.name, exc)
                continue
            stats = self._stats(w)
            stats.dirty_ratio = state.dirty_ratio
            if stats.stalled == (state.first_dirty, state.first_uncleanable):
                plog.delete_replaced_files(now)  # what a cleaning would have done first
                continue
            if needs_cleaning(plog, now, state) and state.dirty_ratio > best_ratio:
                best, best_state, best_ratio = w, state, state.dirty_ratio
        if best is None:
            return None
        self._busy.add(best.name)
        return best, best_state

    def clean_once(self) -> int:
        """One pass of one thread: clean the dirtiest due partition; returns the bytes
        it read (0 when none was due)."""
        with self._lock:
            picked = self._pick()
        if picked is None:
            return 0
        writer, state = picked
        try:
            result = clean(writer.log, self.clock(),
                           dedupe_buffer_size=self.dedupe_buffer_size // max(self.threads, 1),
                           throttle=self.throttle, max_offset=self.bound(writer),
                           worker=self.worker)
        except SparklogError as exc:
            log.warning("partition %s: cleaning failed: %s", writer.name, exc)
            return 0
        finally:
            with self._lock:
                self._busy.discard(writer.name)
        with self._lock:
            s = self._stats(writer)
            s.stalled = (state.first_dirty, state.first_uncleanable) if result is None else None
        if result is None:
            return 0
        with self._lock:
            s.bytes_read += result.bytes_read
            s.bytes_written += result.bytes_written
            s.last_clean_ms = self.clock()
            s.cleanings += 1
            try:
                s.dirty_ratio = cleanable_state(writer.log, self.clock(),
                                                self.bound(writer)).dirty_ratio
            except SparklogError:
                pass
        return result.bytes_read

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.clean_once()
            except Exception:  # noqa: BLE001 - a cleaner thread must not die silently
                log.exception("log cleaner thread failed; going on")
                worked = 0
            if not worked:
                with self._wake:
                    if not self._stop.is_set():
                        self._wake.wait(self.backoff)
        # A helper process dies with the thread that started it (its parent-death
        # signal follows the thread, not the process), and any thread's cleaning may
        # run on any helper: so no thread ends while another still cleans; the last
        # to arrive stops the helpers (the barrier's action), then all end.
        try:
            self._leaving.wait()
        except threading.BrokenBarrierError:
            pass

    # --- metrics ---------------------------------------------------------------------
    def describe(self):
        """No families up front (they are computed when scraped)."""
        return []

    def collect(self):
        """Prometheus families: bytes cleaned and written, dirty ratio, last clean
        time, per partition (Kafka's ``kafka.log:type=LogCleaner`` and
        ``LogCleanerManager`` metrics, per partition)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        tp = ["topic", "partition"]
        read = CounterMetricFamily("sparklog_log_logcleaner_cleaned_bytes",
                                   "Bytes read by the log cleaner", labels=tp)
        written = CounterMetricFamily("sparklog_log_logcleaner_written_bytes",
                                      "Bytes of cleaned segments written", labels=tp)
        ratio = GaugeMetricFamily("sparklog_log_logcleanermanager_dirty_ratio",
                                  "Dirty bytes over cleanable bytes", labels=tp)
        last = GaugeMetricFamily("sparklog_log_logcleaner_last_clean_time_ms",
                                 "End of the last cleaning (ms since the epoch, -1: never)",
                                 labels=tp)
        with self._lock:
            items = list(self.stats.items())
        for (topic, partition), s in items:
            labels = [topic, str(partition)]
            read.add_metric(labels, s.bytes_read)
            written.add_metric(labels, s.bytes_written)
            ratio.add_metric(labels, s.dirty_ratio)
            last.add_metric(labels, s.last_clean_ms)
        yield from (read, written, ratio, last)
