"""Mutable small state on an append-only file system: versioned immutable files.

The storage contract has no overwrite, so a value that changes (a topic config, a
checkpoint) is kept as a directory of files ``<version:010d><suffix>``; writing version
``n+1`` uses :meth:`FileIO.write_atomic` (temporary file + rename-no-replace), so of two
concurrent writers of the same version exactly one wins and the other gets
FileAlreadyExistsError. Readers take the highest complete version. Old versions are
pruned after a successful write (all but the last ``keep``); ``file_mode`` gives each
version its permission bits (private documents: 0600) right after its rename;
``parents=False`` writes only into an existing directory (a partition's checkpoints).
"""

from __future__ import annotations

from .base import FileIO

_WIDTH = 10
_MAX_RELISTS = 100


#: Most attempts of one compare-and-set (a versioned file, a ZooKeeper node version)
#: against concurrent writers: each lost attempt means another writer made progress,
#: so running out means something rewrites the value in a loop.
MAX_CAS_ATTEMPTS = 100


def cas_attempts(what: str, error=None):
    """Yield attempt numbers for a compare-and-set retry loop (``for _ in
    cas_attempts(...)``, left with break/return on success); after MAX_CAS_ATTEMPTS
    raise ``error`` (default StorageError) naming ``what``."""
    from ..errors import StorageError

    yield from range(MAX_CAS_ATTEMPTS)
    raise (error or StorageError)(
        f"{what}: gave up after {MAX_CAS_ATTEMPTS} attempts, each lost to a concurrent "
        "writer")


class VersionedFile:
    """A small value stored as versioned immutable files in ``directory``."""

    def __init__(self, fileio: FileIO, directory: str, suffix: str = ".json", keep: int = 2,
                 *, file_mode: int | None = None, parents: bool = True):
        self.fileio = fileio
        #: False: ``directory`` must exist already; a write creates no directory
        #: (non-recursive create, StorageFileNotFoundError when it is gone: a partition
        #: directory renamed away by a topic deletion is not brought back)
        self.parents = parents
        self.directory = directory
        self.suffix = suffix
        self.keep = keep
        #: permission bits each version gets once written (None: the storage's default)
        self.file_mode = file_mode

    def _versions(self) -> list[int]:
        out = []
        for info in self.fileio.list(self.directory):
            name = info.name
            if name.endswith(self.suffix) and not name.startswith("."):
                stem = name[: -len(self.suffix)]
                if stem.isdigit():
                    out.append(int(stem))
        return sorted(out)

    def path_of(self, version: int) -> str:
        """The file that holds ``version``."""
        return self.fileio.join(self.directory, f"{version:0{_WIDTH}d}{self.suffix}")

    def latest(self) -> tuple[int, bytes] | None:
        """(version, bytes) of the newest version, or None if nothing was written.

        A newest version that vanishes before it is read was pruned, so newer ones
        exist: the directory is listed again (never an older version returned, which a
        writer would take for the newest)."""
        from ..errors import StorageError, StorageFileNotFoundError

        for _ in range(_MAX_RELISTS):
            versions = self._versions()
            if not versions:
                return None
            try:
                return versions[-1], self.fileio.read_all(self.path_of(versions[-1]))
            except StorageFileNotFoundError:  # pruned under us: newer versions exist
                continue
        raise StorageError(f"{self.directory}: the newest version vanished "
                           f"{_MAX_RELISTS} times while being read")

    def write(self, version: int, data: bytes) -> None:
        """Write ``version`` (must not exist yet: FileAlreadyExistsError otherwise),
        then prune versions older than the last ``keep``.

        A writer that read version ``n`` long ago may find the slot ``n + 1`` free
        again because it was written *and pruned* meanwhile; pruning it took version
        ``n + 1 + keep``, so seeing a version that high after the write also raises
        FileAlreadyExistsError (the caller re-reads and retries, as for any lost race;
        its stray file is never the newest and is pruned later). A rightful write sees
        one only if ``keep`` more versions were written between its rename and its
        listing: it then retries too, which read-modify-write callers survive."""
        from ..errors import FileAlreadyExistsError

        if self.parents:
            self.fileio.mkdirs(self.directory)
        self.fileio.write_atomic(self.path_of(version), data, parents=self.parents)
        if self.file_mode is not None:
            from ..errors import StorageFileNotFoundError

            try:
                self.fileio.set_permission(self.path_of(version), self.file_mode)
            except StorageFileNotFoundError:  # pruned: a newer version exists (below)
                pass
        versions = self._versions()
        if versions and versions[-1] >= version + self.keep:
            raise FileAlreadyExistsError(
                f"{self.path_of(version)}: version {versions[-1]} was written meanwhile")
        self.prune(versions)

    def prune(self, versions: list[int] | None = None) -> None:
        """Delete the versions older than the last ``keep`` (one already pruned by a
        concurrent writer is no error)."""
        versions = self._versions() if versions is None else versions
        for old in versions[: -self.keep]:
            self.fileio.delete(self.path_of(old))
