"""Mutable small state on an append-only file system: versioned immutable files.

The storage contract has no overwrite, so a value that changes (a topic config, a
checkpoint) is kept as a directory of files ``<version:010d><suffix>``; writing version
``n+1`` uses :meth:`FileIO.write_atomic` (temporary file + rename-no-replace), so of two
concurrent writers of the same version exactly one wins and the other gets
FileAlreadyExistsError. Readers take the highest complete version. Old versions are
pruned after a successful write.
"""

from __future__ import annotations

from .base import FileIO

_WIDTH = 10


class VersionedFile:
    """A small value stored as versioned immutable files in ``directory``."""

    def __init__(self, fileio: FileIO, directory: str, suffix: str = ".json", keep: int = 2):
        self.fileio = fileio
        self.directory = directory
        self.suffix = suffix
        self.keep = keep

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
        """(version, bytes) of the newest version, or None if nothing was written."""
        from ..errors import StorageFileNotFoundError

        for version in reversed(self._versions()):
            try:
                return version, self.fileio.read_all(self.path_of(version))
            except StorageFileNotFoundError:  # pruned under us: try the next one
                continue
        return None

    def write(self, version: int, data: bytes) -> None:
        """Write ``version`` (must not exist yet: FileAlreadyExistsError otherwise),
        then prune versions older than the last ``keep``."""
        self.fileio.mkdirs(self.directory)
        self.fileio.write_atomic(self.path_of(version), data)
        for old in self._versions()[: -self.keep]:
            self.fileio.delete(self.path_of(old))
