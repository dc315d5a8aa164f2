"""Where the Spark source learns topics, partitions and offsets (the driver side).

Two catalogs answer the same questions:

* :class:`StorageCatalog` (option ``path``): topic configs from
  :class:`~sparklog.metadata.TopicStore` and offsets from the segment files through
  :class:`~sparklog.log.reader.LogReader`: no broker needed (offline backfills, brokers
  down). The high watermark is the end of the last complete frame on storage.
* :class:`BrokerCatalog` (option ``bootstrap.servers``): the broker's metadata and
  DescribeLog answer (log start, high watermark, segments) and its ListOffsets by
  timestamp; the broker names the storage root the tasks read from.

Either way the tasks read the data from storage, never through a broker.
:func:`~sparklog.reader.spark.catalogs.open_catalog` picks one from the source's options.
"""

from __future__ import annotations

import abc
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from ...errors import StorageFileNotFoundError, UnknownTopicOrPartitionError
from ...metadata import TopicConfig, TopicStore
from .planning import LogSnapshot


class Catalog(abc.ABC):
    """Topics and offsets as the planner needs them. ``root`` is the storage root URL
    the tasks read from; ``storage_options`` go to ``open_fileio`` in the tasks."""

    root: str
    storage_options: dict = {}

    @abc.abstractmethod
    def list_topics(self) -> list[str]:
        """Names of existing topics."""

    @abc.abstractmethod
    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None if it does not exist."""

    @abc.abstractmethod
    def partition_states(self, topic: str, partitions) -> dict:
        """{partition: LogSnapshot} for the given partitions of ``topic``."""

    @abc.abstractmethod
    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms``, or None."""

    def refresh(self) -> None:
        """Forget cached topic configs (a long-running stream sees new partitions)."""
        getattr(self, "_configs", {}).clear()

    def close(self) -> None:
        """Release connections."""


#: most partitions whose logs a storage catalog reads at the same time
PLANNING_THREADS = 16


#: most storage roots whose handles a process keeps between plans
SHARED_ROOTS = 8
#: most partition readers a process keeps between plans
SHARED_READERS = 4096


class _SharedRoots:
    """The storage handle and partition readers of each recently planned root, kept
    for the process's later plans (Spark reuses its Python workers, and a stream plans
    every micro-batch): a plan then opens no new storage client and, for each
    partition, re-lists its directory but walks only the frames appended to the active
    segment since the last plan (``LogReader`` keeps what it walked; a segment that
    shrank, i.e. was repaired, is walked again). Bounded, least recently used first
    out; per process (a forked child starts empty)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._stores: OrderedDict = OrderedDict()
        self._readers: OrderedDict = OrderedDict()

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # inherited through fork: the handles are not ours
            self._pid = os.getpid()
            self._stores.clear()
            self._readers.clear()

    def store(self, root: str, options: dict, open_store) -> TopicStore:
        """The kept TopicStore of ``root`` with ``options``, else ``open_store()``'s."""
        key = (root, tuple(sorted((k, repr(v)) for k, v in options.items())))
        with self._lock:
            self._check_pid()
            store = self._stores.get(key)
            if store is not None:
                self._stores.move_to_end(key)
                return store
        store = open_store()
        evicted = []
        with self._lock:
            kept = self._stores.setdefault(key, store)
            self._stores.move_to_end(key)
            while len(self._stores) > SHARED_ROOTS:
                _, old = self._stores.popitem(last=False)
                evicted.append(old)
                self._readers = OrderedDict((k, v) for k, v in self._readers.items()
                                            if k[0] is not old)
        if kept is not store:
            evicted.append(store)
        for old in evicted:
            old.fileio.close()
        return kept

    def reader(self, store: TopicStore, topic: str, partition: int) -> tuple:
        """(kept LogReader or None, lock) of one partition of ``store``: the caller
        holds the lock while it uses the reader (readers are not thread-safe)."""
        key = (store, topic, partition)
        with self._lock:
            entry = self._readers.get(key)
            if entry is None:
                entry = self._readers[key] = (None, threading.Lock())
                while len(self._readers) > SHARED_READERS:
                    self._readers.popitem(last=False)
            else:
                self._readers.move_to_end(key)
            return entry

    def keep(self, store: TopicStore, topic: str, partition: int, entry: tuple,
             reader) -> None:
        """Record ``reader`` as the partition's kept reader (caller holds its lock)."""
        with self._lock:
            if self._readers.get((store, topic, partition)) is entry:
                self._readers[(store, topic, partition)] = (reader, entry[1])

    def forget(self, store: TopicStore, topic: str, partition: int) -> None:
        """Drop a partition's kept reader (its use failed: start afresh next time)."""
        with self._lock:
            self._readers.pop((store, topic, partition), None)


