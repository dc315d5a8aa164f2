"""Keep PySpark's Python workers from re-reading zip archives on every call.

PySpark's workers call ``importlib.invalidate_caches()`` at the start of every task and
of every data-source call (schema, planning, filter pushdown). On Python 3.10 and 3.11
that re-reads the central directory of every zip archive on ``sys.path``, once per
importer: the workers' path holds ``pyspark.zip`` and Spark's core jar (over 5,000
entries), and each imported package of them has an importer of its own. Measured here,
that is 80 to 110 ms per call, more than the rest of a small query's Python work
(CPython issue gh-103200; Python 3.12 made the invalidation lazy).

:func:`install` gives those interpreters the same effect: an importer re-reads its
archive only when the file changed since it last read it (modification time, size or
inode differ), which keeps the reason for the invalidation (an archive replaced on disk
is seen) without paying for the ones that did not change. It acts only inside Spark's
Python workers, and only on Python before 3.12; everywhere else it does nothing.
"""

from __future__ import annotations

import os
import sys
import zipimport

_MARK = "_sparklog_stat_checked"
_STAMP = "_sparklog_archive_stamp"


def in_spark_worker() -> bool:
    """True in a Python worker started by Spark (the daemon hands it its secret)."""
    return "PYTHON_WORKER_FACTORY_SECRET" in os.environ


def _stamp(archive: str):
    try:
        st = os.stat(archive)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def stat_checked(original):
    """``zipimporter.invalidate_caches`` that calls ``original`` (the re-read) only when
    the archive changed since this importer last read it."""

    def invalidate_caches(self):
        stamp = _stamp(self.archive)
        if stamp is not None and getattr(self, _STAMP, None) == stamp:
            return
        original(self)
        setattr(self, _STAMP, stamp)

    invalidate_caches.__doc__ = original.__doc__
    setattr(invalidate_caches, _MARK, True)
    return invalidate_caches


def install(force: bool = False) -> bool:
    """Make zip-archive invalidation stat-checked in this interpreter; True when it is
    (already or now). Without ``force`` only in a Spark worker on Python < 3.12."""
    if not force and (sys.version_info >= (3, 12) or not in_spark_worker()):
        return False
    cls = zipimport.zipimporter
    if not getattr(cls.invalidate_caches, _MARK, False):
        cls.invalidate_caches = stat_checked(cls.invalidate_caches)
    return True
