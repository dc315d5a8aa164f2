"""HadoopFileIO: ``hdfs://`` through pyarrow's HadoopFileSystem plus direct libhdfs calls.

How each rule of the storage contract is met (details and references: docs/storage.md):

* **Reads, listing, mkdirs, delete** use ``pyarrow.fs.HadoopFileSystem`` (``open_input_file``
  gives a zero-copy ``RandomAccessFile``). ``size()`` of a file still being written adds
  the hflushed part of its last block (``DFSInputStream.available()``) to the NameNode's
  length, which counts completed blocks only.
* **Writes** go through :mod:`sparklog.storage.libhdfs`: ``flush()`` = ``hdfsWrite`` +
  ``hdfsHFlush`` (hflush), ``sync()`` = ``hdfsHSync`` (hsync). pyarrow's own output stream
  ``flush()`` is ``hdfsFlush`` = Java ``OutputStream.flush()``, which guarantees nothing.
* **Single writer** is HDFS's own lease: a second ``create``/``append`` of a file that is
  open for writing gets AlreadyBeingCreatedException from the NameNode -> LeaseHeldError.
* **create-no-overwrite**: libhdfs always creates with ``overwrite=true``, so the file is
  created under a unique temporary name in the same directory and then renamed onto the
  target with ``hdfsRename`` (``FileSystem.rename``), which the NameNode refuses
  atomically when the target exists; the open stream follows the rename (HDFS tracks
  open files by inode id, Hadoop >= 2.5). The loser deletes its temporary file.
* **rename-no-replace**: ``hdfsRename`` (never pyarrow's ``move``, which deletes an
  existing target file first).
* **Lease recovery**: ``hdfs debug recoverLease -path`` (Hadoop CLI) when available, which
  revokes a live writer's lease; without the CLI, ``recover_lease`` waits for HDFS's soft
  limit (60 s) by retrying ``append`` - enough for a dead writer, not for a live one.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from urllib.parse import urlsplit

from sparklog.errors import (
    FileAlreadyExistsError,
    InvalidArgumentError,
    LeaseExpiredError,
    LeaseHeldError,
    StorageError,
    StorageFileNotFoundError,
)
from sparklog.storage.base import FileInfo, FileIO
from sparklog.names import validate_user
from sparklog.storage.paths import check_int, check_normal, check_path, strip_scheme
from sparklog.storage.stream import BufferedOutputStream, LeaseLost

CREATING_SUFFIX = ".sparklog-creating"
DEFAULT_BUFFER_SIZE = 1 << 20


class HadoopOutputStream(BufferedOutputStream):
    """A libhdfs output stream under the NameNode's lease; flush = hflush, sync = hsync."""

    def __init__(self, conn, path: str, hpath: str, handle, length: int, buffer_size: int):
        super().__init__(path, length, buffer_size)
        self._conn = conn
        self._hpath = hpath
        self._handle = handle

    def _push(self, data: memoryview) -> None:
        try:
            self._conn.write_all(self._handle, data, self.path)
            self._conn.hflush(self._handle, self.path)
        except LeaseExpiredError:
            raise LeaseLost() from None

    def _persist(self) -> None:
        try:
            self._conn.hsync(self._handle, self.path)
        except LeaseExpiredError:
            raise LeaseLost() from None

    def _release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            self._conn.close_file(handle, self.path)

    def _abandon(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                self._conn.close_file(handle, self.path)
            except StorageError:
                pass


def _pa_error(op: str, path: str, exc: Exception) -> StorageError:
    if isinstance(exc, FileNotFoundError):
        return StorageFileNotFoundError(f"{path}: {op}: does not exist")
    return StorageError(f"{path}: {op} failed: {exc}")


class HadoopFileIO(FileIO):
    """``hdfs://namenode[:port]/...`` under the storage contract (see module docstring).

    Options: ``user``, ``kerb_ticket`` (Kerberos ticket cache path), ``replication``,
    ``block_size``, ``extra_conf`` (dict of Hadoop settings), ``buffer_size`` (bytes a
    writer buffers before pushing), ``recover_lease_timeout`` (seconds).
    """

    scheme = "hdfs"

    def __init__(self, url: str, *, user: str | None = None, kerb_ticket: str | None = None,
                 replication: int = 0, block_size: int = 0, extra_conf: dict | None = None,
                 buffer_size: int = DEFAULT_BUFFER_SIZE, recover_lease_timeout: float = 90.0):
        self.root = check_path(url, "url")
        parts = urlsplit(self.root)
        if parts.scheme != "hdfs" or not parts.hostname:
            raise InvalidArgumentError(f"expected hdfs://namenode[:port]/path, got {url!r}")
        self.authority = parts.netloc
        self._host, self._port = parts.hostname, parts.port or 0
        self._user, self._kerb = (None if user is None else validate_user(user)), kerb_ticket
        self._replication = check_int(replication, "replication")
        self._block_size = check_int(block_size, "block_size")
        self._extra = dict(extra_conf or {})
        self.buffer_size = check_int(buffer_size, "buffer_size", 1)
        self.recover_lease_timeout = float(recover_lease_timeout)
        self._pa_fs = None
        self._conn = None

    # connections (lazy: open_fileio never touches the network) -------------------------
    @property
    def _pa(self):
        if self._pa_fs is None:
            from pyarrow import fs as pafs

            from sparklog.storage.libhdfs import load

            load()  # names the missing piece (JVM, libhdfs.so, CLASSPATH) if any

            try:
                self._pa_fs = pafs.HadoopFileSystem(
                    f"hdfs://{self._host}", self._port, user=self._user,
                    kerb_ticket=self._kerb, extra_conf=self._extra or None)
            except (OSError, RuntimeError) as e:
                raise StorageError(
                    f"hdfs://{self.authority}: cannot start pyarrow's HadoopFileSystem "
                    f"(needs JAVA_HOME, libhdfs.so via HADOOP_HOME or ARROW_LIBHDFS_DIR, and "
                    f"the Hadoop jars on CLASSPATH): {e}") from e
        return self._pa_fs

    @property
    def _c(self):
        if self._conn is None:
            from sparklog.storage.libhdfs import Connection

            self._conn = Connection(f"hdfs://{self.authority}", 0, self._user, self._kerb,
                                    self._extra)
        return self._conn

    def _p(self, path) -> tuple[str, str]:
        """(path as given, absolute HDFS path without scheme)."""
        path = check_path(path)
        authority, p = strip_scheme(path, "hdfs")
        if authority and authority != self.authority:
            raise InvalidArgumentError(
                f"{path!r} names namenode {authority!r}, this FileIO is {self.authority!r}")
        if not p.startswith("/"):
            raise InvalidArgumentError(f"HDFS path must be absolute: {path!r}")
        return path, check_normal(p, path).rstrip("/") or "/"

    def _info(self, p: str):
        from pyarrow import fs as pafs

        info = self._pa.get_file_info(p)
        return None if info.type == pafs.FileType.NotFound else info

    # writing ----------------------------------------------------------------------------
    def create(self, path: str, overwrite: bool = False) -> HadoopOutputStream:
        """Create under the NameNode's lease; no-overwrite via create-temp + rename."""
        path, p = self._p(path)
        if not isinstance(overwrite, bool):
            raise InvalidArgumentError(f"overwrite must be a bool, got {overwrite!r}")
        parent, name = p.rsplit("/", 1)
        parent = parent or "/"
        self._mkdirs(parent, path)
        if overwrite:
            h = self._c.open_write(p, False, self._replication, self._block_size)
            return HadoopOutputStream(self._c, path, p, h, 0, self.buffer_size)
        if self._info(p) is not None:
            raise FileAlreadyExistsError(f"{path}: file already exists")
        tmp = f"{parent.rstrip('/')}/.{name}.{uuid.uuid4().hex}{CREATING_SUFFIX}"
        h = self._c.open_write(tmp, False, self._replication, self._block_size)
        if not self._c.rename(tmp, p):
            try:
                self._c.close_file(h, tmp)
            finally:
                self._pa.delete_file(tmp)
            if self._info(p) is not None:
                raise FileAlreadyExistsError(f"{path}: file already exists")
            raise self._c.fail("create (rename into place)", path)
        return HadoopOutputStream(self._c, path, p, h, 0, self.buffer_size)

    def append(self, path: str) -> HadoopOutputStream:
        """FileSystem.append under a new lease (LeaseHeldError while another holds it)."""
        path, p = self._p(path)
        info = self._info(p)
        if info is None:
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        if info.type.name == "Directory":
            raise StorageError(f"{path}: is a directory, cannot append")
        h = self._c.open_write(p, True)
        return HadoopOutputStream(self._c, path, p, h, self._c.visible_length(p, info.size),
                                  self.buffer_size)

    def recover_lease(self, path: str) -> None:
        """End any writer's lease: ``hdfs debug recoverLease`` when the Hadoop CLI is
        present (fences a live writer), else wait out the soft limit by retrying append."""
        from sparklog.storage.libhdfs import hadoop_command

        path, p = self._p(path)
        if self._info(p) is None:
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        cli = hadoop_command("hdfs")
        if cli is not None:
            url = f"hdfs://{self.authority}{p}"
            r = subprocess.run([cli, "debug", "recoverLease", "-path", url, "-retries", "10"],
                               capture_output=True, text=True,
                               timeout=self.recover_lease_timeout, check=False)
            if "recoverLease SUCCEEDED" in r.stdout + r.stderr:
                return
            raise LeaseHeldError(f"{path}: recoverLease did not succeed: "
                                 f"{(r.stdout + r.stderr).strip()[-500:]}")
        deadline = time.monotonic() + self.recover_lease_timeout
        while True:
            try:
                h = self._c.open_write(p, True)
                self._c.close_file(h, path)
                return
            except LeaseHeldError as e:
                if time.monotonic() > deadline:
                    raise LeaseHeldError(
                        f"{path}: lease still held after {self.recover_lease_timeout:.0f}s "
                        "(no `hdfs` CLI to force recoverLease; a live writer keeps renewing "
                        f"its lease): {e}") from None
                time.sleep(1.0)

    # reading ------------------------------------------------------------------------------
    def open_input(self, path: str):
        """pyarrow RandomAccessFile (read/seek/tell/size/close) of ``path``."""
        path, p = self._p(path)
        try:
            return self._pa.open_input_file(p)
        except OSError as e:
            if self._info(p) is None:
                raise StorageFileNotFoundError(f"{path}: file does not exist") from None
            raise _pa_error("open", path, e) from e

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """pread ``length`` bytes at ``offset`` (short or empty past the end)."""
        check_int(offset, "offset")
        check_int(length, "length")
        with self.open_input(path) as f:
            if length == 0:
                return b""
            return f.read_at(length, offset).to_pybytes()

    # namespace ----------------------------------------------------------------------------
    def set_replication(self, path: str, replication: int) -> bool:
        """hdfsSetReplication (dfs.replication of one file)."""
        _, p = self._p(path)
        self._c.set_replication(p, check_int(replication, "replication"))
        return True

    def rename(self, src: str, dst: str) -> None:
        """hdfsRename: atomic on the NameNode, refused when ``dst`` exists."""
        src, sp = self._p(src)
        dst, dp = self._p(dst)
        if self._info(sp) is None:
            raise StorageFileNotFoundError(f"rename source {src}: does not exist")
        if self._info(dp) is not None:  # also keeps rename-into-directory semantics out
            raise FileAlreadyExistsError(f"rename {src} -> {dst}: destination already exists")
        if self._info(dp.rsplit("/", 1)[0] or "/") is None:
            raise StorageFileNotFoundError(
                f"rename destination {dst}: parent directory does not exist")
        if not self._c.rename(sp, dp):
            if self._info(dp) is not None:
                raise FileAlreadyExistsError(
                    f"rename {src} -> {dst}: destination already exists")
            if self._info(sp) is None:
                raise StorageFileNotFoundError(f"rename source {src}: does not exist")
            raise self._c.fail("rename", f"{src} -> {dst}")

    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete a file or (``recursive``) a tree; False if absent."""
        path, p = self._p(path)
        info = self._info(p)
        if info is None:
            return False
        try:
            if info.type.name == "Directory":
                if not recursive and self.list(path):
                    raise StorageError(f"{path}: directory not empty (use recursive=True)")
                self._pa.delete_dir(p)
            else:
                self._pa.delete_file(p)
        except OSError as e:
            if self._info(p) is None:
                return False
            raise _pa_error("delete", path, e) from e
        return True

    def exists(self, path: str) -> bool:
        """True if ``path`` exists."""
        return self._info(self._p(path)[1]) is not None

    def size(self, path: str) -> int:
        """Visible length, including hflushed bytes of a file still being written."""
        path, p = self._p(path)
        info = self._info(p)
        if info is None:
            raise StorageFileNotFoundError(f"{path}: does not exist")
        if info.type.name == "Directory":
            return 0
        return self._c.visible_length(p, info.size)

    def list(self, path: str) -> list[FileInfo]:
        """Sorted entries ([] if absent); temporary create names are hidden."""
        from pyarrow import fs as pafs

        path, p = self._p(path)
        try:
            infos = self._pa.get_file_info(pafs.FileSelector(p, allow_not_found=True))
        except OSError as e:
            if self._info(p) is not None and self._info(p).type.name == "File":
                raise StorageError(f"{path}: is a file, not a directory") from None
            raise _pa_error("list", path, e) from e
        out = []
        for i in infos:
            if i.base_name.endswith(CREATING_SUFFIX):
                continue
            is_dir = i.type == pafs.FileType.Directory
            out.append(FileInfo(path=self.entry_path(path, i.base_name), name=i.base_name,
                                size=0 if is_dir else (i.size or 0), is_dir=is_dir,
                                mtime=i.mtime.timestamp() if i.mtime else 0.0))
        out.sort(key=lambda f: f.name)
        return out

    def mkdirs(self, path: str) -> None:
        """Create the directory and its parents."""
        path, p = self._p(path)
        self._mkdirs(p, path)

    def _mkdirs(self, p: str, display: str) -> None:
        info = self._info(p)
        if info is not None:
            if info.type.name != "Directory":
                raise FileAlreadyExistsError(f"{display}: a file is in the way of {p}")
            return
        try:
            self._pa.create_dir(p, recursive=True)
        except OSError as e:
            raise _pa_error("mkdirs", display, e) from e

    def close(self) -> None:
        """Disconnect the libhdfs handle."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._pa_fs = None

    def __repr__(self):
        return f"HadoopFileIO({self.root!r})"
