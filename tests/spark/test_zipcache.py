"""sparklog.spark.source.zipcache: Spark's Python workers stop re-reading unchanged zip
archives on every importlib.invalidate_caches(), and still see an archive replaced on
disk. Each case runs in a fresh interpreter: the fix changes a class of the import
system for the whole process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from sparklog.spark.source import zipcache

SCRIPT = textwrap.dedent("""
    import importlib, os, sys, time, zipfile, zipimport
    from sparklog.spark.source import zipcache

    archive = sys.argv[1]
    def write(modules):
        tmp = archive + ".tmp"
        with zipfile.ZipFile(tmp, "w") as z:
            for i in range(3000):  # a directory as large as pyspark.zip's
                z.writestr(f"filler/f{i}.txt", "x")
            for name, value in modules.items():
                z.writestr(f"zpkg/{name}.py", f"VALUE = {value!r}")
            z.writestr("zpkg/__init__.py", "")
        os.replace(tmp, archive)

    write({"one": 1})
    sys.path.insert(0, archive)
    import zpkg.one
    print("installed", zipcache.install())
    importers = [f for f in sys.path_importer_cache.values()
                 if isinstance(f, zipimport.zipimporter)]
    importlib.invalidate_caches()  # the first call after install reads, as before
    before = [f._files for f in importers]  # held: a re-read makes new objects
    start = time.perf_counter()
    for _ in range(20):
        importlib.invalidate_caches()
    per_call = (time.perf_counter() - start) / 20
    print("reread", any(f._files is not b for f, b in zip(importers, before)))
    print("ms", round(per_call * 1000, 3))
    write({"one": 1, "two": 2})  # replaced on disk: must be seen
    importlib.invalidate_caches()
    import zpkg.two
    print("two", zpkg.two.VALUE)
""")


def run(tmp_path, env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_WORKER_FACTORY_SECRET"}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "mods.zip")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


@pytest.mark.skipif(sys.version_info >= (3, 12),
                    reason="Python 3.12+ invalidates zip archives lazily; nothing to fix")
def test_a_spark_worker_keeps_unchanged_archives_and_sees_replaced_ones(tmp_path):
    worker = run(tmp_path, {"PYTHON_WORKER_FACTORY_SECRET": "test"})
    assert worker["installed"] == "True"
    assert worker["reread"] == "False", worker
    assert worker["two"] == "2"
    # elsewhere (a driver, a plain interpreter) nothing changes: every call re-reads
    plain = run(tmp_path, {})
    assert plain["installed"] == "False"
    assert plain["reread"] == "True", plain
    assert plain["two"] == "2"
    print(f"invalidate_caches() with one {3000}-entry archive: "
          f"{plain['ms']} ms per call as shipped, {worker['ms']} ms with the fix")


def test_install_is_a_no_op_outside_workers_and_on_new_pythons(monkeypatch):
    monkeypatch.delenv("PYTHON_WORKER_FACTORY_SECRET", raising=False)
    assert not zipcache.in_spark_worker()
    assert zipcache.install() is False
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", "x")
    monkeypatch.setattr(zipcache.sys, "version_info", (3, 12, 0))
    assert zipcache.install() is False
