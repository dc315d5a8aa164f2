"""A minimal ctypes binding of libhdfs (Hadoop's C client) for what pyarrow does not expose.

pyarrow's ``HadoopFileSystem`` loads the same ``libhdfs.so`` but binds only
``hdfsFlush`` for output streams (Java ``FSDataOutputStream.flush()``, which the Hadoop
file-system specification says gives *no* visibility guarantee), not ``hdfsHFlush`` /
``hdfsHSync``; and its ``move()`` deletes an existing destination file before renaming
(it clobbers). sparklog needs hflush, hsync and a rename that fails when the target
exists, so writes and renames go through these libhdfs calls directly:

* ``hdfsOpenFile(O_WRONLY)`` -> ``FileSystem.create(path, overwrite=true, ...)``,
  ``hdfsOpenFile(O_WRONLY|O_APPEND)`` -> ``FileSystem.append(path)``
* ``hdfsWrite`` then ``hdfsHFlush`` -> ``DFSOutputStream.hflush()`` (visible)
* ``hdfsHSync`` -> ``DFSOutputStream.hsync()`` (durable on every DataNode of the pipeline)
* ``hdfsRename`` -> ``FileSystem.rename(src, dst)``: false when ``dst`` exists

Loading needs a JVM (``JAVA_HOME``), ``libhdfs.so`` (``ARROW_LIBHDFS_DIR`` or
``HADOOP_HOME/lib/native``) and the Hadoop client jars on ``CLASSPATH`` (taken from
``hadoop classpath --glob`` when unset): the same requirements as pyarrow's.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import glob
import os
import shutil
import subprocess
import threading

from sparklog.errors import (
    FileAlreadyExistsError,
    LeaseExpiredError,
    LeaseHeldError,
    StorageError,
    StorageFileNotFoundError,
)

_c_p = ctypes.c_void_p
_LOCK = threading.Lock()
_LIB = None


def _candidates_libjvm() -> list[str]:
    homes = [os.environ.get("JAVA_HOME", ""), "/usr/lib/jvm/default-java", "/usr/lib/jvm/java"]
    out = []
    for home in filter(None, homes):
        for sub in ("lib/server", "jre/lib/amd64/server", "lib/amd64/server",
                    "jre/lib/aarch64/server", "lib/aarch64/server"):
            out.append(os.path.join(home, sub, "libjvm.so"))
    return out


def _candidates_libhdfs() -> list[str]:
    out = []
    if os.environ.get("ARROW_LIBHDFS_DIR"):
        out.append(os.path.join(os.environ["ARROW_LIBHDFS_DIR"], "libhdfs.so"))
    if os.environ.get("HADOOP_HOME"):
        out.append(os.path.join(os.environ["HADOOP_HOME"], "lib", "native", "libhdfs.so"))
    out.append("libhdfs.so")  # the dynamic loader's search path
    return out


def hadoop_command(name: str = "hadoop") -> str | None:
    """Path of a Hadoop CLI (``hadoop``/``hdfs``) from HADOOP_HOME/bin or PATH, or None."""
    home = os.environ.get("HADOOP_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    return shutil.which(name)


def _ensure_classpath() -> None:
    if "hadoop" in os.environ.get("CLASSPATH", "").lower():
        return
    cli = hadoop_command()
    if cli is None:
        raise StorageError(
            "hdfs://: CLASSPATH does not list the Hadoop client jars and no `hadoop` "
            "command was found (set HADOOP_HOME, or CLASSPATH=$(hadoop classpath --glob))")
    cp = subprocess.run([cli, "classpath", "--glob"], capture_output=True, text=True,
                        timeout=60, check=False).stdout.strip()
    os.environ["CLASSPATH"] = cp + os.pathsep + os.environ.get("CLASSPATH", "")


def _load_first(paths: list[str], what: str, hint: str, mode: int = 0):
    errors = []
    for p in paths:
        if os.sep in p and not glob.glob(p):
            errors.append(f"{p}: not found")
            continue
        try:
            return ctypes.CDLL(p, mode=mode, use_errno=True)
        except OSError as e:
            errors.append(str(e))
    raise StorageError(f"hdfs://: cannot load {what} ({hint}); tried: " + "; ".join(errors))


class LibHdfs:
    """The loaded library with typed entry points (one per process)."""

    def __init__(self):
        _load_first(_candidates_libjvm(), "libjvm.so", "set JAVA_HOME to a JDK/JRE",
                    ctypes.RTLD_GLOBAL)
        lib = _load_first(_candidates_libhdfs(), "libhdfs.so",
                          "set HADOOP_HOME (lib/native/libhdfs.so) or ARROW_LIBHDFS_DIR")
        _ensure_classpath()
        sig = {
            "hdfsNewBuilder": ([], _c_p),
            "hdfsBuilderSetNameNode": ([_c_p, ctypes.c_char_p], None),
            "hdfsBuilderSetNameNodePort": ([_c_p, ctypes.c_uint16], None),
            "hdfsBuilderSetUserName": ([_c_p, ctypes.c_char_p], None),
            "hdfsBuilderSetKerbTicketCachePath": ([_c_p, ctypes.c_char_p], None),
            "hdfsBuilderSetForceNewInstance": ([_c_p], None),
            "hdfsBuilderConfSetStr": ([_c_p, ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int),
            "hdfsBuilderConnect": ([_c_p], _c_p),
            "hdfsDisconnect": ([_c_p], ctypes.c_int),
            "hdfsOpenFile": ([_c_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                              ctypes.c_short, ctypes.c_int32], _c_p),
            "hdfsCloseFile": ([_c_p, _c_p], ctypes.c_int),
            "hdfsWrite": ([_c_p, _c_p, ctypes.c_void_p, ctypes.c_int32], ctypes.c_int32),
            "hdfsHFlush": ([_c_p, _c_p], ctypes.c_int),
            "hdfsHSync": ([_c_p, _c_p], ctypes.c_int),
            "hdfsSeek": ([_c_p, _c_p, ctypes.c_int64], ctypes.c_int),
            "hdfsAvailable": ([_c_p, _c_p], ctypes.c_int),
            "hdfsRename": ([_c_p, ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int),
            "hdfsSetReplication": ([_c_p, ctypes.c_char_p, ctypes.c_int16], ctypes.c_int),
        }
        for name, (args, res) in sig.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise StorageError(f"hdfs://: libhdfs lacks {name} (Hadoop >= 2.7 needed)") from None
            fn.argtypes, fn.restype = args, res
        self.lib = lib
        root = getattr(lib, "hdfsGetLastExceptionRootCause", None)  # Hadoop >= 3.0
        if root is not None:
            root.argtypes, root.restype = [], ctypes.c_char_p
        self._root_cause = root

    def last_error(self) -> tuple[int, str]:
        """(errno, Java root-cause text) of the last failed call on this thread."""
        err = ctypes.get_errno()
        text = ""
        if self._root_cause is not None:
            raw = self._root_cause()
            text = raw.decode("utf-8", "replace") if raw else ""
        return err, text or os.strerror(err)


def load() -> LibHdfs:
    """Load libhdfs once per process; StorageError naming what is missing otherwise."""
    global _LIB
    with _LOCK:
        if _LIB is None:
            _LIB = LibHdfs()
        return _LIB


_LEASE_HELD = ("AlreadyBeingCreatedException", "RecoveryInProgressException",
               "is already being created", "lease recovery is in progress")
_LEASE_LOST = ("LeaseExpiredException", "No lease on", "not open for writing",
               "lease mismatch", "does not have any open files")


def classify(op: str, path: str, err: int, text: str) -> StorageError:
    """Map a libhdfs failure (errno + Java root cause) to sparklog's storage errors."""
    msg = f"{path}: {op} failed: {text}"
    if any(k in text for k in _LEASE_HELD):
        return LeaseHeldError(msg)
    if any(k.lower() in text.lower() for k in _LEASE_LOST):
        return LeaseExpiredError(msg)
    if "FileAlreadyExistsException" in text or err == errno_mod.EEXIST:
        return FileAlreadyExistsError(msg)
    if "FileNotFoundException" in text or err == errno_mod.ENOENT:
        return StorageFileNotFoundError(msg)
    return StorageError(msg)


