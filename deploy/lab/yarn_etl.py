#!/usr/bin/env python3
"""sparklog's exactly-once ETL on the lab's YARN, through the kit's one submit path.

::

    deploy/lab/yarn_etl.py [--records 300] [--no-kill] [--once] [--rm-failover]

Needs a lab that is up (``deploy/lab/lab.py up``). On the edge host, as the ``sparklog``
user, as an operator would:

1. ``bin/pack-venv.sh --upload hdfs://ns1/apps/sparklog/sparklog-venv.tar.gz`` packs
   sparklog with its ``spark,hdfs,cluster`` extras and uploads it with Spark's jars
   (unless both are in HDFS already), ``--cache ~/.cache/sparklog/venv-packs``
   (``$SPARKLOG_PACK_CACHE``): an archive of the same source, Python and options is
   reused from there, not packed again. The lab's hosts have no route to a package
   index, so the archive is packed on the machine itself (the build host) first, and
   the edge host's run finds it in the cache;
2. a topic ``etl<stamp>`` gets ``--records`` records through a broker (acks=all);
3. ``bin/submit-etl.sh -- --app-id ... --path hdfs://ns1/sparklog --output
   hdfs://ns1/warehouse/<topic> --format delta`` runs ``sparklog etl run`` with
   ``spark-submit --master yarn --deploy-mode cluster``: the driver in the application
   master's container, the executors in NodeManager containers, all on the packed venv;
   the output holds every acknowledged record exactly once;
4. more records, a second run: its commit covers only the new records;
5. more records, a third run held mid-write (``SPARKLOG_JOB_FAULT=mid-write:pause`` in the
   driver's environment: a task stops after handing its first rows to the Parquet
   writer) and killed with ``yarn application -kill`` once its part files are in HDFS;
   the table is unchanged; a rerun commits, every record is in the table exactly once
   and the killed attempt's files are gone.

With ``--rm-failover`` the second run loses its active ResourceManager (SIGKILL, once the
application runs): the standby takes over from the state in ZooKeeper, and the run
completes (or, had it failed, its rerun gives the same table); the killed
ResourceManager is started again as the standby.

Prints one ``yarn-etl:`` line per step and exits 1 at the first check that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lab  # noqa: E402  (the lab's hosts, run_on, directories)

#: the kit's systemd unit of the ResourceManagers (the kill of --rm-failover)
RESOURCEMANAGER = "hadoop-yarn@resourcemanager.service"
ARCHIVE = "hdfs://ns1/apps/sparklog/sparklog-venv.tar.gz"
#: packed venvs kept across labs (outside the lab directory, which ``down`` removes):
#: pack-venv.sh reuses one whose source, Python and options are unchanged
PACK_CACHE = Path(os.environ.get("SPARKLOG_PACK_CACHE")
                  or Path.home() / ".cache" / "sparklog" / "venv-packs")
SQL = "SELECT topic, partition, offset, CAST(value AS STRING) AS value FROM input"
#: containers sized for the lab (2 cores, a shared machine): one small executor
SMALL = ["--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
         "--conf", "spark.executor.instances=1", "--conf", "spark.executor.cores=1",
         "--conf", "spark.executor.memoryOverhead=512m"]
PATH_WITH_VENV = f"PATH={Path(sys.executable).parent}:$PATH"


class CheckFailed(lab.LabError):
    """A check of the scenario failed (the message says which)."""


def edge(user: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    """A command on the edge host, with the venv's commands (sparklog, spark-submit) on
    PATH; its output captured."""
    proc = lab.run_on("edge", user, ["sh", "-c", f'{PATH_WITH_VENV} exec "$@"', "sh", *cmd],
                      capture=True)
    if check and proc.returncode != 0:
        raise CheckFailed(f"{' '.join(cmd)[:200]} failed ({proc.returncode}):\n"
                          f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return proc


def kit_bin(name: str) -> str:
    """A script of the lab's rendered kit (its spark-defaults.conf names the lab's
    hosts and install locations)."""
    return str(lab.lab_dir() / "kit" / "bin" / name)


def ensure_archive() -> None:
    """The packed venv and Spark's jars in HDFS (packed on the edge host unless there)."""
    jars = ARCHIVE.rsplit("/", 1)[0] + "/spark-jars.zip"
    if all(edge("sparklog", "hdfs", "dfs", "-test", "-e", f, check=False).returncode == 0
           for f in (ARCHIVE, jars)):
        print(f"yarn-etl: {ARCHIVE} and {jars} are in HDFS already", flush=True)
        return
    t0 = time.monotonic()
    pack = ["bash", kit_bin("pack-venv.sh"), "--python", sys.executable, "--source",
            str(lab.REPO), "--output", str(lab.lab_dir() / "sparklog-venv.tar.gz"),
            "--cache", str(PACK_CACHE)]
    # packed on this machine, the lab's build host: the lab's hosts have no route to a
    # package index; then on the edge host, where the same source and Python find the
    # archive in the cache and only the upload is done
    proc = subprocess.run(pack, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CheckFailed(f"pack-venv.sh failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                          f"{proc.stderr[-4000:]}")
    edge("sparklog", *pack, "--upload", ARCHIVE)
    print(f"yarn-etl: venv archive packed and uploaded to {ARCHIVE} "
          f"({time.monotonic() - t0:.0f}s)", flush=True)


def produce(topic: str, start: int, count: int) -> None:
    """``count`` records ``r<start>``... to ``topic`` (acks=all, every one acknowledged)."""
    script = (
        "import sys\n"
        "from sparklog import Admin, Producer\n"
        "topic, start, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
        "if start == 0:\n"
        "    with Admin('dn1.lab.test:9092') as a:\n"
        "        a.create_topic(topic, 3)\n"
        "with Producer('dn1.lab.test:9092', acks='all', enable_idempotence=True) as p:\n"
        "    fs = [p.send(topic, f'r{i}'.encode()) for i in range(start, start + count)]\n"
        "    [f.get(120) for f in fs]\n")
    edge("root", sys.executable, "-c", script, topic, str(start), str(count))


def submit(topic: str, app: str, extra: list[str] = ()) -> list[str]:
    """The kit's submit command for one run of ``app`` over ``topic``."""
    return ["bash", kit_bin("submit-etl.sh"), *SMALL, *extra, "--",
            "--app-id", app, "--subscribe", topic, "--path", "hdfs://ns1/sparklog",
            "--output", f"hdfs://ns1/warehouse/{topic}", "--format", "delta", "--sql", SQL]


def table_state(topic: str, app: str) -> dict:
    """The Delta table as a reader sees it: rows, the application's commit records
    (from the table's history), its run directories in HDFS."""
    script = (
        "import json, sys\n"
        "from collections import Counter\n"
        "from deltalake import DeltaTable\n"
        "from sparklog.storage import open_fileio\n"
        "uri, app = sys.argv[1], sys.argv[2]\n"
        "dt = DeltaTable(uri)\n"
        "t = dt.to_pyarrow_table(columns=['partition', 'offset', 'value'])\n"
        "rows = list(zip(*(t.column(c).to_pylist() for c in t.column_names)))\n"
        "docs = [h['sparklog'] for h in reversed(dt.history()) if isinstance("
        "h.get('sparklog'), dict) and h['sparklog'].get('appId') == app]\n"
        "fs = open_fileio(uri)\n"
        "runs = fs.join(uri, 'sparklog-runs', app)\n"
        "dirs = sorted(f.name for f in fs.list(runs)) if fs.exists(runs) else []\n"
        "keys = Counter((p, o) for p, o, _ in rows)\n"
        "print(json.dumps({'rows': len(rows), 'values': sorted(v for _, _, v in rows),\n"
        "    'dupes': sum(1 for n in keys.values() if n > 1), 'dirs': dirs,\n"
        "    'commits': [{'version': d['version'], 'records': sum(r['untilOffset'] -\n"
        "        r['fromOffset'] for r in d['ranges'])} for d in docs]}))\n")
    proc = edge("sparklog", sys.executable, "-c", script, f"hdfs://ns1/warehouse/{topic}", app)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_exactly_once(state: dict, produced: int, step: str) -> None:
    """Every produced record ``r0..`` in the table once, nothing else."""
    want = sorted(f"r{i}" for i in range(produced))
    if state["dupes"] or state["values"] != want:
        raise CheckFailed(f"{step}: the table holds {state['rows']} rows "
                          f"({state['dupes']} offsets twice), expected r0..r{produced - 1} "
                          f"once each")


def run_ok(topic: str, app: str, step: str) -> float:
    """One ETL run that must succeed; its wall time."""
    t0 = time.monotonic()
    proc = edge("sparklog", *submit(topic, app), check=False)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise CheckFailed(f"{step}: submit-etl.sh exited {proc.returncode}:\n"
                          f"{proc.stderr[-4000:]}")
    return took


def application_id(name: str, states: str = "ACCEPTED,RUNNING") -> str | None:
    """The YARN id of the application called ``name`` in one of ``states``."""
    proc = edge("yarn", "yarn", "application", "-list", "-appStates", states, check=False)
    for line in proc.stdout.splitlines():
        cols = line.split()
        if len(cols) > 1 and cols[1] == name:
            return cols[0]
    return None


def killed_mid_write(topic: str, app: str) -> None:
    """A run held mid-write, killed with ``yarn application -kill``."""
    fault = ["--conf", "spark.yarn.appMasterEnv.SPARKLOG_JOB_FAULT=mid-write:pause",
             "--conf", "spark.yarn.maxAppAttempts=1"]
    cmd = [sys.executable, str(Path(lab.__file__).resolve()), "run", "edge", "sparklog",
           "sh", "-c", f'{PATH_WITH_VENV} exec "$@"', "sh", *submit(topic, app, fault)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        runs = f"/warehouse/{topic}/sparklog-runs/{app}"

        def part_files() -> bool:
            ls = edge("sparklog", "hdfs", "dfs", "-ls", "-R", runs, check=False).stdout
            return bool(re.search(r"/0000000002-[^/\s]+/.*part-", ls))

        lab.wait(part_files, 600, "part files of the third run in HDFS (its tasks writing)",
                 interval=2)
        app_id = lab.wait(lambda: application_id(f"sparklog-etl-{app}"), 60,
                          "the third run's YARN application", interval=2)
        edge("yarn", "yarn", "application", "-kill", app_id)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()  # the transport we started; spark-submit ends with it
    if proc.returncode == 0:
        raise CheckFailed(f"the killed run exited 0:\n{out[-3000:]}")
    print(f"yarn-etl: run 3 ({app_id}) killed with `yarn application -kill` while its "
          f"tasks wrote", flush=True)


def active_rm() -> str | None:
    """The lab host of the active ResourceManager (rm1 on nn1, rm2 on nn2)."""
    out = edge("yarn", "yarn", "rmadmin", "-getAllServiceState", check=False).stdout
    for line in out.splitlines():
        if line.rstrip().endswith("active"):
            return line.split(":")[0].split(".")[0].strip()
    return None


def run_with_rm_failover(topic: str, app: str) -> tuple[float, float, bool]:
    """One run whose active ResourceManager is killed while the application runs:
    (the run's wall time, the RM failover time, whether the run itself succeeded)."""
    cmd = [sys.executable, str(Path(lab.__file__).resolve()), "run", "edge", "sparklog",
           "sh", "-c", f'{PATH_WITH_VENV} exec "$@"', "sh", *submit(topic, app)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lab.wait(lambda: application_id(f"sparklog-etl-{app}", "RUNNING"), 600,
             "the run's application RUNNING", interval=2)
        host = lab.wait(active_rm, 60, "an active ResourceManager", interval=2)
        t_kill = time.monotonic()
        os.kill(lab.unit_pid(host, RESOURCEMANAGER), signal.SIGKILL)
        other = "nn2" if host == "nn1" else "nn1"
        lab.wait(lambda: active_rm() == other, 120, f"the ResourceManager on {other} active",
                 interval=0.5)
        failover = time.monotonic() - t_kill
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()  # the transport we started; spark-submit ends with it
    took = time.monotonic() - t0
    started = lab.run_on(host, "root", ["systemctl", "start", RESOURCEMANAGER], capture=True)
    if started.returncode != 0:
        raise CheckFailed(f"restarting the ResourceManager on {host}: {started.stdout}"
                          f"{started.stderr}")
    print(f"yarn-etl: run 2's active ResourceManager ({host}) killed; {other} active "
          f"after {failover:.1f}s; the run exited {proc.returncode}", flush=True)
    return took, failover, proc.returncode == 0


def main(argv=None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="yarn_etl.py", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300, help="records per step")
    parser.add_argument("--no-kill", action="store_true",
                        help="leave out step 5 (the run killed mid-write)")
    parser.add_argument("--once", action="store_true",
                        help="steps 1-3 only: one run on YARN (the CI lab test's form)")
    parser.add_argument("--rm-failover", action="store_true",
                        help="kill the active ResourceManager during the second run")
    args = parser.parse_args(argv)
    if not (lab.lab_dir() / "lab.json").exists():
        print("yarn-etl: no lab is up (deploy/lab/lab.py up)", file=sys.stderr)
        return 2
    topic = f"etl{int(time.time()) % 1000000}"
    app = f"{topic}-daily"
    n = args.records
    try:
        ensure_archive()
        produce(topic, 0, n)
        took = run_ok(topic, app, "run 1")
        state = table_state(topic, app)
        check_exactly_once(state, n, "run 1")
        print(f"yarn-etl: run 1 on YARN committed {n} records ({took:.0f}s)", flush=True)
        if args.once:
            print("yarn-etl: OK")
            return 0

        produce(topic, n, n)
        if args.rm_failover:
            took, _, completed = run_with_rm_failover(topic, app)
            if not completed:
                took += run_ok(topic, app, "the rerun after the RM failover")
        else:
            took = run_ok(topic, app, "run 2")
        state = table_state(topic, app)
        check_exactly_once(state, 2 * n, "run 2")
        if [c["records"] for c in state["commits"]] != [n, n]:
            raise CheckFailed(f"run 2: commits {state['commits']}, expected {n} then "
                              f"{n} records (only the new ones)")
        print(f"yarn-etl: run 2 picked up only the {n} new records ({took:.0f}s)",
              flush=True)
        if args.no_kill:
            print("yarn-etl: OK")
            return 0

        produce(topic, 2 * n, n)
        killed_mid_write(topic, app)
        state = table_state(topic, app)
        check_exactly_once(state, 2 * n, "after the kill")
        left = [d for d in state["dirs"] if d.startswith("0000000002-")]
        if len(state["commits"]) != 2 or not left:
            raise CheckFailed(f"after the kill: commits {state['commits']}, run "
                              f"directories {state['dirs']}")
        took = run_ok(topic, app, "rerun")
        state = table_state(topic, app)
        check_exactly_once(state, 3 * n, "rerun")
        stale = [d for d in state["dirs"] if d in left]
        if len(state["commits"]) != 3 or stale:
            raise CheckFailed(f"rerun: commits {state['commits']}, the killed attempt's "
                              f"files still there: {stale}")
        print(f"yarn-etl: rerun committed the {n} records once, the killed attempt's "
              f"files removed ({took:.0f}s)", flush=True)
    except CheckFailed as exc:
        print(f"yarn-etl: FAILED: {exc}", flush=True)
        return 1
    print("yarn-etl: OK: every record in the table exactly once over 4 runs on YARN")
    return 0


if __name__ == "__main__":
    sys.exit(main())
