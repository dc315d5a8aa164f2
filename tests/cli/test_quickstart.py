"""The README's main command: ``sparklog quickstart`` runs end to end and its checks pass."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.spark
def test_quickstart_runs_and_picks_up_exactly_the_new_events(tmp_path):
    root = tmp_path / "qs"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    cmd = [sys.executable, "-m", "sparklog.cli.main", "quickstart", "--root", str(root),
           "--records", "3000", "--second-batch", "700", "--partitions", "3"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    out = done.stdout
    assert "3 partitions, 3700 events produced" in out
    assert "3700 rows" in out
    assert "[ok] run 2 read exactly the second batch" in out and "FAILED" not in out
    # a second invocation recreates its own directory; a foreign directory is refused
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.txt").write_text("keep me")
    refused = subprocess.run(cmd[:5] + [str(foreign)], capture_output=True, text=True,
                             timeout=120, env=env)
    assert refused.returncode == 1
    assert "was not made by the quickstart" in refused.stderr
    assert (foreign / "data.txt").read_text() == "keep me"


def test_quickstart_without_its_extra_names_the_extra(tmp_path):
    # tqdm hidden from this interpreter (an install without sparklog[quickstart]): the
    # command says what to install before it touches anything
    code = ("import sys; sys.modules['tqdm'] = None; from sparklog.cli.main import main; "
            f"sys.exit(main(['quickstart', '--root', {str(tmp_path / 'qs')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "needs tqdm" in done.stderr and "sparklog[quickstart]" in done.stderr
    assert not (tmp_path / "qs").exists()
