"""HadoopFileIO: ``hdfs://`` through Hadoop's own Java client (DistributedFileSystem),
in-process through JPype (:mod:`sparklog.storage.jvm`).

How each rule of the storage contract is met (docs/storage.md has the table):

* **flush** = ``FSDataOutputStream.hflush()``: every DataNode of the pipeline has acked
  the bytes; new readers see them. **sync** = ``hsync()``: the DataNodes also fsync the
  block (``sync_update_length=True`` adds ``SyncFlag.UPDATE_LENGTH``: the NameNode
  records the length too, one more NameNode RPC and edit-log sync per sync).
* **Single writer** is the NameNode's lease. Each writer has its own DFSClient (its own
  lease holder name), so a second writer - in this process or another - gets
  ``AlreadyBeingCreatedException`` -> LeaseHeldError, and a fenced writer of this
  process cannot pass the NameNode's holder checks with another writer's name.
* **create-no-overwrite** = ``FileSystem.create(path, overwrite=false)``: the NameNode
  refuses a second create atomically (FileAlreadyExistsException, also while the first
  creator still has the file open). **rename-no-replace** =
  ``DistributedFileSystem.rename(src, dst, Options.Rename.NONE)`` (the NameNode's
  rename2: refuses an existing ``dst`` atomically, never renames *into* a directory).
* **Lease recovery** = ``DistributedFileSystem.recoverLease(path)``, then polling
  ``isFileClosed`` (bounded by ``recover_lease_timeout``): the NameNode revokes the lease
  and has the DataNodes finalise the last block at a new generation stamp, so the old
  writer's later packets are refused (its flush/sync raise LeaseExpiredError).
  ``verify_lease`` = ``hsync(UPDATE_LENGTH)``: the NameNode checks the caller's lease.
  ``recover_leases`` starts the recovery of every file before it polls them all
  together: W files cost one DataNode heartbeat, not W.
* **Non-recursive create** (``create(path, parents=False)``) =
  ``FileSystem.createNonRecursive``: the NameNode refuses a missing parent directory.
* **Reads** see every hflushed byte: ``HdfsDataInputStream.getVisibleLength()`` asks a
  DataNode for the acked length of a block still being written; ``size()`` and ``list()``
  report it for open files (the NameNode's own length counts completed blocks only).

Bytes cross between Python and Java through per-thread staging buffers (a direct
``ByteBuffer`` Python writes into with one memcpy, copied in Java into a ``byte[]``):
no per-byte conversion.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from urllib.parse import urlsplit

from sparklog.errors import (
    FileAlreadyExistsError,
    InvalidArgumentError,
    LeaseHeldError,
    StorageError,
    StorageFileNotFoundError,
)
from sparklog.names import validate_user
from sparklog.storage import jvm
from sparklog.storage.base import (
    FileInfo,
    FileIO,
    check_create_flags,
    lease_paths,
    missing_files_error,
)
from sparklog.storage.paths import check_int, check_normal, check_path, strip_scheme
from sparklog.storage.stream import BufferedOutputStream, LeaseLost

DEFAULT_BUFFER_SIZE = 1 << 20
#: Bytes per copy between Python and Java memory.
STAGING_BYTES = 1 << 20
# words of the NameNode's and DataNodes' refusals of a writer whose lease is gone
_LEASE_LOST_WORDS = ("not under construction", "is not under construction",
                     "no lease on", "lease mismatch", "not open for writing",
                     "does not have any open files", "is not the lease owner")

#: Longest pause between two ``isFileClosed`` polls of a lease recovery (the first
#: after 20 ms, doubling): a recovery ends at a DataNode heartbeat (3 s stock), and a
#: pause of 1 s (HBase's) let it go unnoticed for up to that long; each poll is one
#: cheap NameNode call per file still open.
_RECOVERY_POLL_MAX = 0.2

_local = threading.local()
log = logging.getLogger(__name__)


def _says_lease_lost(exc) -> bool:
    """True if Java exception ``exc`` (or a cause) is the NameNode refusing a writer
    whose lease is gone: LeaseExpiredException, the file deleted, or its words for a
    file no longer under construction by the caller."""
    for name, msg in jvm.exception_chain(exc):
        if name in ("LeaseExpiredException", "FileNotFoundException"):
            return True
        if any(w in msg.lower() for w in _LEASE_LOST_WORDS):
            return True
    return False


def default_conf_dir() -> str | None:
    """``HADOOP_CONF_DIR``, else ``$HADOOP_HOME/etc/hadoop`` when it exists, else None."""
    conf = os.environ.get("HADOOP_CONF_DIR")
    if conf:
        return conf
    home = os.environ.get("HADOOP_HOME")
    if home and os.path.isdir(os.path.join(home, "etc", "hadoop")):
        return os.path.join(home, "etc", "hadoop")
    return None


class _Staging:
    """A direct ByteBuffer (Python-writable memory) and a byte[] of the same size."""

    def __init__(self, size: int):
        import jpype

        self.size = size
        self.pid = os.getpid()
        self.direct = jvm.jclass("java.nio.ByteBuffer").allocateDirect(size)
        self.view = memoryview(self.direct).cast("B")
        self.array = jpype.JArray(jpype.JByte)(size)


def _staging() -> _Staging:
    st = getattr(_local, "staging", None)
    if st is None or st.pid != os.getpid():
        st = _local.staging = _Staging(STAGING_BYTES)
    return st


def _write_java(jout, data: memoryview) -> None:
    """Write ``data`` to the Java OutputStream ``jout`` (one memcpy into Java memory per
    chunk, then one ``write(byte[], off, len)``)."""
    st = _staging()
    n, o = len(data), 0
    while o < n:
        k = min(st.size, n - o)
        st.view[:k] = data[o:o + k]
        st.direct.get(0, st.array, 0, k)
        jout.write(st.array, 0, k)
        o += k


def _read_java(jin, n: int) -> list:
    """Read up to ``n`` bytes from the current position of the Java InputStream ``jin``
    (fewer at end of file); a list of bytes chunks."""
    st = _staging()
    chunks = []
    while n > 0:
        k = jin.read(st.array, 0, min(st.size, n))
        if k < 0:
            break
        if k:
            st.direct.put(0, st.array, 0, k)
            chunks.append(bytes(st.view[:k]))
            n -= k
    return chunks


class HadoopOutputStream(BufferedOutputStream):
    """A DFSOutputStream under its own DFSClient's lease; flush = hflush, sync = hsync.

    Syncs pipeline (``pipelined_persist``): ``DFSOutputStream.hsync`` queues its packet
    under the stream's monitor and waits for that packet's acknowledgement outside it,
    and the DataNodes acknowledge packets in order, so an hsync started while another
    waits covers its own bytes and returns after the earlier one."""

    concurrent_persist = True
    pipelined_persist = True

    def __init__(self, fileio: "HadoopFileIO", path: str, hpath: str, client, jout,
                 length: int):
        super().__init__(path, length, fileio.buffer_size, fileio.on_sync)
        self._fileio = fileio
        self._hpath = hpath
        self._url = fileio.url(hpath)
        self._client = client      # this writer's own DistributedFileSystem
        self._jout = jout
        self._file_id = int(jout.getWrappedStream().getFileId())  # HDFS inode id
        self._deleted = False      # the file was deleted through this writer's FileIO

    def _java(self, op: str, fn, *args):
        """Call ``fn``; a lost lease raises LeaseLost, other failures StorageError."""
        import jpype

        if self._deleted:
            raise LeaseLost()
        try:
            return fn(*args)
        except jpype.JException as e:
            if _says_lease_lost(e) or self._holds_lease() is False:
                raise LeaseLost() from None
            raise jvm.storage_error(e, op, self._url) from None

    def _holds_lease(self) -> bool | None:
        """Ask the NameNode whether this writer still holds the file's lease: its
        ``fsync`` checks the caller's lease (as ``hsync(UPDATE_LENGTH)`` does) without
        the DataNodes. None when the NameNode cannot tell (unreachable)."""
        import jpype

        try:
            dfs = self._client.getClient()
            dfs.getNamenode().fsync(self._hpath, self._file_id, dfs.getClientName(),
                                    jpype.JLong(-1))
            return True
        except jpype.JException as e:
            return False if _says_lease_lost(e) else None
        except Exception:  # no client left (closed)
            return None

    def _steer(self, address) -> None:
        """Point this writer's failover proxy at the NameNode at ``address`` (the probe
        saw it become active), without a call: its next block, sync of a new block's
        location, close or lease renewal goes there rather than to the lost NameNode
        (:func:`~sparklog.storage.nnprobe.steer`). Never raises."""
        client = self._client
        if client is None:
            return
        from sparklog.storage.nnprobe import steer

        try:
            steer(client.getClient().getNamenode(), address)
        except Exception as e:  # noqa: BLE001 - the writer's own calls still fail over
            log.debug("%s: failover proxy not moved: %s", self._url, e)

    def _push(self, data: memoryview) -> None:
        self._push_parts([data])

    def _push_parts(self, parts: list) -> None:
        def push():
            for part in parts:
                _write_java(self._jout, part)
            self._jout.hflush()

        self._java("hflush", push)

    def _persist(self) -> None:
        self._java("hsync", self._jout.hsync, self._fileio._sync_flags())

    def _push_parts_for_persist(self, parts: list) -> None:
        # hsync (the _persist that follows) sends the written bytes down the pipeline
        # and has every DataNode fsync them: an hflush first would only add a round trip
        def push():
            for part in parts:
                _write_java(self._jout, part)

        self._java("write", push)

    def _verify_lease(self) -> None:
        self._java("verify lease", self._jout.hsync, self._fileio._sync_flags(True))

    def _release(self) -> None:
        try:
            self._java("close", self._jout.close)
        except LeaseLost:  # fenced after the last sync: nothing unsynced to lose
            pass
        finally:
            self._drop_client()

    def _abandon(self) -> None:
        try:
            self._jout.close()
        except Exception:  # the stream is broken anyway
            pass
        finally:
            self._drop_client()

    def _drop_client(self) -> None:
        self._fileio._writers.discard(self)
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing the fenced writer's client: nothing to save
                pass

    def _fence_deleted(self) -> None:
        self._deleted = True


class HadoopInputStream:
    """A reader of one HDFS file (HdfsDataInputStream): read/readinto/seek/tell/close,
    ``size()`` = the visible length when it was opened (hflushed bytes included)."""

    def __init__(self, url: str, jin):
        self.path = url
        self._jin = jin
        self._size = int(jin.getVisibleLength())
        self._pos = 0
        self._closed = False

    def _java(self, op: str, fn, *args):
        import jpype

        if self._closed:
            raise StorageError(f"{self.path}: reader is closed; {op} refused")
        try:
            return fn(*args)
        except jpype.JException as e:
            raise jvm.storage_error(e, op, self.path) from None

    def _read(self, n: int) -> list:
        n = min(n, self._size - self._pos)
        if n <= 0:
            return []
        if int(self._jin.getPos()) != self._pos:
            self._java("seek", self._jin.seek, self._pos)
        chunks = self._java("read", _read_java, self._jin, n)
        self._pos += sum(len(c) for c in chunks)
        return chunks

    def read(self, n: int = -1) -> bytes:
        """Read up to ``n`` bytes (all remaining if negative)."""
        if n is None or n < 0:
            n = self._size - self._pos
        return b"".join(self._read(n))

    def readinto(self, buf) -> int:
        """Read into a writable buffer; return the count."""
        view = memoryview(buf).cast("B")
        done = 0
        for chunk in self._read(len(view)):
            view[done:done + len(chunk)] = chunk
            done += len(chunk)
        return done

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move the read position (os.SEEK_SET/CUR/END)."""
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        if base + offset < 0:
            raise InvalidArgumentError(f"{self.path}: seek to a negative position")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        """Current read position."""
        return self._pos

    def size(self) -> int:
        """Visible length of the file when this reader opened it."""
        return self._size

    def readable(self) -> bool:
        """True (a reader)."""
        return True

    def seekable(self) -> bool:
        """True (random access)."""
        return True

    def writable(self) -> bool:
        """False (readers do not write)."""
        return False

    def close(self) -> None:
        """Close the reader (idempotent)."""
        if not self._closed:
            self._closed = True
            try:
                self._jin.close()
            except Exception:  # a reader has nothing to lose
                pass

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class HadoopFileIO(FileIO):
    """``hdfs://namenode[:port]/...`` or ``hdfs://nameservice/...`` under the storage
    contract, through Hadoop's Java client (see the module docstring).

    Options: ``user`` (HDFS user name; default: ``HADOOP_USER_NAME`` or the OS user, as
    for Hadoop's tools), ``kerb_ticket`` (Kerberos ticket cache path), ``principal`` and
    ``keytab`` (a Kerberized HDFS: log in as ``principal`` from its keytab, the ticket
    renewed before it expires, checked every ``renew_interval`` seconds:
    :mod:`sparklog.storage.kerberos`; not with ``user``), ``conf_dir``
    (Hadoop configuration directory; default ``HADOOP_CONF_DIR``, else
    ``$HADOOP_HOME/etc/hadoop``), ``extra_conf`` (dict of Hadoop settings, applied last),
    ``replication`` and ``block_size`` of new files (0: the cluster's defaults),
    ``buffer_size`` (bytes a writer buffers before it pushes), ``recover_lease_timeout``
    (seconds ``recover_lease`` waits for the NameNode to close the file),
    ``sync_update_length`` (``sync()`` also records the length on the NameNode),
    ``namenode_probe_interval`` (seconds; 0, the default, is off: a long-lived process,
    a broker, sets it: :mod:`sparklog.storage.nnprobe` then calls each NameNode that
    often, finds a connection to a lost NameNode host within the IPC timeout, and gives
    the clients made after a failover the active NameNode first).
    """

    scheme = "hdfs"

    def __init__(self, url: str, *, user: str | None = None, kerb_ticket: str | None = None,
                 conf_dir: str | None = None, extra_conf: dict | None = None,
                 replication: int = 0, block_size: int = 0,
                 buffer_size: int = DEFAULT_BUFFER_SIZE, recover_lease_timeout: float = 60.0,
                 sync_update_length: bool = False, principal: str | None = None,
                 keytab: str | None = None, renew_interval: float | None = None,
                 namenode_probe_interval: float = 0.0):
        self.root = check_path(url, "url")
        parts = urlsplit(self.root)
        if parts.scheme != "hdfs" or not parts.hostname:
            raise InvalidArgumentError(
                f"expected hdfs://namenode[:port]/path or hdfs://nameservice/path, got {url!r}")
        self.authority = parts.netloc
        if user is not None and not isinstance(user, str):
            raise InvalidArgumentError(f"user must be a str, got {type(user).__name__}")
        self.user = None if user is None else validate_user(user)
        self.kerb_ticket = kerb_ticket
        if principal is not None and self.user is not None:
            raise InvalidArgumentError(
                f"{url}: give either a Kerberos principal ({principal}) or a user "
                f"({self.user}), not both: with Kerberos the principal is the HDFS user")
        if principal is not None and not keytab:
            raise InvalidArgumentError(f"{url}: Kerberos principal {principal} needs its "
                                       "keytab (the keytab option)")
        if keytab and principal is None:
            raise InvalidArgumentError(f"{url}: a keytab ({keytab}) needs the principal "
                                       "to log in as (the principal option)")
        self.principal = principal
        self.keytab = keytab
        self.renew_interval = renew_interval
        self._login = None
        self.conf_dir = conf_dir if conf_dir is not None else default_conf_dir()
        self.extra_conf = dict(extra_conf or {})
        self.replication = check_int(replication, "replication")
        self.block_size = check_int(block_size, "block_size")
        self.buffer_size = check_int(buffer_size, "buffer_size", 1)
        self.recover_lease_timeout = float(recover_lease_timeout)
        self.sync_update_length = bool(sync_update_length)
        if not isinstance(namenode_probe_interval, (int, float)) \
                or isinstance(namenode_probe_interval, bool) or namenode_probe_interval < 0:
            raise InvalidArgumentError(
                f"{url}: namenode_probe_interval must be a number of seconds >= 0 (0: off), "
                f"got {namenode_probe_interval!r}")
        self.namenode_probe_interval = float(namenode_probe_interval)
        self._lock = threading.Lock()
        self._main = None
        self._main_stale = False   # the probe saw a NameNode failover: make a new one
        self._retired = None       # the namespace client before the last failover
        self._conf = None
        self._probe = None         # NameNodeProbe (namenode_probe_interval > 0)
        self._ordered: dict = {}   # active NameNode id -> Configuration naming it first
        self._closed = False
        self._writers: weakref.WeakSet = weakref.WeakSet()

    # the Java side (lazy: open_fileio never starts a JVM or touches the network) --------
    def url(self, hpath: str) -> str:
        """The full URL of absolute HDFS path ``hpath``."""
        return f"hdfs://{self.authority}{hpath}"

    def _java_call(self, op: str, display: str, fn, *args):
        import jpype

        try:
            return fn(*args)
        except jpype.JException as e:
            raise jvm.storage_error(e, op, display) from None

    def _new_client(self):
        """A new DistributedFileSystem (its own DFSClient and lease holder name); with a
        probe, its failover proxy tries the NameNode last seen active first."""
        if self._conf is None:
            conf = jvm.configuration(self.conf_dir, self.extra_conf)
            if self.kerb_ticket:
                conf.set("hadoop.security.kerberos.ticket.cache.path", self.kerb_ticket)
            if self.principal is not None:
                from sparklog.storage.kerberos import DEFAULT_RENEW_INTERVAL, keytab_login

                self._login = keytab_login(conf, self.principal, self.keytab or "",
                                           self.renew_interval or DEFAULT_RENEW_INTERVAL)
            elif str(conf.get("hadoop.security.authentication", "simple")) == "kerberos":
                # a Kerberized cluster without a keytab: the ticket cache's login (kinit)
                ugi_cls = jvm.jclass("org.apache.hadoop.security.UserGroupInformation")
                if not ugi_cls.isSecurityEnabled():
                    ugi_cls.setConfiguration(conf)
            self._conf = conf
        conf = self._client_conf()
        uri = jvm.jclass("java.net.URI")(f"hdfs://{self.authority}")
        fs_cls = jvm.jclass("org.apache.hadoop.fs.FileSystem")
        if self._login is not None:
            client = self._java_call("connect", self.root, self._login.run_as,
                                     fs_cls.newInstance, uri, conf)
        else:
            client = self._java_call("connect", self.root, fs_cls.newInstance, uri,
                                     conf, self.user)
        if not isinstance(client, jvm.jclass("org.apache.hadoop.hdfs.DistributedFileSystem")):
            client.close()
            raise StorageError(f"{self.url('/')}: fs.hdfs.impl is {client.getClass()}, "
                               "not Hadoop's DistributedFileSystem")
        return client

    @property
    def _fs(self):
        """The DistributedFileSystem of reads and namespace operations (a new one after
        the probe saw a NameNode failover: its proxy starts at the active NameNode; the
        old one finishes the calls it has in flight and is closed at the next swap)."""
        if self._main is None or self._main_stale:
            with self._lock:
                if self._main is None or self._main_stale:
                    self._main_stale = False
                    old, self._main = self._main, self._new_client()
                    if old is not None:
                        _close_quietly(self._retired)
                        self._retired = old
                    if self._probe is None and self.namenode_probe_interval > 0 \
                            and not self._closed:
                        self._start_probe()
        return self._main

    # the NameNode probe (namenode_probe_interval > 0) ------------------------------------
    def _start_probe(self) -> None:
        from sparklog.storage.nnprobe import NameNodeProbe

        try:
            self._probe = NameNodeProbe(
                self.authority, self._conf, self.namenode_probe_interval,
                run_as=self._login.run_as if self._login is not None else None,
                on_active=self._on_active, display=self.url("/")).start()
        except Exception as e:  # noqa: BLE001 - the storage works without its probe
            log.warning("%s: NameNode probe not started: %s", self.url("/"), e)

    def _client_conf(self):
        """The Configuration of a new client: with a probe that knows the active
        NameNode of an HA nameservice, a copy listing that NameNode first
        (``dfs.ha.namenodes.<ns>``, ``dfs.client.failover.random.order.<ns>=false``),
        so that the client's first call does not go to a lost NameNode's host."""
        probe = self._probe
        active = probe.active if probe is not None else None
        if active is None or len(probe.namenodes) < 2:
            return self._conf
        conf = self._ordered.get(active)
        if conf is None:
            ids = [active] + [nn for nn, _ in probe.namenodes if nn != active]
            conf = jvm.jclass("org.apache.hadoop.conf.Configuration")(self._conf)
            conf.set(f"dfs.ha.namenodes.{self.authority}", ",".join(ids))
            conf.set(f"dfs.client.failover.random.order.{self.authority}", "false")
            self._ordered[active] = conf
        return conf

    def _on_active(self, nn: str, was: str | None) -> None:
        """The probe saw NameNode ``nn`` become active, after ``was`` (probe thread).
        After a failover (``was`` not None): the namespace client is replaced on its
        next use, and each open writer's failover proxy is pointed at ``nn`` at once,
        before its next block or close needs it (no call: one to the old NameNode
        would wait on its lost host)."""
        if was is None:
            return
        with self._lock:
            if self._closed:
                return
            self._main_stale = True
            probe = self._probe
        address = dict(probe.namenodes).get(nn) if probe is not None else None
        if address is None:
            return
        writers: list = []
        for _ in range(3):  # a writer opened meanwhile changes the set: take it again
            try:
                writers = list(self._writers)
                break
            except RuntimeError:
                continue
        for w in writers:
            w._steer(address)

    def _path(self, hpath: str):
        return jvm.jclass("org.apache.hadoop.fs.Path")(hpath)

    def _sync_flags(self, update_length: bool = False):
        enum_set = jvm.jclass("java.util.EnumSet")
        flag = jvm.jclass("org.apache.hadoop.hdfs.client.HdfsDataOutputStream$SyncFlag")
        if update_length or self.sync_update_length:
            return enum_set.of(flag.UPDATE_LENGTH)
        return enum_set.noneOf(flag)

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

    # writing ----------------------------------------------------------------------------
    def _open_writer(self, op: str, path: str, hpath: str, open_fn) -> HadoopOutputStream:
        client = self._new_client()
        try:
            jout = self._java_call(op, self.url(hpath), open_fn, client)
            out = HadoopOutputStream(self, path, hpath, client, jout, int(jout.getPos()))
        except BaseException:
            client.close()
            raise
        self._writers.add(out)
        return out

    def create(self, path: str, overwrite: bool = False,
               parents: bool = True) -> HadoopOutputStream:
        """FileSystem.create under a new lease (parents created); atomic no-overwrite.

        ``parents=False``: ``FileSystem.createNonRecursive`` (as HBase creates its
        WALs): the NameNode refuses a missing parent directory in the same operation
        (StorageFileNotFoundError naming it), so a writer whose directory was renamed
        away cannot create a file in it."""
        path, p = self._p(path)
        check_create_flags(overwrite, parents)
        import jpype

        def create(client):
            hp = self._path(p)
            repl = jpype.JShort(self.replication or client.getDefaultReplication(hp))
            block = jpype.JLong(self.block_size or client.getDefaultBlockSize(hp))
            if parents:
                return client.create(hp, overwrite, 4096, repl, block)
            # the permission FileSystem.create gives a new file: the default, umasked
            perm_cls = jvm.jclass("org.apache.hadoop.fs.permission.FsPermission")
            perm = perm_cls.getFileDefault().applyUMask(perm_cls.getUMask(client.getConf()))
            return client.createNonRecursive(hp, perm, overwrite, 4096, repl, block, None)

        try:
            return self._open_writer("create", path, p, create)
        except LeaseHeldError as e:
            if overwrite:
                raise
            raise FileAlreadyExistsError(
                f"{self.url(p)}: create failed: already exists, open by another writer "
                f"({e})") from None
        except StorageFileNotFoundError:
            if parents:
                raise
            parent = p.rsplit("/", 1)[0] or "/"
            raise StorageFileNotFoundError(
                f"{self.url(p)}: create failed: parent directory {self.url(parent)} does "
                "not exist (a non-recursive create, parents=False, makes no directory)"
            ) from None

    def append(self, path: str) -> HadoopOutputStream:
        """FileSystem.append under a new lease (LeaseHeldError while another holds it).

        Right after a lease recovery the NameNode refuses to append until a DataNode
        has reported the recovered last block ("not sufficiently replicated yet"):
        that refusal is retried for up to ``recover_lease_timeout`` seconds."""
        path, p = self._p(path)
        deadline, delay = time.monotonic() + self.recover_lease_timeout, 0.05
        while True:
            try:
                return self._open_writer("append", path, p,
                                         lambda client: client.append(self._path(p)))
            except StorageError as e:
                if "not sufficiently replicated yet" not in str(e) \
                        or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def recover_lease(self, path: str) -> None:
        """DistributedFileSystem.recoverLease, then wait (bounded) until the NameNode has
        closed the file; the old writer is fenced. No-op on a closed file."""
        self.recover_leases([path])

    def recover_leases(self, paths) -> None:
        """``recover_lease`` of many files with one wait: ``recoverLease`` of each
        (the NameNode starts every block recovery at once; the primary DataNodes pick
        them up at their next heartbeat), then ``isFileClosed`` polled for all of those
        still open, each asked ``recoverLease`` again every 4 s (as HBase does: a lost
        recovery restarts), until all are closed or ``recover_lease_timeout`` passed
        (LeaseHeldError naming the files still open). Missing files: one
        StorageFileNotFoundError naming them, after the others were recovered."""
        fs = self._fs
        todo: dict[str, tuple[str, object]] = {}  # url -> (path as given, Hadoop Path)
        missing: list[str] = []
        for path in lease_paths(paths):
            path, p = self._p(path)
            url = self.url(p)
            hp = self._path(p)
            try:
                if not self._java_call("recover lease", url, fs.recoverLease, hp):
                    todo[url] = (path, hp)
            except LeaseHeldError:  # RecoveryInProgressException: wait for it below
                todo[url] = (path, hp)
            except StorageFileNotFoundError:
                missing.append(path)
        start = time.monotonic()
        deadline, again, delay = start + self.recover_lease_timeout, start + 4.0, 0.02
        while todo:
            now = time.monotonic()
            if now > deadline:
                raise LeaseHeldError(
                    f"recover lease failed: the NameNode had not closed {len(todo)} "
                    f"file(s) after {self.recover_lease_timeout:.0f}s (block recovery "
                    "still running or its DataNodes unreachable; retry later): "
                    + ", ".join(todo))
            time.sleep(delay)
            delay = min(delay * 2, _RECOVERY_POLL_MAX)
            ask_again = now >= again
            if ask_again:
                again = now + 4.0
            for url, (path, hp) in list(todo.items()):
                try:
                    if ask_again:  # restarts a recovery that was lost
                        closed = self._java_call("recover lease", url, fs.recoverLease, hp)
                    else:
                        closed = self._java_call("recover lease", url, fs.isFileClosed, hp)
                except LeaseHeldError:  # RecoveryInProgressException: still running
                    closed = False
                except StorageFileNotFoundError:  # deleted meanwhile: no lease left
                    missing.append(path)
                    closed = True
                if closed:
                    del todo[url]
        if missing:
            raise missing_files_error(missing)

    # reading ------------------------------------------------------------------------------
    def open_input(self, path: str) -> HadoopInputStream:
        """A reader seeing every byte hflushed before the open."""
        path, p = self._p(path)
        url = self.url(p)
        jin = self._java_call("open", url, self._fs.open, self._path(p))
        try:
            return HadoopInputStream(url, jin)
        except BaseException:
            jin.close()
            raise

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset`` (short or empty past the end)."""
        check_int(offset, "offset")
        check_int(length, "length")
        with self.open_input(path) as f:
            f.seek(offset)
            return f.read(length)

    # namespace ----------------------------------------------------------------------------
    def rename(self, src: str, dst: str) -> None:
        """The NameNode's rename2 with Options.Rename.NONE: atomic, refuses an existing
        ``dst`` (FileAlreadyExistsError) and a missing source or destination parent
        (StorageFileNotFoundError)."""
        import jpype

        src, sp = self._p(src)
        dst, dp = self._p(dst)
        rename_opt = jvm.jclass("org.apache.hadoop.fs.Options$Rename")
        self._java_call("rename", f"rename {self.url(sp)} -> {self.url(dp)}", self._fs.rename,
                        self._path(sp), self._path(dp),
                        jpype.JArray(rename_opt)([rename_opt.NONE]))

    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete a file (fencing this FileIO's writer of it) or, with ``recursive``, a
        tree; False if absent."""
        path, p = self._p(path)
        if not isinstance(recursive, bool):
            raise InvalidArgumentError(f"recursive must be a bool, got {recursive!r}")
        done = bool(self._java_call("delete", self.url(p), self._fs.delete, self._path(p),
                                    recursive))
        below = p.rstrip("/") + "/"
        for w in list(self._writers):
            if w._hpath == p or w._hpath.startswith(below):
                w._fence_deleted()
        return done

    def exists(self, path: str) -> bool:
        """True if ``path`` exists."""
        path, p = self._p(path)
        return bool(self._java_call("exists", self.url(p), self._fs.exists, self._path(p)))

    def size(self, path: str) -> int:
        """Visible length, including hflushed bytes of a file still being written."""
        path, p = self._p(path)
        try:
            with self.open_input(path) as f:
                return f.size()
        except StorageFileNotFoundError:
            status = self._status(p)
            if status is not None and status.isDirectory():
                return 0
            raise

    def _status(self, p: str):
        import jpype

        try:
            return self._fs.getFileStatus(self._path(p))
        except jpype.JException as e:
            err = jvm.storage_error(e, "status", self.url(p))
            if isinstance(err, StorageFileNotFoundError):
                return None
            raise err from None

    def list(self, path: str) -> list[FileInfo]:
        """Sorted entries ([] if absent); open files report their visible length."""
        import jpype

        path, p = self._p(path)
        url = self.url(p)

        def listing():
            it = self._fs.listLocatedStatus(self._path(p))
            out = []
            while it.hasNext():
                out.append(it.next())
            return out

        try:
            statuses = listing()
        except jpype.JException as e:
            err = jvm.storage_error(e, "list", url)
            if isinstance(err, StorageFileNotFoundError):
                return []
            raise err from None
        out = []
        for s in statuses:
            name, is_dir = str(s.getPath().getName()), bool(s.isDirectory())
            if not is_dir and str(s.getPath().toUri().getPath()) == p:
                raise StorageError(f"{url}: list failed: is a file, not a directory")
            size = 0 if is_dir else int(s.getLen())
            if not is_dir and _under_construction(s):
                try:
                    size = self.size(self.entry_path(path, name))
                except StorageFileNotFoundError:
                    continue  # deleted since the listing
            out.append(FileInfo(path=self.entry_path(path, name), name=name, size=size,
                                is_dir=is_dir, mtime=int(s.getModificationTime()) / 1000.0))
        out.sort(key=lambda f: f.name)
        return out

    def set_replication(self, path: str, replication: int) -> bool:
        """``FileSystem.setReplication`` of one file (the NameNode adds or removes block
        replicas in the background)."""
        path, p = self._p(path)
        self._java_call("setReplication", self.url(p), self._fs.setReplication,
                        self._path(p), check_int(replication, "replication", 1))
        return True

    def set_permission(self, path: str, mode: int | None = None, owner: str | None = None,
                       group: str | None = None) -> bool:
        """``FileSystem.setOwner`` and ``setPermission`` (AccessControlException ->
        StorageError: only the owner may change the mode and group, only the
        superuser the owner)."""
        path, p = self._p(path)
        if owner or group:
            self._java_call("setOwner", self.url(p), self._fs.setOwner, self._path(p),
                            owner or None, group or None)
        if mode is not None:
            perm = jvm.jclass("org.apache.hadoop.fs.permission.FsPermission")(
                jvm.jclass("java.lang.Short")(int(mode) & 0o7777))
            self._java_call("setPermission", self.url(p), self._fs.setPermission,
                            self._path(p), perm)
        return True

    def permission(self, path: str) -> tuple[int, str, str]:
        """(permission bits, owner, group) from ``getFileStatus``."""
        path, p = self._p(path)
        st = self._java_call("getFileStatus", self.url(p), self._fs.getFileStatus,
                             self._path(p))
        return int(st.getPermission().toShort()), str(st.getOwner()), str(st.getGroup())

    def mkdirs(self, path: str) -> None:
        """Create the directory and its parents (FileAlreadyExistsError if a file is in
        the way)."""
        path, p = self._p(path)
        self._java_call("mkdirs", self.url(p), self._fs.mkdirs, self._path(p))

    def close(self) -> None:
        """Stop the NameNode probe and close the reading client (writers keep their own
        until they close)."""
        with self._lock:
            self._closed = True
            probe, self._probe = self._probe, None
            main, self._main = self._main, None
            retired, self._retired = self._retired, None
        if probe is not None:
            probe.close()
        for client in (main, retired):
            _close_quietly(client)

    def __repr__(self):
        return f"HadoopFileIO({self.root!r})"


def _close_quietly(client) -> None:
    """Close a DistributedFileSystem (None: nothing); a failure has nothing to save."""
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing a client of a dead NameNode
            pass


def _under_construction(status) -> bool:
    """True if a listed file is open for writing (its last block may be longer than the
    NameNode knows)."""
    blocks = getattr(status, "getLocatedBlocks", None)
    if blocks is None:
        return True  # not an HDFS status: ask for the visible length
    located = blocks()
    return located is None or bool(located.isUnderConstruction())
