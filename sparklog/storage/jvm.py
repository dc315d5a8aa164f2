"""The Java VM of the ``hdfs://`` backend: Hadoop's own client, in-process through JPype.

One JVM per Python process (JPype's), started on the first ``hdfs://`` operation with
Hadoop's client jars on its class path:

* ``hadoop classpath --glob`` when a Hadoop installation is present (``$HADOOP_HOME/bin``
  or ``hadoop`` on ``PATH``): the cluster's own client, which also includes
  ``HADOOP_CLASSPATH``, as every Hadoop tool does;
* otherwise the ``hadoop-client`` artifact set (Apache Hadoop's shaded client 3.4.2 from
  Maven Central, :func:`sparklog.maven.classpath`), plus the jars ``HADOOP_CLASSPATH``
  names.

``HADOOP_CLIENT_OPTS`` adds JVM options (``-Xmx1g``, ``-Dlog4j.configuration=...``), as
for Hadoop's own client commands. The JVM runs with ``-Xrs``: it leaves SIGTERM/SIGINT
to Python, so a broker's own signal handlers keep working. Hadoop's client logs go to
stderr at the level of ``HADOOP_ROOT_LOGGER`` (default ``WARN``), one line per event (an
exception's first line, not its stack), unless ``HADOOP_CLIENT_OPTS`` names a log4j
configuration. A process that forked after the JVM started cannot use it (JVMs do not
survive fork): the child gets a StorageError saying so.

JPype links the two garbage collectors: after any of Python's collections, when the
process's malloc heap has grown past its mark, it calls Java's ``System.gc()``, a
stop-the-world full collection (10-30 ms on a busy host) taken while the collecting
Python thread holds the interpreter lock, so the whole process stops: an acks=all
broker on HDFS stopped 8-11 times in 7 s of load, each a tail of its latencies. That
link exists for Python objects that Java keeps alive (proxies, buffers lent to Java);
this backend lends none on its data path (bytes are copied into Java-owned buffers) and
holds a handful of proxies at most, and Java's own collector runs on Java's allocation,
so a JVM this module starts is started without it (:func:`_unlink_collectors`).

:func:`configuration` builds a ``Configuration`` from a configuration directory
(``HADOOP_CONF_DIR``: ``core-site.xml``, ``hdfs-site.xml``); :func:`storage_error` turns
a Java exception into the sparklog error of the storage contract.
"""

from __future__ import annotations

import os
import shlex
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

_LOCK = threading.Lock()
_STARTED_PID: int | None = None

#: Client settings applied when the site configuration leaves them at Hadoop's
#: defaults: an unreachable NameNode fails in seconds (3 connection attempts, 0.5 s
#: apart, 5 s connect timeout) instead of Hadoop's minutes, the caller retries; and
#: closing a file (or adding a block) whose previous block the DataNodes have not yet
#: reported retries after 20 ms, doubling, 12 times (about 80 s in all) instead of
#: 400 ms, doubling, 5 times: a small file's create-write-close takes about 70 ms
#: instead of 300-500 ms on the test cluster.
CLIENT_DEFAULTS = {
    "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "20",
    "dfs.client.block.write.locateFollowingBlock.retries": "12",
    "ipc.client.connect.max.retries": "2",
    "ipc.client.connect.retry.interval": "500",
    "ipc.client.connect.timeout": "5000",
    "ipc.client.connect.max.retries.on.timeouts": "2",
    "dfs.client.failover.max.attempts": "3",
    "dfs.client.failover.sleep.base.millis": "200",
    "dfs.client.failover.sleep.max.millis": "2000",
}

# Java exception simple names -> (sparklog error class, what it means)
_ERRORS = {
    "FileAlreadyExistsException": (FileAlreadyExistsError, "already exists"),
    "FileNotFoundException": (StorageFileNotFoundError, "does not exist"),
    "AlreadyBeingCreatedException": (LeaseHeldError, "another writer holds the lease"),
    "RecoveryInProgressException": (LeaseHeldError, "lease recovery in progress"),
    "LeaseExpiredException": (LeaseExpiredError, "this writer's lease was lost"),
    "ParentNotDirectoryException": (FileAlreadyExistsError, "a file is in the way"),
    "PathIsNotEmptyDirectoryException": (StorageError, "directory not empty"),
    "AccessControlException": (StorageError, "permission denied"),
    "SafeModeException": (StorageError, "the NameNode is in safe mode"),
    "StandbyException": (StorageError, "the NameNode is in standby state"),
    "DSQuotaExceededException": (StorageError, "disk space quota exceeded"),
    "NSQuotaExceededException": (StorageError, "name quota exceeded"),
    "UnknownHostException": (StorageError, "unknown NameNode host or nameservice (not in "
                                           "dfs.nameservices of the configuration and "
                                           "not a resolvable host name)"),
    "ConnectException": (StorageError, "NameNode unreachable"),
    "ConnectTimeoutException": (StorageError, "NameNode unreachable"),
    "NoRouteToHostException": (StorageError, "NameNode unreachable"),
}


