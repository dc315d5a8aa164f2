"""The JVM reader of ``format("sparklog")``: build glue for its jar.

``sparklog/spark/jvm/java/`` holds a Spark DataSourceV2 (``io.sparklog.spark``) whose
provider registers the short name ``sparklog``. With its jar on Spark's classpath, Spark
resolves ``spark.read.format("sparklog")`` to it before the Python data source of the
same name; it delegates schema inference, options, planning, filter pushdown, stream
offsets and writes to that Python source (registering it in a session that has none,
so a job needs no registration step) and runs only the read tasks of batch scans and
stream micro-batches on the JVM (columnar, no Python worker), and counts pushed-down
``COUNT(*)``s of the planned ranges from the files' metadata. The Python planner is the
only planner: ranges cross to the JVM as versioned descriptors (docs/format.md,
"Planned ranges"). See docs/spark.md.

:func:`jar_path` compiles the sources with ``javac --release 17`` against pyspark's jars
into a per-user cache directory, keyed by a hash of the sources and the pyspark version,
and returns the jar's path (None, with the reason logged, when it cannot: no ``javac``,
no pyspark). ``sparklog spark-jar`` prints it for ``spark-submit --jars``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

#: Directory of the Java sources (package data).
SOURCE_DIR = Path(__file__).resolve().parent / "java"
#: Read option that keeps a batch scan on the Python reader when "false".
JVM_READER_OPTION = "sparklog.jvmReader"
#: Read option: "false" keeps COUNT(*) from being pushed down to a scan the JVM reads
#: (it is then counted from the rows; see docs/spark.md, "Counting").
COUNT_PUSHDOWN_OPTION = "sparklog.countPushDown"


def cache_dir() -> Path:
    """Per-user cache directory of built jars (``$XDG_CACHE_HOME/sparklog/jars``, else
    ``~/.cache/sparklog/jars``; ``SPARKLOG_JAR_CACHE`` overrides)."""
    override = os.environ.get("SPARKLOG_JAR_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparklog" / "jars"


def _sources() -> list[Path]:
    return sorted(p for p in SOURCE_DIR.rglob("*") if p.is_file() and p.suffix != ".class")


def _pyspark():
    try:
        import pyspark
    except ImportError:
        return None
    return pyspark


def source_hash(pyspark_version: str) -> str:
    """Hash of the Java sources (names and bytes) and the pyspark version."""
    h = hashlib.sha256(pyspark_version.encode())
    for p in _sources():
        h.update(str(p.relative_to(SOURCE_DIR)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _progress(message: str, quiet: bool) -> None:
    log.info(message)
    if not quiet:
        print(f"sparklog: {message}", file=sys.stderr, flush=True)


#: javac's options of the project's check (scripts/check.sh): every warning about these
#: sources is an error. Left out: ``path`` and ``classfile``, which warn about pyspark's
#: jars themselves (Class-Path entries of their manifests naming jars pyspark does not
#: ship; annotations in Arrow's classes whose jar Spark leaves out).
STRICT_OPTIONS = ["-Xlint:all,-path,-classfile", "-Werror"]


def javac_command(javac: str, jars: Path, classes: Path, *, strict: bool = False) -> list[str]:
    """The javac command that compiles the Java sources against pyspark's ``jars``
    directory into ``classes``: warnings off when building the jar for users, every
    warning an error (:data:`STRICT_OPTIONS`) when ``strict``."""
    java = [str(p) for p in _sources() if p.suffix == ".java"]
    return [javac, "--release", "17", *(STRICT_OPTIONS if strict else ["-nowarn"]),
            "-encoding", "UTF-8", "-cp", str(jars / "*"), "-d", str(classes), *java]


def pyspark_jars() -> Path | None:
    """The ``jars`` directory of the installed pyspark (None without pyspark)."""
    pyspark = _pyspark()
    return None if pyspark is None else Path(pyspark.__file__).resolve().parent / "jars"


def jar_path(build: bool = True, *, quiet: bool = False) -> str | None:
    """Path of the JVM reader's jar for the installed pyspark, built (``build``) into the
    cache if missing; None, with the reason logged, when it is not there and cannot be
    built. Progress goes to stderr unless ``quiet``."""
    pyspark = _pyspark()
    if pyspark is None:
        log.warning("sparklog JVM reader: pyspark is not installed")
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"  # as pyspark_jars()
    target = cache_dir() / f"sparklog-spark-{source_hash(pyspark.__version__)}.jar"
    if target.is_file():
        return str(target)
    if not build:
        log.info("sparklog JVM reader: %s is not built", target.name)
        return None
    javac = shutil.which("javac")
    if javac is None:
        log.warning("sparklog JVM reader: no javac on PATH (a JDK 17+ is needed to build it); "
                    "format('sparklog') stays on the Python reader")
        return None
    if not jars.is_dir():
        log.warning("sparklog JVM reader: pyspark has no jars directory (%s)", jars)
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    _progress(f"building the JVM reader jar {target.name} (javac, pyspark "
              f"{pyspark.__version__})...", quiet)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent) as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        done = subprocess.run(javac_command(javac, jars, classes), capture_output=True,
                              text=True)
        if done.returncode != 0:
            log.warning("sparklog JVM reader: javac failed:\n%s", done.stderr.strip())
            return None
        tmp_jar = Path(tmp) / target.name
        with zipfile.ZipFile(tmp_jar, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: sparklog\n")
            for p in _sources():
                if p.suffix != ".java":  # resources: the DataSourceRegister service entry
                    zf.write(p, str(p.relative_to(SOURCE_DIR)))
            for p in sorted(classes.rglob("*.class")):
                zf.write(p, str(p.relative_to(classes)))
        os.replace(tmp_jar, target)  # atomic: concurrent builders agree on the content
    _progress(f"built {target}", quiet)
    return str(target)


def with_jvm_reader(conf: dict) -> dict:
    """``conf`` (Spark settings for a new session) with the JVM reader's jar added to
    ``spark.jars`` when it is built or can be built; unchanged otherwise (the reason is
    logged, and ``format("sparklog")`` then runs on the Python reader)."""
    from ...maven import with_jars

    jar = jar_path()
    return dict(conf) if jar is None else with_jars(conf, [jar])


PROVIDER_CLASS = "io.sparklog.spark.SparklogProvider"


def class_loaded(spark, class_name: str) -> bool:
    """True when ``class_name`` is on the classpath of ``spark``'s driver (its jar in
    ``spark.jars``); False too for a session without a JVM at hand (Spark Connect)."""
    try:
        jvm = spark.sparkContext._jvm
        jvm.java.lang.Class.forName(class_name, False,
                                    jvm.java.lang.Thread.currentThread().getContextClassLoader())
    except Exception:  # py4j wraps ClassNotFoundException; Connect has no sparkContext
        return False
    return True


def provider_loaded(spark) -> bool:
    """True when the JVM reader's provider is on the classpath of ``spark``'s driver (its
    jar in ``spark.jars``), so that ``format("sparklog")`` resolves to it."""
    return class_loaded(spark, PROVIDER_CLASS)


def register_python_source(spark, source_cls) -> None:
    """Register the Python data source ``source_cls`` in ``spark`` even though the JVM
    provider of this jar holds its name.

    ``spark.dataSource.register`` refuses a name that a JVM data source has
    (DATA_SOURCE_ALREADY_EXISTS), unless a Python source of that name is already known
    (e.g. the ``pyspark_sparklog`` module was found). The JVM provider needs the Python
    source registered (it delegates planning to it), so this registers it the same way
    PySpark does, straight into the session's data source manager.
    """
    from pyspark.sql.udf import _wrap_function

    sc = spark.sparkContext
    jvm = sc._jvm
    ds = getattr(jvm, "org.apache.spark.sql.execution.datasources.v2.python."
                      "UserDefinedPythonDataSource")(_wrap_function(sc, source_cls))
    spark._jsparkSession.sessionState().dataSourceManager().registerDataSource(
        source_cls.name(), ds)


__all__ = ["jar_path", "cache_dir", "source_hash", "register_python_source", "SOURCE_DIR",
           "JVM_READER_OPTION", "COUNT_PUSHDOWN_OPTION",
           "PROVIDER_CLASS", "provider_loaded", "class_loaded"]
