"""Helpers shared by the log layer tests (no tests here).

``RecordingFileIO`` wraps a real FileIO and records every call (to prove which files an
open touches) and can raise ``SimulatedCrash`` at a chosen call (to cut a procedure at
every step); the files underneath are real.
"""

from __future__ import annotations

import pyarrow as pa

from sparklog.format.frame import encode_frame, raw_batch
from sparklog.storage.base import FileIO

TYPED = pa.schema([pa.field("n", pa.int64())])


def raw_frame(values, timestamps=None, keys=None, **kw) -> bytes:
    """A raw-topic frame of ``values`` (bytes) with explicit timestamps."""
    if timestamps is None:
        timestamps = [1_000 + i for i in range(len(values))]
    return encode_frame(raw_batch(values, keys=keys), timestamps=timestamps, **kw)


def typed_frame(numbers, timestamps=None, **kw) -> bytes:
    """A small typed frame with one int64 column ``n``."""
    if timestamps is None:
        timestamps = [1_000 + i for i in range(len(numbers))]
    batch = pa.RecordBatch.from_arrays([pa.array(numbers, pa.int64())], schema=TYPED)
    return encode_frame(batch, timestamps=timestamps, **kw)


class SimulatedCrash(BaseException):
    """Raised by RecordingFileIO to stop a procedure as a crash would."""


class RecordingFileIO(FileIO):
    """Delegates to ``inner``; records ``(method, path)``; ``crash_at(n)`` makes the
    n-th mutating call (create/append/rename/delete/write/sync/close) raise
    SimulatedCrash before it happens."""

    MUTATING = {"create", "append", "rename", "delete", "write", "sync", "close", "flush",
                "recover_lease", "write_atomic"}

    def __init__(self, inner: FileIO):
        self.inner = inner
        self.scheme = inner.scheme
        self.calls: list[tuple[str, str]] = []
        self.crash_after = None
        self.mutations = 0
        self.crashed = None

    def crash_at(self, n: int | None) -> None:
        """Crash at the n-th mutating call from now (None: never)."""
        self.crash_after = n
        self.mutations = 0

    def _note(self, method: str, path: str) -> None:
        self.calls.append((method, path))
        if method in self.MUTATING:
            self.mutations += 1
            if self.crash_after is not None and self.mutations >= self.crash_after:
                # a crashed process does nothing more: every later call fails too
                self.crashed = self.crashed or f"{method} {path}"
                raise SimulatedCrash(self.crashed)

    def read_paths(self) -> list[str]:
        """Paths whose bytes were read."""
        return [p for m, p in self.calls if m in ("read_range", "read_all", "open_input")]

    def create(self, path, overwrite=False, parents=True):
        self._note("create", path)
        return _Out(self, self.inner.create(path, overwrite, parents))

    def append(self, path):
        self._note("append", path)
        return _Out(self, self.inner.append(path))

    def recover_lease(self, path):
        self._note("recover_lease", path)
        return self.inner.recover_lease(path)

    def open_input(self, path):
        self._note("open_input", path)
        return self.inner.open_input(path)

    def read_range(self, path, offset, length):
        self._note("read_range", path)
        return self.inner.read_range(path, offset, length)

    def rename(self, src, dst):
        self._note("rename", src)
        return self.inner.rename(src, dst)

    def delete(self, path, recursive=False):
        self._note("delete", path)
        return self.inner.delete(path, recursive)

    def exists(self, path):
        return self.inner.exists(path)

    def size(self, path):
        self._note("size", path)
        return self.inner.size(path)

    def list(self, path):
        self._note("list", path)
        return self.inner.list(path)

    def mkdirs(self, path):
        return self.inner.mkdirs(path)

    def join(self, *parts):
        return self.inner.join(*parts)

    def local_path(self, path):
        return self.inner.local_path(path)


class _Out:
    """OutputStream wrapper reporting write/flush/sync/close to its RecordingFileIO."""

    def __init__(self, owner: RecordingFileIO, inner):
        self.owner, self.inner, self.path = owner, inner, inner.path

    def write(self, data, *, borrow=False):
        self.owner._note("write", self.path)
        return self.inner.write(data, borrow=borrow)

    def flush(self):
        self.owner._note("flush", self.path)
        return self.inner.flush()

    def sync(self):
        self.owner._note("sync", self.path)
        return self.inner.sync()

    def close(self):
        self.owner._note("close", self.path)
        return self.inner.close()

    def verify_lease(self):
        self.owner._note("verify_lease", self.path)
        return self.inner.verify_lease()

    def tell(self):
        return self.inner.tell()

    @property
    def closed(self):
        return self.inner.closed


#: A typed topic's schema with ``not null`` fields (sym, qty, tags[], p.a), nested too.
NOT_NULL_SCHEMA = pa.schema([
    pa.field("sym", pa.string(), False),
    pa.field("px", pa.float64()),
    pa.field("qty", pa.int64(), False),
    pa.field("tags", pa.list_(pa.field("item", pa.string(), False))),
    pa.field("p", pa.struct([pa.field("a", pa.int32(), False), pa.field("b", pa.string())])),
])
