"""The hdfs:// backend's JVM is not stopped by Python's garbage collections
(sparklog/storage/jvm.py: JPype's link from Python's collector to ``System.gc()``).

Each case is a fresh Python process with the JVM's collector logging to a file: it
grows the malloc heap by some 60 MB of live objects (what a busy broker's buffers do)
and runs Python's collector. A JVM started plainly with JPype answers with explicit
full collections (``Pause Full (System.gc())``): the control, showing that the load
triggers the link. The JVM sparklog starts logs none under the same load.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.hdfscluster import hadoop_unavailable

GROW_AND_COLLECT = textwrap.dedent("""
    import gc
    live = []
    for _ in range(6):
        live.extend(bytes(1000) for _ in range(10_000))  # malloc'd, not pymalloc's
        gc.collect()
    print("done", len(live))
""")

START = {
    "plain JPype": "import jpype\njpype.startJVM({opts!r})\n",
    "sparklog": "import os\nos.environ['HADOOP_CLIENT_OPTS'] = {opts!r}\n"
                "from sparklog.storage import jvm\njvm.start()\n",
}


def _explicit_collections(tmp_path, how: str) -> list[str]:
    log = tmp_path / f"gc-{how.replace(' ', '-')}.log"
    script = START[how].format(opts=f"-Xlog:gc:file={log}") + GROW_AND_COLLECT
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "done 60000" in done.stdout
    return [line for line in log.read_text().splitlines() if "System.gc()" in line]


def test_python_collections_do_not_stop_the_storage_jvm(tmp_path):
    why = hadoop_unavailable()
    if why:
        pytest.skip(why)
    control = _explicit_collections(tmp_path, "plain JPype")
    assert control, "the load did not trigger JPype's System.gc() in a plain JVM: " \
                    "the test no longer shows anything"
    assert _explicit_collections(tmp_path, "sparklog") == []
