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
:func:`~sparklog.spark.source.catalogs.open_catalog` picks one from the source's options.
"""

from __future__ import annotations

import abc
import json
import threading
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

    def discard_fileio(self) -> None:
        """Close after a storage error, keeping no connection for later catalogs."""
        self.close()


#: most partitions whose logs a storage catalog reads at the same time
PLANNING_THREADS = 16


class StorageCatalog(Catalog):
    """A catalog reading the storage root alone (``path`` mode). The partitions of a
    topic are read in parallel (each is a few storage round trips: listings, the
    log start checkpoint, the headers of the active segment's new frames).

    ``shared=True`` (planning calls) takes the storage root's FileIO from
    :func:`shared_fileio`: opened by the first plan of the process and kept for the
    next ones, so a reused planning worker does not open a new storage client (on
    ``hdfs://``, a Hadoop ``FileSystem``) per query. What the catalog reads (topic
    configs, listings, log ends) is never kept: each catalog reads it afresh."""

    def __init__(self, root: str, storage_options: dict | None = None, *,
                 shared: bool = False):
        from ...storage import open_fileio

        self.storage_options = dict(storage_options or {})
        self.shared = shared
        fileio = shared_fileio(root, self.storage_options) if shared \
            else open_fileio(root, **self.storage_options)
        if not fileio.exists(root):
            raise StorageFileNotFoundError(
                f"storage root {root!r} (option path) does not exist")
        self.store = TopicStore(root, fileio)
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
            reader = self._readers.get((topic, p)) or open_log_reader(self.store, topic, p)
            log_start, high_watermark = reader.offsets()
            segments = tuple((s.base_offset, s.size) for s in reader.segments())
            return reader, LogSnapshot(topic, p, log_start, high_watermark, segments)

        if len(parts) > 1:
            with ThreadPoolExecutor(min(len(parts), PLANNING_THREADS),
                                    thread_name_prefix="sparklog-plan") as pool:
                results = list(pool.map(state, parts))
        else:
            results = [state(p) for p in parts]
        out = {}
        for p, (reader, st) in zip(parts, results):
            self._readers[(topic, p)] = reader
            out[p] = st
        return out

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """First offset whose timestamp is >= ``timestamp_ms``, or None."""
        return self.log_reader(topic, partition).offset_for_timestamp(timestamp_ms)

    def close(self) -> None:
        """Release connections and file handles (a shared FileIO stays open for the
        process's next catalog)."""
        if not self.shared:
            self.store.fileio.close()

    def discard_fileio(self) -> None:
        """Close the catalog's FileIO and, when shared, forget it, so that the next
        catalog of its root opens a new one (after a storage error)."""
        if self.shared:
            forget_shared_fileio(self.store.fileio)
        self.store.fileio.close()


#: the FileIO of each (storage root, storage options) opened by shared catalogs in this
#: process, kept for the process's life (Spark reuses its Python planning workers)
_SHARED_FILEIOS: dict = {}
_SHARED_LOCK = threading.Lock()


def shared_fileio(root: str, storage_options: dict | None = None):
    """The process's FileIO of ``root`` opened with ``storage_options``: opened on first
    use, then the same one until :func:`forget_shared_fileio` drops it."""
    from ...storage import open_fileio

    options = dict(storage_options or {})
    key = json.dumps([root, options], sort_keys=True, default=repr)
    with _SHARED_LOCK:
        fileio = _SHARED_FILEIOS.get(key)
        if fileio is None:
            fileio = _SHARED_FILEIOS[key] = open_fileio(root, **options)
    return fileio


def forget_shared_fileio(fileio) -> None:
    """Drop ``fileio`` from the shared ones (the caller closes it)."""
    with _SHARED_LOCK:
        for key in [k for k, f in _SHARED_FILEIOS.items() if f is fileio]:
            del _SHARED_FILEIOS[key]



def open_log_reader(store: TopicStore, topic: str, partition: int):
    """A LogReader over ``topic``/``partition`` of the store's root."""
    from ...log.reader import LogReader

    return LogReader(store.fileio, store.partition_dir(topic, partition))
