"""The embedded metadata store: cluster state in versioned files on the storage root.

Layout under ``<root>/coordination/`` (every value is a
:class:`~sparklog.storage.versioned.VersionedFile`, so each change is one atomic
create-and-rename, and of two concurrent writers of the same version one wins and the
other re-reads and retries)::

    cluster-id/<v>.json                     {"cluster_id"}
    partitions/<topic>/<p>/<v>.json         {"leader", "leader_epoch"}
    producer-ids/<v>.json                   {"block_end"}: ids below it are handed out
    groups/<group>/<v>.json                 {"offsets": {topic: {p: [offset, metadata, ts]}}}
    <document name>/<v>.json                a shared document (security/users, security/acls)

Shared documents hold cluster-private state (SCRAM credentials, ACLs, the key of unknown
users' salts): their directories are made owner-only (0700, from the document's first
component down: ``security/``) and each version owner-only (0600), whatever the
storage's default and ``storage.topic.dir.permission`` are, and only the newest version
is kept (an older one would keep a deleted user's keys). Directories, files and stale
versions left by older releases are tightened and pruned the first time this process
uses any document of the same top directory (a broker does at start).

Broker registrations are ephemeral: kept in this process's memory only.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid

from ..errors import CoordinationError, FileAlreadyExistsError, InvalidArgumentError
from ..metadata.topic import validate_partition, validate_topic_name
from ..names import name_from_storage, storage_name
from ..storage import FileIO, open_fileio
from ..storage.paths import storage_root
from ..storage.versioned import VersionedFile
from .base import (
    NO_LEADER,
    BrokerInfo,
    CommittedOffset,
    CoordinationStore,
    LeaderAndEpoch,
    cas_attempts,
    validate_group_id,
    validate_offsets,
)

COORDINATION_DIR = "coordination"
#: permission bits of a shared document's directories and versions (owner only)
PRIVATE_DIR_MODE, PRIVATE_FILE_MODE = 0o700, 0o600

log = logging.getLogger(__name__)

#: Most threads releasing leaderships at once (:meth:`LocalCoordinationStore.
#: release_leaderships`): each release is a few NameNode round trips on HDFS
RELEASE_THREADS = 32


class LocalCoordinationStore(CoordinationStore):
    """:class:`CoordinationStore` for embedded mode, kept under ``root`` (a storage URL).

    Safe for threads of one process; several processes sharing the root stay consistent
    for offsets, epochs and producer ids (atomic versioned writes with retry).
    """

    def __init__(self, root: str, fileio: FileIO | None = None):
        if not isinstance(root, str) or not root:
            raise InvalidArgumentError(f"storage root must be a non-empty string URL, got {root!r}")
        self.root = storage_root(root)
        self.fileio = fileio or open_fileio(self.root)
        self.base = self.fileio.join(self.root, COORDINATION_DIR)
        self._lock = threading.RLock()
        self._brokers: dict[int, BrokerInfo] = {}
        self._groups: dict[str, tuple[int, dict]] = {}  # group -> (version, offsets)
        self._cluster_id: str | None = None
        #: documents (and their top directories) made owner-only by this process
        self._protected: set[str] = set()

    def _file(self, *parts: str) -> VersionedFile:
        return VersionedFile(self.fileio, self.fileio.join(self.base, *parts))

    @staticmethod
    def _latest_json(vf: VersionedFile) -> tuple[int, dict]:
        latest = vf.latest()
        if latest is None:
            return 0, {}
        try:
            doc = json.loads(latest[1])
        except ValueError as exc:
            raise CoordinationError(
                f"coordination file {vf.path_of(latest[0])} does not hold JSON ({exc}); "
                "it was not written by sparklog: move it away") from None
        if not isinstance(doc, dict):
            raise CoordinationError(
                f"coordination file {vf.path_of(latest[0])} holds {type(doc).__name__}, "
                "not a JSON object: move it away")
        return latest[0], doc

    def _update(self, vf: VersionedFile, change, latest=None) -> tuple[int, dict]:
        """Read-modify-write: ``change(doc) -> new doc`` written as the next version,
        retried (a bounded number of times: :func:`~.base.cas_attempts`) when a
        concurrent writer got there first. ``latest`` is a known (version, doc) to start
        from instead of reading. Returns the (version, doc) written."""
        for _ in cas_attempts(f"update of {vf.directory}"):
            version, doc = latest or self._latest_json(vf)
            latest = None
            new = change(doc)
            try:
                vf.write(version + 1, json.dumps(new, sort_keys=True).encode())
                return version + 1, new
            except FileAlreadyExistsError:
                continue
        raise AssertionError("unreachable: cas_attempts raises once exhausted")

    # --- shared documents ------------------------------------------------------------------
    def _document(self, name: str, *, write: bool = False) -> VersionedFile:
        """The versioned file of document ``name``: owner-only, newest version only
        (module docstring). The first use of a document's top directory (``security/``)
        tightens everything under it; a first write makes the document's directories
        0700."""
        from ..errors import StorageError

        parts = name.split("/")
        vf = VersionedFile(self.fileio, self.fileio.join(self.base, *parts), keep=1,
                           file_mode=PRIVATE_FILE_MODE)
        try:
            top = self.fileio.join(self.base, parts[0])
            if write and name not in self._protected:
                for depth in range(1, len(parts) + 1):
                    directory = self.fileio.join(self.base, *parts[:depth])
                    self.fileio.mkdirs(directory)
                    self.fileio.set_permission(directory, PRIVATE_DIR_MODE)
                self._protected.add(name)
            if parts[0] not in self._protected and self.fileio.exists(top):
                self._tighten(top)
                self._protected.add(parts[0])
        except StorageError as exc:  # another owner: reported, the broker reads on
            log.warning("could not make %s owner-only: %s", vf.directory, exc)
        return vf

    def _tighten(self, directory: str) -> None:
        """``directory`` and the directories under it 0700, their files 0600, and of
        every versioned value in them the newest version only."""
        self.fileio.set_permission(directory, PRIVATE_DIR_MODE)
        VersionedFile(self.fileio, directory, keep=1).prune()
        for info in self.fileio.list(directory):
            if info.is_dir:
                self._tighten(info.path)
            else:
                self.fileio.set_permission(info.path, PRIVATE_FILE_MODE)

    def read_document(self, name: str) -> dict:
        """See :meth:`CoordinationStore.read_document`: the latest version of the
        versioned file ``<coordination dir>/<name>``."""
        with self._lock:
            vf = self._document(name)
        return self._latest_json(vf)[1]

    def update_document(self, name: str, change) -> dict:
        """See :meth:`CoordinationStore.update_document`: the next version of the
        versioned file (threads of this process take turns; processes race on the
        version and the loser retries). Owner-only, newest version kept (module
        docstring)."""
        with self._lock:
            return self._update(self._document(name, write=True), change)[1]

    # --- cluster and brokers --------------------------------------------------------------
    def cluster_id(self) -> str:
        """A stable id written once to the storage root."""
        with self._lock:
            if self._cluster_id is None:
                vf = self._file("cluster-id")
                _, doc = self._latest_json(vf)
                if not doc:
                    try:
                        vf.write(1, json.dumps({"cluster_id": uuid.uuid4().hex}).encode())
                    except FileAlreadyExistsError:
                        pass
                    _, doc = self._latest_json(vf)
                self._cluster_id = doc["cluster_id"]
            return self._cluster_id

    def register_broker(self, broker: BrokerInfo) -> None:
        """Record a broker in memory (InvalidArgumentError if the id is registered)."""
        with self._lock:
            if broker.node_id in self._brokers and self._brokers[broker.node_id] != broker:
                raise InvalidArgumentError(
                    f"broker id {broker.node_id} is already registered at "
                    f"{self._brokers[broker.node_id].address}")
            self._brokers[broker.node_id] = broker

    def unregister_broker(self, broker_id: int) -> None:
        """Forget a broker's registration."""
        with self._lock:
            self._brokers.pop(broker_id, None)

    def live_brokers(self) -> dict[int, BrokerInfo]:
        """Brokers registered in this process."""
        with self._lock:
            return dict(self._brokers)

    def controller_id(self) -> int:
        """The lowest registered broker id (embedded mode has one broker)."""
        with self._lock:
            return min(self._brokers) if self._brokers else NO_LEADER

    # --- partition leadership -----------------------------------------------------------------
    def _state_file(self, topic: str, partition: int) -> VersionedFile:
        validate_topic_name(topic)
        validate_partition(partition, topic=topic)
        return self._file("partitions", topic, str(partition))

    def partition_state(self, topic: str, partition: int) -> LeaderAndEpoch | None:
        """The last recorded leader and epoch of the partition."""
        _, doc = self._latest_json(self._state_file(topic, partition))
        return LeaderAndEpoch(doc["leader"], doc["leader_epoch"]) if doc else None

    def acquire_leadership(self, topic: str, partition: int, broker_id: int) -> LeaderAndEpoch:
        """Always granted: the epoch becomes one more than any recorded."""
        _, doc = self._update(self._state_file(topic, partition), lambda d: {
            "leader": broker_id, "leader_epoch": d.get("leader_epoch", -1) + 1})
        return LeaderAndEpoch(doc["leader"], doc["leader_epoch"])

    def release_leadership(self, topic: str, partition: int, broker_id: int) -> None:
        """Record "no leader" (keeping the epoch) if ``broker_id`` leads."""
        state = self.partition_state(topic, partition)
        if state is None or state.leader != broker_id:
            return
        self._update(self._state_file(topic, partition), lambda d: {
            "leader": NO_LEADER, "leader_epoch": d.get("leader_epoch", 0)})

    def release_leaderships(self, partitions, broker_id: int) -> dict:
        """Each partition's state is its own file: they are released by up to
        :data:`RELEASE_THREADS` threads at once (a stop of a broker leading P partitions
        on HDFS waits for P / RELEASE_THREADS NameNode round trips in a row, not P)."""
        partitions = list(partitions)
        if len(partitions) <= 1:
            return super().release_leaderships(partitions, broker_id)
        from concurrent.futures import ThreadPoolExecutor

        release_one = super().release_leaderships
        failed: dict = {}
        with ThreadPoolExecutor(min(RELEASE_THREADS, len(partitions)),
                                thread_name_prefix="sparklog-release") as pool:
            for result in pool.map(lambda tp: release_one([tp], broker_id), partitions):
                failed.update(result)
        return failed

    # --- producer ids ----------------------------------------------------------------------------
    def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` ids from the persisted block counter."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidArgumentError(f"producer id count must be a positive int, got {count!r}")
        got = {}

        def bump(doc):
            got["start"] = doc.get("block_end", 0)
            return {"block_end": got["start"] + count}

        self._update(self._file("producer-ids"), bump)
        return got["start"]

    # --- group offsets -----------------------------------------------------------------------------
    def _group_file(self, group: str) -> VersionedFile:
        """The offsets file of ``group``, under its escaped name
        (:func:`sparklog.names.storage_name`)."""
        return self._file("groups", storage_name(validate_group_id(group)))

    def _legacy_group_file(self, group: str) -> VersionedFile | None:
        """Where versions before the escaping kept ``group`` (its raw id), when that
        differs from the escaped name and is no other group's escaped name."""
        if storage_name(group) == group or storage_name(name_from_storage(group)) == group:
            return None
        try:
            return self._file("groups", group)  # join refuses what was never storable
        except InvalidArgumentError:
            return None

    def _load_group(self, group: str) -> tuple[int, dict]:
        """(version, doc) of the group's offsets; a group an older version stored
        under its raw id is read from there until its first commit here."""
        latest = self._latest_json(self._group_file(group))
        legacy = self._legacy_group_file(group) if latest[0] == 0 else None
        return self._latest_json(legacy) if legacy is not None else latest

    def commit_offsets(self, group: str, offsets: dict) -> None:
        """Merge ``offsets`` into the group's offsets document (one atomic version)."""
        entries = validate_offsets(group, offsets)
        vf = self._group_file(group)

        def merge(doc):
            table = {t: dict(ps) for t, ps in doc.get("offsets", {}).items()}
            for (topic, partition), om in entries.items():
                table.setdefault(topic, {})[str(partition)] = [
                    om.offset, om.metadata, om.commit_timestamp]
            return {"offsets": table}

        with self._lock:
            self._groups[group] = self._update(
                vf, merge, self._groups.get(group) or self._load_group(group))

    def fetch_offsets(self, group: str, partitions=None) -> dict:
        """The group's committed offsets (all, or those of ``partitions``)."""
        _, doc = self._load_group(group)
        out = {}
        wanted = None if partitions is None else {(t, int(p)) for t, p in partitions}
        for topic, parts in doc.get("offsets", {}).items():
            for p, (offset, metadata, ts) in parts.items():
                key = (topic, int(p))
                if wanted is None or key in wanted:
                    out[key] = CommittedOffset(offset, metadata, ts)
        return out

    def list_groups(self) -> list[str]:
        """Groups that have an offsets document with at least one offset."""
        out = []
        for info in self.fileio.list(self.fileio.join(self.base, "groups")):
            if not info.is_dir:
                continue
            group = name_from_storage(info.name)
            if storage_name(group) != info.name:
                group = info.name  # kept under its raw id by an older version
                if self._legacy_group_file(group) is None:
                    continue
            try:
                validate_group_id(group)
            except InvalidArgumentError:
                continue  # not a directory this store made
            if self._load_group(group)[1].get("offsets"):
                out.append(group)
        return sorted(set(out))

    def delete_offsets(self, group: str, topics=None) -> None:
        """Drop the group's offsets (of ``topics`` only if given)."""
        validate_group_id(group)
        keep_none = topics is None
        drop = set(topics or ())
        def change(doc):
            if keep_none:
                return {"offsets": {}}
            return {"offsets": {t: ps for t, ps in doc.get("offsets", {}).items()
                                if t not in drop}}

        with self._lock:
            self._update(self._group_file(group), change, self._load_group(group))
            self._groups.pop(group, None)

    def close(self) -> None:
        """Drop the in-memory registrations."""
        with self._lock:
            self._brokers.clear()