class Connection:
    """One libhdfs ``hdfsFS`` handle (its own FileSystem instance)."""

    def __init__(self, namenode: str, port: int = 0, user: str | None = None,
                 kerb_ticket: str | None = None, extra_conf: dict | None = None):
        self.h = load()
        lib = self.h.lib
        bld = lib.hdfsNewBuilder()
        lib.hdfsBuilderSetNameNode(bld, namenode.encode())
        if port:
            lib.hdfsBuilderSetNameNodePort(bld, port)
        if user:
            lib.hdfsBuilderSetUserName(bld, user.encode())
        if kerb_ticket:
            lib.hdfsBuilderSetKerbTicketCachePath(bld, kerb_ticket.encode())
        for k, v in (extra_conf or {}).items():
            lib.hdfsBuilderConfSetStr(bld, str(k).encode(), str(v).encode())
        lib.hdfsBuilderSetForceNewInstance(bld)
        self.fs = lib.hdfsBuilderConnect(bld)  # frees the builder
        if not self.fs:
            raise classify("connect", namenode, *self.h.last_error())

    def fail(self, op: str, path: str) -> StorageError:
        """The classified error of the call that just failed."""
        return classify(op, path, *self.h.last_error())

    def open_write(self, path: str, append: bool, replication: int = 0,
                   block_size: int = 0):
        """hdfsOpenFile for create (overwrite!) or append; returns the hdfsFile."""
        flags = os.O_WRONLY | (os.O_APPEND if append else 0)
        f = self.h.lib.hdfsOpenFile(self.fs, path.encode(), flags, 0, replication, block_size)
        if not f:
            raise self.fail("append" if append else "create", path)
        return f

    def write_all(self, f, data: memoryview, path: str) -> None:
        """hdfsWrite every byte of ``data``."""
        lib = self.h.lib
        if data.readonly:
            data = memoryview(bytearray(data))
        arr = (ctypes.c_char * len(data)).from_buffer(data)
        base, done = ctypes.addressof(arr), 0
        try:
            while done < len(data):
                n = min(len(data) - done, 1 << 30)
                wrote = lib.hdfsWrite(self.fs, f, ctypes.c_void_p(base + done), n)
                if wrote < 0:
                    raise self.fail("write", path)
                done += wrote
        finally:
            del arr

    def hflush(self, f, path: str) -> None:
        """DFSOutputStream.hflush(): visible to new readers."""
        if self.h.lib.hdfsHFlush(self.fs, f) != 0:
            raise self.fail("hflush", path)

    def hsync(self, f, path: str) -> None:
        """DFSOutputStream.hsync(): durable on the DataNodes."""
        if self.h.lib.hdfsHSync(self.fs, f) != 0:
            raise self.fail("hsync", path)

    def close_file(self, f, path: str) -> None:
        """hdfsCloseFile: completes the file and releases the lease."""
        if self.h.lib.hdfsCloseFile(self.fs, f) != 0:
            raise self.fail("close", path)

    def rename(self, src: str, dst: str) -> bool:
        """FileSystem.rename: True on success, False when refused (dst exists, src or
        dst parent missing)."""
        return self.h.lib.hdfsRename(self.fs, src.encode(), dst.encode()) == 0

    def set_replication(self, path: str, replication: int) -> None:
        """hdfsSetReplication of a file."""
        if self.h.lib.hdfsSetReplication(self.fs, path.encode(), replication) != 0:
            raise self.fail("setReplication", path)

    def visible_length(self, path: str, namenode_length: int) -> int:
        """Length a reader sees, including the hflushed part of a block under
        construction (the NameNode's length counts completed blocks only)."""
        lib = self.h.lib
        f = lib.hdfsOpenFile(self.fs, path.encode(), os.O_RDONLY, 0, 0, 0)
        if not f:
            raise self.fail("open", path)
        try:
            pos = namenode_length
            if pos and lib.hdfsSeek(self.fs, f, pos) != 0:
                pos = 0
            while True:  # available() is an int: step through files > 2 GiB
                avail = lib.hdfsAvailable(self.fs, f)
                if avail <= 0:
                    return pos
                pos += avail
                if lib.hdfsSeek(self.fs, f, pos) != 0:
                    return pos
        finally:
            lib.hdfsCloseFile(self.fs, f)

    def close(self) -> None:
        """Disconnect."""
        if self.fs:
            self.h.lib.hdfsDisconnect(self.fs)
            self.fs = None
