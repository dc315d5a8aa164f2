"""Checkpoints of a partition: small mutable values kept as versioned immutable files.

The storage cannot overwrite, so each new value is the next version
(:class:`~sparklog.storage.versioned.VersionedFile`: write_atomic of
``<version:010d><suffix>`` in the partition directory; readers take the highest).
A write creates no directory (``FileIO.in_existing_dir``): once the partition directory
is renamed away (a topic deletion), a stale writer's checkpoint fails with
StorageFileNotFoundError instead of bringing the directory back.
The partition log keeps two: its log start offset
(``.log-start-offset-checkpoint``) and its leader epoch history
(``.leader-epoch-checkpoint``, see :mod:`sparklog.log.epoch`).
"""

from __future__ import annotations

import json

from ..errors import CorruptRecordError
from ..storage.base import FileIO
from ..storage.versioned import VersionedFile


class JsonCheckpoint:
    """A JSON document stored as versioned files with ``suffix`` in ``directory``."""

    def __init__(self, fileio: FileIO, directory: str, suffix: str):
        self.file = VersionedFile(fileio, directory, suffix=suffix,
                                  parents=fileio.in_existing_dir())
        self.version = 0

    def read(self) -> dict | None:
        """The latest document, or None if none was written; CorruptRecordError names
        the file when it does not parse."""
        latest = self.file.latest()
        if latest is None:
            return None
        self.version, data = latest
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            path = self.file.path_of(self.version)
            raise CorruptRecordError(f"checkpoint {path} is not valid: {exc}",
                                     path=path) from None
        return doc

    def write(self, doc: dict) -> None:
        """Store ``doc`` as the next version (FileAlreadyExistsError if another writer
        stored that version first: this writer is stale)."""
        latest = self.file.latest() if self.version == 0 else None
        if latest is not None:
            self.version = latest[0]
        self.file.write(self.version + 1, json.dumps(doc, sort_keys=True).encode())
        self.version += 1
