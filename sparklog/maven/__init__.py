"""Java artifacts from Maven Central, resolved with the machine's ``mvn`` into a user cache.

Each set of Java artifacts sparklog uses is a small Maven project in this package,
``sparklog/maven/<name>/pom.xml`` (package data): ``hadoop`` (Apache Hadoop's HDFS
daemons and client, for the tests' cluster), ``hadoop-client`` (Hadoop's shaded client,
what the ``hdfs://`` backend loads), ``delta`` (delta-spark for Spark 4.1), ``kafka``
(Apache Kafka's broker and tools, the peer of the tests and bench/peers),
``kafka-connect`` (Kafka Connect's runtime and FileStream connectors, a client of the
tests), ``spark-kafka`` (Spark's Kafka source) and ``minikdc`` (Hadoop's MiniKdc, the tests'
Kerberos KDC). :func:`classpath` resolves one
with ``mvn dependency:build-classpath`` (artifacts in Maven's own local repository,
``~/.m2`` by default, never in the source tree) and remembers the resulting class path in
the per-user cache (``$SPARKLOG_CACHE_DIR``, else ``$XDG_CACHE_HOME/sparklog``, else
``~/.cache/sparklog``), keyed by a hash of the pom, so later calls cost one file read.

``sparklog classpath NAME`` prints it (``--jars`` form with ``--separator ,``);
:func:`with_jars` adds jars to the ``spark.jars`` setting of a new Spark session.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import SparklogError

log = logging.getLogger(__name__)

#: Directory of the Maven projects (package data).
POM_DIR = Path(__file__).resolve().parent


class MavenError(SparklogError):
    """A set of Java artifacts could not be resolved (no ``mvn``, no registry, bad name)."""


def cache_dir() -> Path:
    """Per-user cache directory of resolved class paths."""
    override = os.environ.get("SPARKLOG_CACHE_DIR")
    if override:
        return Path(override) / "maven"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparklog" / "maven"


def names() -> list[str]:
    """The names of the artifact sets this package knows."""
    return sorted(p.parent.name for p in POM_DIR.glob("*/pom.xml"))


def pom_path(name: str) -> Path:
    """The pom of artifact set ``name``; MavenError naming the known sets otherwise."""
    pom = POM_DIR / name / "pom.xml"
    if name not in names():
        raise MavenError(f"unknown Java artifact set {name!r} (known: {', '.join(names())})")
    return pom


def _cache_file(name: str) -> Path:
    digest = hashlib.sha256(pom_path(name).read_bytes()).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}.classpath"


def cached_classpath(name: str) -> list[str] | None:
    """The remembered class path of ``name`` if it was resolved before and its jars are
    all still there; None otherwise (nothing is resolved)."""
    path = _cache_file(name)
    if not path.is_file():
        return None
    jars = [j for j in path.read_text().split(os.pathsep) if j]
    if not jars or not all(os.path.isfile(j) for j in jars):
        return None
    return jars


def with_jars(conf: dict, jars) -> dict:
    """``conf`` (Spark settings for a new session) with ``jars`` appended to its
    ``spark.jars`` (comma-separated), each once, in order."""
    have = [j for j in conf.get("spark.jars", "").split(",") if j]
    added = [j for j in dict.fromkeys(jars) if j not in have]
    if not added:
        return dict(conf)
    return {**conf, "spark.jars": ",".join([*have, *added])}


def classpath(name: str, *, quiet: bool = False) -> list[str]:
    """The jars of artifact set ``name``, resolving them with ``mvn`` on first use.

    Progress goes to stderr unless ``quiet``. Raises MavenError with ``mvn``'s own last
    lines when resolution fails."""
    jars = cached_classpath(name)
    if jars is not None:
        return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(f"resolving the Java artifacts {name!r} needs Maven (mvn) on PATH")
    target = _cache_file(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    message = f"resolving Java artifacts {name!r} from Maven (first use only)"
    log.info(message)
    if not quiet:
        print(f"sparklog: {message}", file=sys.stderr, flush=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}-", suffix=".tmp")
    os.close(fd)
    try:
        proc = subprocess.run(
            [mvn, "-q", "-B", "-f", str(pom_path(name)), "dependency:build-classpath",
             f"-Dmdep.outputFile={tmp}"],
            capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise MavenError(f"mvn could not resolve the Java artifacts {name!r} "
                             f"(exit {proc.returncode}):\n{tail}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    jars = cached_classpath(name)
    if jars is None:
        raise MavenError(f"mvn resolved {name!r} but listed no existing jar")
    return jars