def hadoop_command(name: str = "hadoop") -> str | None:
    """Path of a Hadoop command (``hadoop``, ``hdfs``) from ``$HADOOP_HOME/bin`` or
    ``PATH``, or None."""
    home = os.environ.get("HADOOP_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    return shutil.which(name)


def client_classpath() -> list[str]:
    """The jars of Hadoop's client this process uses (see the module docstring)."""
    cli = hadoop_command("hadoop")
    if cli is not None:
        try:
            out = subprocess.run([cli, "classpath", "--glob"], capture_output=True,
                                 text=True, timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise StorageError(f"hdfs://: `{cli} classpath --glob` failed: {e}") from e
        return [p for p in out.strip().split(os.pathsep) if p]
    from sparklog.maven import MavenError, classpath

    try:
        jars = classpath("hadoop-client")
    except MavenError as e:
        raise StorageError(
            "hdfs://: Hadoop's client jars are needed: install Hadoop (HADOOP_HOME or "
            f"`hadoop` on PATH) or Maven (`mvn`, to fetch them once): {e}") from e
    extra = [p for p in os.environ.get("HADOOP_CLASSPATH", "").split(os.pathsep) if p]
    return jars + extra


def _log4j_setup(opts: list[str]) -> None:
    if any(o.startswith("-Dlog4j.configuration") for o in opts):
        return
    import jpype

    try:
        configurator = jpype.JClass("org.apache.log4j.PropertyConfigurator")
    except TypeError:  # no log4j 1 API on the class path: the jars' own logging
        return
    level = (os.environ.get("HADOOP_ROOT_LOGGER") or "WARN").split(",")[0].strip() or "WARN"
    props = jpype.JClass("java.util.Properties")()
    for key, value in {
        "log4j.rootLogger": f"{level},stderr",
        "log4j.appender.stderr": "org.apache.log4j.ConsoleAppender",
        "log4j.appender.stderr.target": "System.err",
        "log4j.appender.stderr.layout": "org.apache.log4j.EnhancedPatternLayout",
        "log4j.appender.stderr.layout.ConversionPattern":
            "%d{ISO8601} %p %c{1}: %m%n%throwable{1}",
        "log4j.logger.org.apache.hadoop.util.NativeCodeLoader": "ERROR",
        # a FileSystem that fails to initialise is reported by sparklog's own error
        "log4j.logger.org.apache.hadoop.fs.FileSystem": "ERROR",
        # shutdown hooks cut short when Python exits (e.g. the KMS client cache's)
        "log4j.logger.org.apache.hadoop.util.ShutdownHookManager": "ERROR",
    }.items():
        props.setProperty(key, value)
    configurator.configure(props)


def start() -> None:
    """Start this process's JVM with Hadoop's client (idempotent, thread-safe).

    Raises StorageError naming what is missing (JPype, a JVM, the jars)."""
    global _STARTED_PID
    if _STARTED_PID == os.getpid():
        return
    with _LOCK:
        if _STARTED_PID == os.getpid():
            return
        try:
            import jpype
        except ImportError as e:
            raise StorageError(
                "hdfs:// needs JPype (pip install 'sparklog[hdfs]', which brings JPype1) "
                f"and a Java runtime: {e}") from e
        if jpype.isJVMStarted():
            if _STARTED_PID is not None:
                raise StorageError(
                    f"hdfs://: this process (pid {os.getpid()}) was forked from one whose "
                    f"JVM (pid {_STARTED_PID}) was already running; a JVM does not survive "
                    "fork: start the process with spawn (or exec) instead")
            _check_hadoop_loadable()  # someone else's JVM: it must carry Hadoop's jars
            _STARTED_PID = os.getpid()
            return
        jars = client_classpath()
        opts = ["-Xrs", "-Djava.net.preferIPv4Stack=true",
                *shlex.split(os.environ.get("HADOOP_CLIENT_OPTS", ""))]
        try:
            jpype.startJVM(*opts, classpath=jars, convertStrings=False)
        except (OSError, RuntimeError, jpype.JVMNotFoundException) as e:
            raise StorageError(f"hdfs://: cannot start a Java VM (set JAVA_HOME to a Java "
                               f"17+ runtime): {e}") from e
        _unlink_collectors()
        _log4j_setup(opts)
        _check_hadoop_loadable()
        _STARTED_PID = os.getpid()


def _unlink_collectors() -> None:
    """Take JPype's hook out of Python's collector callbacks (the module docstring
    says why): Java's ``System.gc()`` is then never called from Python's collections."""
    import gc

    import _jpype

    hook = getattr(_jpype, "_collect", None)
    if hook is not None:
        gc.callbacks[:] = [cb for cb in gc.callbacks if cb is not hook]


def _check_hadoop_loadable() -> None:
    import jpype

    try:
        jpype.JClass("org.apache.hadoop.hdfs.DistributedFileSystem")
    except TypeError as e:
        raise StorageError(
            "hdfs://: the running JVM has no Hadoop HDFS client on its class path "
            f"(org.apache.hadoop.hdfs.DistributedFileSystem): {e}") from e


def jclass(name: str):
    """The Java class ``name`` (JVM started first)."""
    start()
    import jpype

    return jpype.JClass(name)


def configuration(conf_dir: str | None, extra: dict | None = None):
    """A Hadoop ``HdfsConfiguration``: Hadoop's defaults, then ``core-site.xml`` and
    ``hdfs-site.xml`` of ``conf_dir`` (when given and present), then
    :data:`CLIENT_DEFAULTS` where the site files leave a key at its default, then
    ``extra``."""
    conf = jclass("org.apache.hadoop.hdfs.HdfsConfiguration")()
    path_cls = jclass("org.apache.hadoop.fs.Path")
    if conf_dir:
        for name in ("core-site.xml", "hdfs-site.xml"):
            site = os.path.join(conf_dir, name)
            if os.path.isfile(site):
                conf.addResource(path_cls(f"file://{os.path.abspath(site)}"))
    for key, value in CLIENT_DEFAULTS.items():
        sources = conf.getPropertySources(key)
        if sources is None or all(str(s).endswith("-default.xml") for s in sources):
            conf.set(key, value)
    for key, value in (extra or {}).items():
        conf.set(str(key), str(value))
    return conf


def exception_chain(exc) -> list[tuple[str, str]]:
    """(simple class name, message) of a Java exception and its causes, outermost
    first; a RemoteException counts as the server-side class it wraps."""
    out, seen = [], 0
    while exc is not None and seen < 10:
        seen += 1
        name = str(exc.getClass().getSimpleName())
        if name == "RemoteException":
            name = str(exc.getClassName()).rpartition(".")[2]
        msg = exc.getMessage()
        out.append((name, "" if msg is None else str(msg)))
        exc = exc.getCause()
    return out


#: words of Hadoop's refusal of a client without Kerberos credentials
_NO_KERBEROS_WORDS = ("Failed to find any Kerberos tgt", "SIMPLE authentication is not enabled",
                      "Client cannot authenticate via:[TOKEN, KERBEROS]")


def _first_line(msg: str, limit: int = 300) -> str:
    line = msg.strip().splitlines()[0] if msg.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."


def storage_error(exc, op: str, display: str) -> StorageError:
    """The sparklog StorageError (subclass) for Java exception ``exc`` raised by ``op``
    on ``display`` (a URL): names the URL, the operation and the cause, in one line."""
    chain = exception_chain(exc)
    for name, msg in chain:
        if any(w in msg for w in _NO_KERBEROS_WORDS):
            return StorageError(
                f"{display}: {op} failed: Kerberos authentication refused: this client "
                "has no valid Kerberos ticket for the Kerberized cluster (give the "
                "principal and keytab options - the broker's storage.kerberos.principal "
                f"and storage.kerberos.keytab - or kinit) ({name}: {_first_line(msg)})")
    for name, msg in reversed(chain):  # the innermost known cause says it plainest
        if name == "FileNotFoundException" and "not a file" in msg:
            return StorageError(f"{display}: {op} failed: is a directory, not a file "
                                f"({name}: {_first_line(msg)})")
        if name in _ERRORS:
            cls, meaning = _ERRORS[name]
            return cls(f"{display}: {op} failed: {meaning} ({name}: {_first_line(msg)})")
    name, msg = chain[0] if chain else ("?", "")
    return StorageError(f"{display}: {op} failed: {name}: {_first_line(msg)}")