_shared = _SharedRoots()


class StorageCatalog(Catalog):
    """A catalog reading the storage root alone (``path`` mode). The partitions of a
    topic are read in parallel (each is a few storage round trips: listings, the
    log start checkpoint, the headers of the active segment's new frames). The storage
    handle and the partition readers are kept for the process's next plans of the same
    root (see :class:`_SharedRoots`)."""

    def __init__(self, root: str, storage_options: dict | None = None):
        from ...storage import open_fileio

        self.storage_options = dict(storage_options or {})

        def open_store() -> TopicStore:
            return TopicStore(root, open_fileio(root, **self.storage_options))

        self.store = _shared.store(root, self.storage_options, open_store)
        if not self.store.fileio.exists(root):
            raise StorageFileNotFoundError(
                f"storage root {root!r} (option path) does not exist")
        self.root = self.store.root
        self._configs: dict = {}
        self._readers: dict = {}

    def list_topics(self) -> list[str]:
        """Names of existing topics."""
        return self.store.list_topics()

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None if it does not exist (cached)."""
        if topic not in self._configs:
            try:
                self._configs[topic] = self.store.describe_topic(topic)
            except UnknownTopicOrPartitionError:
                return None
        return self._configs[topic]

    def log_reader(self, topic: str, partition: int):
        """The (cached) read-only view of one partition's log."""
        key = (topic, partition)
        if key not in self._readers:
            self._readers[key] = open_log_reader(self.store, topic, partition)
        return self._readers[key]

    def partition_states(self, topic: str, partitions) -> dict:
        """{partition: LogSnapshot} read from the partition logs (in parallel)."""
        parts = list(partitions)

        def state(p):
            entry = _shared.reader(self.store, topic, p)
            with entry[1]:
                try:
                    reader = entry[0]
                    if reader is None:
                        reader = open_log_reader(self.store, topic, p)
                        reader.rescan_changed = True
                    log_start, high_watermark = reader.offsets()
                    segments = tuple((s.base_offset, s.size) for s in reader.segments())
                except BaseException:
                    _shared.forget(self.store, topic, p)
                    raise
                _shared.keep(self.store, topic, p, entry, reader)
            return LogSnapshot(topic, p, log_start, high_watermark, segments)

        if len(parts) > 1:
            with ThreadPoolExecutor(min(len(parts), PLANNING_THREADS),
                                    thread_name_prefix="sparklog-plan") as pool:
                results = list(pool.map(state, parts))
        else:
            results = [state(p) for p in parts]
        return dict(zip(parts, results))

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """First offset whose timestamp is >= ``timestamp_ms``, or None."""
        return self.log_reader(topic, partition).offset_for_timestamp(timestamp_ms)

    def close(self) -> None:
        """Nothing to release: the storage handle stays for the process's next plans
        (closed when evicted, see :class:`_SharedRoots`)."""


def open_log_reader(store: TopicStore, topic: str, partition: int):
    """A LogReader over ``topic``/``partition`` of the store's root."""
    from ...log.reader import LogReader

    return LogReader(store.fileio, store.partition_dir(topic, partition))
