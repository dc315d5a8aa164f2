"""Tail repair without truncate: copy the valid prefix and swap it in, crash-safely.

The storage contract has no truncate and no overwrite, so a torn or corrupt tail of the
active segment ``X.log`` (valid up to byte ``P``) is removed in four steps:

1. write bytes ``[0, P)`` of ``X.log`` to ``X.log.cleaned`` (create-no-overwrite), sync,
   close;
2. rename ``X.log.cleaned`` -> ``X.log.swap``  (the commit point: the copy is complete);
3. delete ``X.log``;
4. rename ``X.log.swap`` -> ``X.log``.

:func:`finish_interrupted_repairs`, run first thing by every open, completes or undoes
a repair cut short by a crash: a ``.cleaned`` file is an incomplete copy and is deleted
(the scan then finds the same tail again); a ``.swap`` file is a complete copy, so any
``X.log`` still beside it is deleted and the ``.swap`` renamed into place.
"""

from __future__ import annotations

import logging

from ..errors import StorageError
from ..storage.base import FileIO
from .layout import CLEANED_SUFFIX, SWAP_SUFFIX, PartitionListing

log = logging.getLogger(__name__)

COPY_CHUNK_BYTES = 8 << 20


def finish_interrupted_repairs(fileio: FileIO, listing: PartitionListing) -> bool:
    """Complete or undo interrupted tail repairs and delete leftover temporary files
    of interrupted atomic writes. Returns True if anything changed (list again)."""
    changed = False
    for files in listing.segments.values():
        if files.cleaned is not None:
            log.warning("discarding incomplete tail repair copy %s", files.cleaned.path)
            fileio.delete(files.cleaned.path)
            changed = True
        if files.swap is not None:
            target = files.swap.path[: -len(SWAP_SUFFIX)] + ".log"
            log.warning("finishing interrupted tail repair: %s -> %s", files.swap.path, target)
            if files.log is not None:
                fileio.delete(target)
            fileio.rename(files.swap.path, target)
            changed = True
    for info in listing.temporary:
        fileio.delete(info.path)
        changed = True
    return changed


def repair_tail(fileio: FileIO, path: str, valid_end: int) -> None:
    """Cut segment file ``path`` back to its first ``valid_end`` bytes by the copy-and-
    swap procedure of the module docstring. Nobody may hold the file's lease."""
    base = path[: -len(".log")]
    cleaned, swap = base + CLEANED_SUFFIX, base + SWAP_SUFFIX
    out = fileio.create(cleaned, parents=fileio.in_existing_dir())
    try:
        pos = 0
        while pos < valid_end:
            data = fileio.read_range(path, pos, min(COPY_CHUNK_BYTES, valid_end - pos))
            if not data:
                raise StorageError(
                    f"{path} ended at byte {pos} while copying its first {valid_end} bytes")
            out.write(data)
            pos += len(data)
        out.sync()
    finally:
        out.close()
    fileio.rename(cleaned, swap)
    fileio.delete(path)
    fileio.rename(swap, path)
