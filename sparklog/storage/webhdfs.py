"""WebHdfsFileIO: ``webhdfs://`` (REST) through the ``hdfs`` package's InsecureClient.

WebHDFS has no open stream: every CREATE and APPEND is a complete open-write-close that
a DataNode performs on the client's behalf. How each rule of the contract is met:

* **flush** = one ``op=APPEND`` of the buffered bytes; the DataNode writes them and
  *closes* the file, so they are visible to every new reader when the call returns.
  **sync** = the same call: closing finalises the block on every DataNode of the
  pipeline (on disk, not fsync'ed, unless the cluster sets dfs.datanode.synconclose).
* **create-no-overwrite** = ``op=CREATE&overwrite=false``: the NameNode refuses atomically
  (FileAlreadyExistsException) when the file exists. A non-recursive create
  (``parents=False``) is refused (:data:`NO_NON_RECURSIVE_CREATE` says why).
* **rename-no-replace** = ``op=RENAME``: returns ``{"boolean": false}`` when the target
  exists (-> FileAlreadyExistsError); the target is checked first so that HDFS's
  "rename into an existing directory" semantics never apply.
* **Single writer.** HDFS's lease lasts one REST call only, so sparklog keeps its own
  lease: a sidecar ``.<name>.sparklog-lease`` created with ``overwrite=false`` (atomic),
  renewed with ``op=SETTIMES`` while the writer flushes, and expired after
  ``lease_soft_limit`` seconds without renewal (HDFS's soft limit is 60 s). The writer
  checks, before every APPEND, that the sidecar is still the one it created (HDFS inode
  ids, ``fileId``, are never reused). ``recover_lease`` deletes the sidecar. This lease is
  advisory: an APPEND already in flight when the lease is revoked still lands, so the
  layer above must also fence by leader epoch (DESIGN.md section 4).
"""

from __future__ import annotations

import json
import os
import socket
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
from sparklog.names import validate_user
from sparklog.storage.base import FileInfo, FileIO, check_create_flags
from sparklog.storage.paths import (
    check_int,
    check_normal,
    check_path,
    is_lease_file,
    lease_name,
    strip_scheme,
)
from sparklog.storage.stream import BufferedOutputStream, LeaseLost

DEFAULT_BUFFER_SIZE = 4 << 20
#: Why ``create(parents=False)`` is refused here. WebHDFS's CREATE takes
#: ``createparent=false`` (Hadoop 2.8+), but the ``hdfs`` package's ``Client.write``
#: has no parameter for it, and sparklog's lease sidecar is written by that call before
#: the data file: both would bring a renamed-away directory back. The non-recursive
#: create serves the write-ahead-log layout, which webhdfs:// roots do not use.
NO_NON_RECURSIVE_CREATE = (
    "a non-recursive create is not supported on webhdfs:// (the hdfs package's client "
    "cannot send WebHDFS's createparent=false, and the lease sidecar would recreate the "
    "directory); use an hdfs:// URL, whose create(parents=False) is Hadoop's "
    "createNonRecursive")
_LEASE_HELD = ("AlreadyBeingCreatedException", "RecoveryInProgressException")


class WebHdfsOutputStream(BufferedOutputStream):
    """Buffered writer; flush/sync = one APPEND request after a lease check."""

    def __init__(self, fileio: "WebHdfsFileIO", path: str, hpath: str, lease_id: int,
                 length: int, buffer_size: int):
        super().__init__(path, length, buffer_size, fileio.on_sync)
        self._fs = fileio
        self._hpath = hpath
        self._lease_path = fileio._lease_path(hpath)
        self._lease_id = lease_id
        self._renewed = time.time()

    def _check_lease(self) -> None:
        st = self._fs._status(self._lease_path, self.path)
        if st is None or st.get("fileId") != self._lease_id:
            raise LeaseLost()
        now = time.time()
        if now - self._renewed > self._fs.lease_soft_limit / 3:
            self._fs._call("renew lease", self.path, self._fs.client.set_times,
                           self._lease_path, modification_time=int(now * 1000))
            self._renewed = now

    def _verify_lease(self) -> None:
        self._check_lease()

    def _push(self, data: memoryview) -> None:
        self._check_lease()
        self._fs._call("append", self.path, self._fs.client.write, self._hpath,
                       data=bytes(data), append=True)

    def _persist(self) -> None:
        self._check_lease()  # every APPEND already closed (finalised) the block

    def _release(self) -> None:
        st = self._fs._status(self._lease_path, self.path)
        if st is not None and st.get("fileId") == self._lease_id:
            self._fs._call("release lease", self.path, self._fs.client.delete,
                           self._lease_path)


class WebHdfsInputStream:
    """Random-access reader over ranged ``op=OPEN`` requests."""

    def __init__(self, fileio: "WebHdfsFileIO", path: str):
        self._fs, self.path, self._pos, self.closed = fileio, path, 0, False

    def read(self, n: int = -1) -> bytes:
        """Read up to ``n`` bytes from the position (all remaining if negative)."""
        if n is None or n < 0:
            n = max(0, self.size() - self._pos)
        data = self._fs.read_range(self.path, self._pos, n)
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move the position (os.SEEK_SET/CUR/END)."""
        base = {0: 0, 1: self._pos, 2: self.size() if whence == 2 else 0}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        """Current position."""
        return self._pos

    def size(self) -> int:
        """Current length of the file."""
        return self._fs.size(self.path)

    def close(self) -> None:
        """Nothing to release (stateless HTTP)."""
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class WebHdfsFileIO(FileIO):
    """``webhdfs://namenode:port/...`` (``swebhdfs://`` for HTTPS) under the contract.

    Options: ``user`` (simple auth), ``kerberos=True`` (needs ``hdfs[kerberos]``),
    ``timeout`` (seconds per request), ``buffer_size``, ``lease_soft_limit`` (seconds).
    """

    scheme = "webhdfs"
    #: create(parents=False) is refused (NO_NON_RECURSIVE_CREATE): a partition's writer
    #: here creates its files recursively, so a stale writer (a topic deleted under it)
    #: can re-create its renamed-away directory; use hdfs:// for the guarantee
    non_recursive_create = False

    def __init__(self, url: str, *, user: str | None = None, kerberos: bool = False,
                 timeout: float = 30.0, buffer_size: int = DEFAULT_BUFFER_SIZE,
                 lease_soft_limit: float = 60.0):
        self.root = check_path(url, "url")
        parts = urlsplit(self.root)
        if parts.scheme not in ("webhdfs", "swebhdfs") or not parts.hostname:
            raise InvalidArgumentError(f"expected webhdfs://namenode:port/path, got {url!r}")
        self.scheme = parts.scheme
        self.authority = parts.netloc
        if user is not None:
            validate_user(user)
        self.buffer_size = check_int(buffer_size, "buffer_size", 1)
        self.lease_soft_limit = float(lease_soft_limit)
        http = ("https" if parts.scheme == "swebhdfs" else "http") + "://" + parts.netloc
        if kerberos:
            try:
                from hdfs.ext.kerberos import KerberosClient
            except ImportError as e:
                raise StorageError(
                    f"{url}: kerberos=True needs the hdfs[kerberos] extra "
                    f"(requests-kerberos): {e}") from e
            self.client = KerberosClient(http, timeout=timeout)
        else:
            from hdfs import InsecureClient

            self.client = InsecureClient(http, user=user, timeout=timeout)

    # helpers --------------------------------------------------------------------------
    def _p(self, path) -> tuple[str, str]:
        path = check_path(path)
        authority, p = strip_scheme(path, self.scheme)
        if authority and authority != self.authority:
            raise InvalidArgumentError(
                f"{path!r} names namenode {authority!r}, this FileIO is {self.authority!r}")
        if not p.startswith("/"):
            raise InvalidArgumentError(f"HDFS path must be absolute: {path!r}")
        return path, check_normal(p, path).rstrip("/") or "/"

    @staticmethod
    def _lease_path(hpath: str) -> str:
        parent, name = hpath.rsplit("/", 1)
        return f"{parent}/{lease_name(name)}"

    def _call(self, op: str, display: str, fn, *args, **kwargs):
        """Run one client call, mapping HdfsError / connection errors to StorageErrors."""
        import requests
        from hdfs.util import HdfsError

        try:
            return fn(*args, **kwargs)
        except HdfsError as e:
            exc, msg = e.exception or "", f"{display}: {op} failed: {e.message}"
            if exc == "FileAlreadyExistsException":
                raise FileAlreadyExistsError(msg) from None
            if exc == "FileNotFoundException":
                raise StorageFileNotFoundError(msg) from None
            if exc in _LEASE_HELD:
                raise LeaseHeldError(msg) from None
            if exc == "LeaseExpiredException":
                raise LeaseExpiredError(msg) from None
            raise StorageError(msg) from None
        except requests.exceptions.RequestException as e:
            raise StorageError(
                f"{display}: {op} failed: WebHDFS at {self.authority} unreachable: {e}") from None

    def _status(self, hpath: str, display: str) -> dict | None:
        """GETFILESTATUS; None when the path does not exist (other refusals, such as
        permission denied, raise)."""
        try:
            return self._call("status", display, self.client.status, hpath)
        except StorageFileNotFoundError:
            return None

    def _acquire_lease(self, hpath: str, display: str) -> int:
        lpath = self._lease_path(hpath)
        record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                             "token": uuid.uuid4().hex, "epoch": time.time_ns()}).encode()
        for attempt in (0, 1):
            try:
                self._call("take lease", display, self.client.write, lpath, data=record,
                           overwrite=False)
                return self._status(lpath, display)["fileId"]
            except FileAlreadyExistsError:
                st = self._status(lpath, display)
                if st is None:
                    continue  # released meanwhile: retry
                age = time.time() - st["modificationTime"] / 1000.0
                if age <= self.lease_soft_limit or attempt:
                    raise LeaseHeldError(
                        f"{display}: lease held by another writer (renewed {age:.0f}s ago, "
                        f"soft limit {self.lease_soft_limit:.0f}s); call recover_lease() "
                        "to take it over") from None
                self._call("expire lease", display, self.client.delete, lpath)
        raise LeaseHeldError(f"{display}: could not take the lease")

    # writing ----------------------------------------------------------------------------
    def create(self, path: str, overwrite: bool = False,
               parents: bool = True) -> WebHdfsOutputStream:
        """Take the lease, then CREATE (overwrite=false is atomic on the NameNode).

        ``parents=False`` (a non-recursive create) is refused with InvalidArgumentError:
        see :data:`NO_NON_RECURSIVE_CREATE`."""
        path, p = self._p(path)
        check_create_flags(overwrite, parents)
        if not parents:
            raise InvalidArgumentError(f"{path}: create(parents=False): "
                                       + NO_NON_RECURSIVE_CREATE)
        if not overwrite and self._status(p, path) is not None:
            raise FileAlreadyExistsError(f"{path}: file already exists")
        self.mkdirs(p.rsplit("/", 1)[0] or "/")
        lease_id = self._acquire_lease(p, path)
        try:
            self._call("create", path, self.client.write, p, data=b"", overwrite=overwrite)
        except BaseException:
            self._call("release lease", path, self.client.delete, self._lease_path(p))
            raise
        return WebHdfsOutputStream(self, path, p, lease_id, 0, self.buffer_size)

    def append(self, path: str) -> WebHdfsOutputStream:
        """Take the lease of an existing file and append to it."""
        path, p = self._p(path)
        st = self._status(p, path)
        if st is None:
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        if st["type"] != "FILE":
            raise StorageError(f"{path}: is a directory, cannot append")
        lease_id = self._acquire_lease(p, path)
        length = self._status(p, path)["length"]
        return WebHdfsOutputStream(self, path, p, lease_id, length, self.buffer_size)

    def recover_lease(self, path: str) -> None:
        """Delete the lease sidecar: the writer's next flush raises LeaseExpiredError."""
        path, p = self._p(path)
        if self._status(p, path) is None:
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        self._call("recover lease", path, self.client.delete, self._lease_path(p))

    # reading ------------------------------------------------------------------------------
    def open_input(self, path: str) -> WebHdfsInputStream:
        """A reader issuing ranged OPEN requests."""
        path, p = self._p(path)
        st = self._status(p, path)
        if st is None:
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        if st["type"] != "FILE":
            raise StorageError(f"{path}: is a directory, cannot read")
        return WebHdfsInputStream(self, path)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``op=OPEN&offset=&length=`` (short or empty past the end)."""
        check_int(offset, "offset")
        check_int(length, "length")
        path, p = self._p(path)
        st = self._status(p, path)
        if st is None:
            raise StorageFileNotFoundError(f"{path}: file does not exist")
        length = min(length, max(0, st["length"] - offset))
        if length == 0:
            return b""

        def _read():
            with self.client.read(p, offset=offset, length=length) as r:
                return r.read()

        return self._call("read", path, _read)

    # namespace ----------------------------------------------------------------------------
    def set_replication(self, path: str, replication: int) -> bool:
        """op=SETREPLICATION (dfs.replication of one file)."""
        path, hp = self._p(path)
        self._call("setreplication", path, self.client.set_replication, hp, int(replication))
        return True

    def rename(self, src: str, dst: str) -> None:
        """op=RENAME; FileAlreadyExistsError when ``dst`` exists."""
        src, sp = self._p(src)
        dst, dp = self._p(dst)
        if self._status(sp, src) is None:
            raise StorageFileNotFoundError(f"rename source {src}: does not exist")
        if self._status(dp, dst) is not None:
            raise FileAlreadyExistsError(f"rename {src} -> {dst}: destination already exists")
        if self._status(dp.rsplit("/", 1)[0] or "/", dst) is None:
            raise StorageFileNotFoundError(
                f"rename destination {dst}: parent directory does not exist")
        lease = self._status(self._lease_path(sp), src)
        if lease is not None and time.time() - lease["modificationTime"] / 1000.0 \
                <= self.lease_soft_limit:
            raise LeaseHeldError(f"rename source {src}: a writer still holds its lease")
        try:
            self._call("rename", f"{src} -> {dst}", self.client.rename, sp, dp)
        except StorageError:
            if self._status(dp, dst) is not None:
                raise FileAlreadyExistsError(
                    f"rename {src} -> {dst}: destination already exists") from None
            if self._status(sp, src) is None:
                raise StorageFileNotFoundError(f"rename source {src}: does not exist") from None
            raise
        if lease is not None:
            self._call("drop expired lease", src, self.client.delete, self._lease_path(sp))

    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete a file (its writer is fenced) or, if ``recursive``, a tree."""
        path, p = self._p(path)
        st = self._status(p, path)
        if st is None:
            return False
        if st["type"] == "DIRECTORY" and not recursive and self.list(path):
            raise StorageError(f"{path}: directory not empty (use recursive=True)")
        done = self._call("delete", path, self.client.delete, p, recursive=recursive)
        if st["type"] == "FILE":
            self._call("delete lease", path, self.client.delete, self._lease_path(p))
        return bool(done)

    def exists(self, path: str) -> bool:
        """True if ``path`` exists."""
        path, p = self._p(path)
        return self._status(p, path) is not None

    def size(self, path: str) -> int:
        """Length of the file (every APPEND completed the file, so this is exact)."""
        path, p = self._p(path)
        st = self._status(p, path)
        if st is None:
            raise StorageFileNotFoundError(f"{path}: does not exist")
        return 0 if st["type"] == "DIRECTORY" else st["length"]

    def list(self, path: str) -> list[FileInfo]:
        """Sorted entries, lease sidecars hidden; [] if absent."""
        path, p = self._p(path)
        st = self._status(p, path)
        if st is None:
            return []
        if st["type"] == "FILE":
            raise StorageError(f"{path}: is a file, not a directory")
        entries = self._call("list", path, self.client.list, p, status=True)
        out = [FileInfo(path=self.entry_path(path, name), name=name,
                        size=s["length"] if s["type"] == "FILE" else 0,
                        is_dir=s["type"] == "DIRECTORY",
                        mtime=s["modificationTime"] / 1000.0)
               for name, s in entries if not is_lease_file(name)]
        out.sort(key=lambda f: f.name)
        return out

    def set_permission(self, path: str, mode: int | None = None, owner: str | None = None,
                       group: str | None = None) -> bool:
        """op=SETOWNER and op=SETPERMISSION."""
        path, hp = self._p(path)
        if owner or group:
            self._call("setowner", path, self.client.set_owner, hp, owner=owner or None,
                       group=group or None)
        if mode is not None:
            self._call("setpermission", path, self.client.set_permission, hp,
                       format(int(mode) & 0o7777, "o"))
        return True

    def permission(self, path: str) -> tuple[int, str, str]:
        """(permission bits, owner, group) from op=GETFILESTATUS."""
        path, hp = self._p(path)
        st = self._status(hp, path)
        if st is None:
            raise StorageFileNotFoundError(f"{path}: does not exist")
        return int(st["permission"], 8), str(st["owner"]), str(st["group"])

    def mkdirs(self, path: str) -> None:
        """op=MKDIRS (parents included)."""
        path, p = self._p(path)
        st = self._status(p, path)
        if st is not None:
            if st["type"] != "DIRECTORY":
                raise FileAlreadyExistsError(f"{path}: a file is in the way")
            return
        self._call("mkdirs", path, self.client.makedirs, p)  # a file in the way: 403

    def __repr__(self):
        return f"WebHdfsFileIO({self.root!r})"
