"""librdkafka's and franz-go's own test suites against a sparklog broker (beyond CI).

Run through ``scripts/kafka-suites.sh`` (``--help`` for the options). For each suite it
fetches the pinned sources into a cache outside the repository (``--cache``, default
``~/.cache/sparklog-suites``), builds them, starts a fresh local broker with a Kafka
listener on loopback, runs the tests named in ``scripts/kafka-suites/<suite>.txt`` (a
process per test; librdkafka's runner per test number), and prints a table. Exit status: 0 when every test run passed, 1 when
one failed, 2 when a suite could not be fetched, built or started; ``--skip REASON``
prints ``skipped: REASON`` and exits 0 without doing anything.

Why a test is not in an allowlist is said in docs/kafka-protocol.md ("librdkafka's and
franz-go's test suites"); this file holds only the mechanics.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWLISTS = ROOT / "scripts" / "kafka-suites"

# librdkafka's sources as the rdkafka-sys crate ships them ("<crate>+<librdkafka>")
RDKAFKA_SYS = "4.10.0+2.12.1"
RDKAFKA_SYS_SHA256 = "e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77"
RDKAFKA_SYS_URL = ("https://static.crates.io/crates/rdkafka-sys/"
                   "rdkafka-sys-{version}.crate")
FRANZ_GO = "v1.22.3"
# the broker version librdkafka's runner is told (TEST_KAFKA_VERSION): it gates tests on
# it; sparklog serves the APIs of Kafka 3.x's classic protocol (no KIP-848)
LIBRDKAFKA_BROKER_VERSION = "3.9.0"


@dataclass
class Result:
    suite: str
    test: str
    outcome: str          # PASSED, FAILED, SKIPPED (by the suite itself)
    seconds: float
    detail: str = ""
    log: Path | None = None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/kafka-suites.sh",
        description="Run librdkafka's and franz-go's test suites against a local "
                    "sparklog broker (docs/kafka-protocol.md).")
    parser.add_argument("--suite", action="append", choices=["librdkafka", "franz-go"],
                        help="run this suite (repeatable; default both)")
    parser.add_argument("--only", action="append", metavar="TEST",
                        help="run only this test (repeatable), allowlisted or not")
    parser.add_argument("--all", action="store_true",
                        help="run every broker test of the suite, not only the allowlist")
    parser.add_argument("--list", action="store_true",
                        help="list each suite's broker tests and whether allowlisted")
    parser.add_argument("--skip", metavar="REASON",
                        help="do nothing: print 'skipped: REASON' and exit 0")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "SPARKLOG_SUITES_CACHE", Path.home() / ".cache" / "sparklog-suites")),
        help="where the suites are downloaded and built (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one test may run before it is killed and failed")
    parser.add_argument("--timeout-multiplier", type=float, default=3.0,
                        help="librdkafka's test.timeout.multiplier (a busy machine)")
    parser.add_argument("--quick", action="store_true",
                        help="librdkafka's quick mode (-Q): fewer messages, and the subtests "
                             "declared with SUB_TEST() (not SUB_TEST_QUICK()) are left out, "
                             "so some tests pass having run nothing")
    parser.add_argument("--records", type=int, default=20000,
                        help="franz-go's KGO_TEST_RECORDS (its default is 500000)")
    args = parser.parse_args(argv)
    # a SIGTERM stops the run as Ctrl-C does: the broker is stopped on the way out
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.skip is not None:
        if not args.skip.strip():
            parser.error("--skip needs a reason")
        print(f"skipped: {args.skip}")
        return 0
    suites = args.suite or ["librdkafka", "franz-go"]
    args.cache.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    excluded = 0
    for suite in suites:
        runner: Librdkafka | FranzGo = (Librdkafka(args) if suite == "librdkafka"
                                        else FranzGo(args))
        try:
            runner.prepare()
        except SuiteError as e:
            print(f"[kafka-suites] {suite}: {e}", file=sys.stderr)
            return 2
        every = runner.broker_tests()
        allow = read_allowlist(suite)
        unknown = sorted(t for t in allow if t.split("/")[0] not in every)
        if unknown:
            print(f"[kafka-suites] {suite}: allowlisted but not in {runner.version}: "
                  f"{', '.join(unknown)}", file=sys.stderr)
            return 2
        if args.list:
            for name in every:
                parts = [t for t in allow if t.startswith(name + "/")]
                status = ("allowlisted" if name in allow
                          else f"allowlisted: {', '.join(parts)}" if parts else "-")
                print(f"{suite:<11} {name:<55} {status}")
            continue
        if args.only:
            tests = list(args.only)
            missing = [t for t in tests if t.split("/")[0] not in every]
            if missing:
                print(f"[kafka-suites] {suite}: no broker test named "
                      f"{', '.join(missing)} in {runner.version}", file=sys.stderr)
                return 2
        elif args.all:
            tests = every
        else:
            tests = allow
        excluded += len(set(every) - {t.split("/")[0] for t in tests})
        print(f"[kafka-suites] {runner.version}: {len(tests)} test(s) of "
              f"{len(every)} broker tests", flush=True)
        run_dir = Path(tempfile.mkdtemp(prefix=f"run-{time.strftime('%Y%m%d-%H%M%S')}-"
                                        f"{suite}-", dir=args.cache))
        try:
            with Broker(run_dir / "broker", runner.broker_props) as broker:
                for test in tests:
                    result = runner.run(test, broker.kafka_address, run_dir)
                    results.append(result)
                    print(f"  {result.outcome:<7} {test} ({result.seconds:.0f}s)"
                          + (f": {result.detail}" if result.outcome != "PASSED" else ""),
                          flush=True)
        except SuiteError as e:
            print(f"[kafka-suites] {suite}: {e}", file=sys.stderr)
            return 2
    if args.list:
        return 0
    return report(results, excluded)


def report(results: list[Result], excluded: int) -> int:
    if results:
        width = max(len(r.test) for r in results)
        print()
        print(f"{'suite':<11} | {'test':<{width}} | result  | seconds")
        print(f"{'-' * 11}-+-{'-' * width}-+---------+--------")
        for r in results:
            print(f"{r.suite:<11} | {r.test:<{width}} | {r.outcome:<7} | {r.seconds:7.1f}")
    failed = [r for r in results if r.outcome == "FAILED"]
    for r in failed:
        print(f"FAILED {r.suite} {r.test}: {r.detail} (log: {r.log})")
    passed = sum(r.outcome == "PASSED" for r in results)
    skipped = sum(r.outcome == "SKIPPED" for r in results)
    print(f"kafka-suites: {passed} passed, {len(failed)} failed, {skipped} skipped")
    print(f"kafka-suites: {excluded} excluded (not allowlisted: docs/kafka-protocol.md)")
    return 1 if failed else 0


def read_allowlist(suite: str) -> list[str]:
    """The test names of ``scripts/kafka-suites/<suite>.txt`` (``#`` starts a comment)."""
    names = []
    for line in (ALLOWLISTS / f"{suite}.txt").read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(name)
    return names


class SuiteError(Exception):
    """A suite could not be fetched, built or run (not a test failure)."""


def run(cmd, cwd=None, env=None, log: Path | None = None, timeout=None) -> None:
    """Run a build step; its output goes to ``log``; a failure is a SuiteError naming it."""
    with open(log or os.devnull, "ab") as out:
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=out,
                                  timeout=timeout)
        except FileNotFoundError as e:
            raise SuiteError(f"{cmd[0]}: not installed ({e})") from None
    if proc.returncode != 0:
        raise SuiteError(f"{' '.join(map(str, cmd))} exited {proc.returncode}"
                         + (f" (its output: {log})" if log else ""))


def run_test(cmd, cwd, env, log: Path, timeout: float) -> tuple[int | None, float]:
    """One test process, its output in ``log``; (exit status or None if killed after
    ``timeout``, seconds). The process gets its own group, killed whole on timeout."""
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        except BaseException:          # interrupted: the test goes with the run
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if code is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, time.monotonic() - start


class Broker:
    """A sparklog broker process (``sparklog broker start``) on a new local storage root,
    with a sparklog listener and a Kafka listener (KAFKA) on free loopback ports."""

    def __init__(self, root: Path, props: dict[str, str]):
        self.root = root
        self.props = props
        self.proc: subprocess.Popen | None = None
        self.kafka_address = ""

    def __enter__(self) -> "Broker":
        self.root.mkdir(parents=True)
        log = open(self.root.parent / "broker.log", "ab")
        cmd = [sys.executable, "-m", "sparklog.cli.main", "--log-level", "INFO",
               "broker", "start", "--storage", self.root.as_uri(),
               "--override", "listeners=PLAINTEXT://127.0.0.1:0,KAFKA://127.0.0.1:0",
               "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,"
                             "KAFKA:PLAINTEXT",
               "--override", "kafka.listener.names=KAFKA",
               *(a for k, v in self.props.items() for a in ("--override", f"{k}={v}"))]
        self.proc = subprocess.Popen(cmd, cwd=self.root.parent, stdout=subprocess.PIPE,
                                     stderr=log, text=True,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1",
                                              PYTHONPATH=str(ROOT)))
        log.close()
        found = threading.Event()

        def read(proc=self.proc):
            for line in proc.stdout:
                m = re.match(r"listener KAFKA \(\w+\) on (\S+)", line)
                if m and not found.is_set():
                    self.kafka_address = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(120) or not self.kafka_address:
            self.__exit__()
            raise SuiteError(f"the broker did not start (exit status {self.proc.poll()}); "
                             f"its log: {self.root.parent / 'broker.log'}")
        print(f"[kafka-suites] broker pid {self.proc.pid}, Kafka listener "
              f"{self.kafka_address}, log {self.root.parent / 'broker.log'}", flush=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if exc and exc[0] is None:
            shutil.rmtree(self.root, ignore_errors=True)   # the logs stay


class Librdkafka:
    """librdkafka's tests (``tests/test-runner``), one runner process per test number,
    with ``-L`` (no broker-less tests); ``-Q`` (quick mode) with ``--quick``."""

    #: the cluster of its "default" scenario (tests/scenarios/default.json): topics are
    #: auto-created with 4 partitions
    broker_props = {"auto.create.topics.enable": "true", "num.partitions": "4"}

    def __init__(self, args):
        self.args = args
        self.version = f"librdkafka {RDKAFKA_SYS.split('+')[1]} (rdkafka-sys {RDKAFKA_SYS})"
        self.src = args.cache / f"rdkafka-sys-{RDKAFKA_SYS}" / "librdkafka"
        self.tests = self.src / "tests"
        #: number -> (exit status, seconds, {name: state}, log) of its runner process
        self._runs: dict[str, tuple] = {}
        self._runs_first: dict[str, str] = {}

    def prepare(self) -> None:
        crate = self.args.cache / f"rdkafka-sys-{RDKAFKA_SYS}.crate"
        if not crate.exists():
            url = RDKAFKA_SYS_URL.format(version=RDKAFKA_SYS.replace("+", "%2B"))
            print(f"[kafka-suites] downloading {url}", flush=True)
            partial = crate.with_suffix(".part")
            try:
                with urllib.request.urlopen(url, timeout=120) as r, open(partial, "wb") as f:
                    shutil.copyfileobj(r, f)
            except OSError as e:
                raise SuiteError(f"cannot download {url}: {e}") from None
            digest = hashlib.sha256(partial.read_bytes()).hexdigest()
            if digest != RDKAFKA_SYS_SHA256:
                partial.unlink()
                raise SuiteError(f"{url}: sha256 {digest}, expected {RDKAFKA_SYS_SHA256}")
            partial.rename(crate)
        if not self.src.exists():
            with tarfile.open(crate) as tar:
                tar.extractall(self.args.cache, filter="data")
        runner = self.tests / "test-runner"
        if not runner.exists():
            log = self.args.cache / f"librdkafka-{RDKAFKA_SYS}-build.log"
            print(f"[kafka-suites] building librdkafka and its test runner (log {log})",
                  flush=True)
            # mklove's configure loads every configure.* file of its directory as a
            # module: its output must go elsewhere
            run(["./configure", "--disable-gssapi", "--disable-curl"], cwd=self.src, log=log)
            jobs = str(os.cpu_count() or 1)
            run(["make", "-j", jobs, "libs"], cwd=self.src, log=log)
            run(["make", "-j", jobs, "-C", "tests", "test-runner"], cwd=self.src, log=log)

    def table(self) -> list[tuple[str, str]]:
        """(name, declaration) of each entry of test.c's ``tests[]`` table."""
        text = (self.tests / "test.c").read_text()
        body = text[text.index("struct test tests[] = {"):]
        body = body[:body.index("\n};")]
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        found = [(m.start(), m.group(1)) for m in re.finditer(r"_TEST\(\s*(\w+)", body)]
        ends = [start for start, _ in found[1:]] + [len(body)]
        return [(name, body[start:end]) for (start, name), end in zip(found, ends)]

    def broker_tests(self) -> list[str]:
        """Tests that need a broker: not local, manual, nor run against librdkafka's own
        mock cluster (``*_mock``, some of them not flagged local)."""
        return [name for name, decl in self.table()
                if "TEST_F_LOCAL" not in decl and "TEST_F_MANUAL" not in decl
                and not name.endswith("_mock")]

    def run(self, test: str, address: str, run_dir: Path) -> Result:
        """``test``'s outcome; the runner selects tests by number, so the tests of one
        number run in one process (``-L`` leaves out its broker-less ones) and each
        allowlisted name's state is read from that run's report."""
        number = test[:4]
        if number not in self._runs:
            self._runs[number] = self._run_number(number, address, run_dir)
        code, seconds, states, log = self._runs[number]
        first = self._runs_first.setdefault(number, test) == test
        seconds = seconds if first else 0.0
        state = states.get(test)
        if code is None and state not in ("PASSED", "SKIPPED"):
            return Result("librdkafka", test, "FAILED", seconds,
                          f"killed after {self.args.timeout:.0f}s", log)
        if state == "PASSED":
            return Result("librdkafka", test, "PASSED", seconds, log=log)
        if state == "SKIPPED":
            return Result("librdkafka", test, "SKIPPED", seconds, _last_fail(log, test), log)
        return Result("librdkafka", test, "FAILED", seconds,
                      _last_fail(log, test) or f"state {state}, exit status {code}", log)

    def _run_number(self, number: str, address: str, run_dir: Path):
        work = run_dir / "librdkafka"
        work.mkdir(exist_ok=True)
        conf = work / "test.conf"
        conf.write_text(f"bootstrap.servers={address}\n"
                        f"test.timeout.multiplier={self.args.timeout_multiplier}\n")
        # the runner keeps the report's path in 128 bytes: a short one, in its directory
        report = self.tests / f"sparklog-report-{os.getpid()}.json"
        report.unlink(missing_ok=True)
        env = dict(os.environ, TESTS=number, RDKAFKA_TEST_CONF=str(conf),
                   TEST_REPORT=report.name,
                   TEST_KAFKA_VERSION=LIBRDKAFKA_BROKER_VERSION,
                   LD_LIBRARY_PATH=os.pathsep.join(
                       [str(self.src / "src"), str(self.src / "src-cpp")]))
        log = work / f"{number}.log"
        flags = ["-L", "-p1"] + (["-Q"] if self.args.quick else [])
        code, seconds = run_test([str(self.tests / "test-runner"), *flags],
                                 self.tests, env, log, self.args.timeout)
        states: dict[str, str] = {}
        if report.exists():
            text = report.read_text(errors="replace")
            shutil.move(report, work / f"{number}.json")
            states = dict(re.findall(r'"name": "(\w+)", "state": "(\w+)"', text))
        return code, seconds, states, log


class FranzGo:
    """franz-go's kgo tests (``go test -c``), one process per test, against KGO_SEEDS.
    A test name may name a subtest (``TestGroupETL/range``): that subtest runs alone."""

    broker_props: dict[str, str] = {}

    def __init__(self, args):
        self.args = args
        self.version = f"franz-go {FRANZ_GO}"
        self.binary = args.cache / f"kgo-{FRANZ_GO}.test"
        self.module = Path()

    def prepare(self) -> None:
        go = shutil.which("go")
        if go is None:
            raise SuiteError("go: not installed")
        log = self.args.cache / f"franz-go-{FRANZ_GO}-build.log"
        proc = subprocess.run([go, "mod", "download", "-json",
                               f"github.com/twmb/franz-go@{FRANZ_GO}"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SuiteError(f"go mod download github.com/twmb/franz-go@{FRANZ_GO}: "
                             f"{proc.stderr.strip() or proc.stdout.strip()}")
        self.module = module = Path(json.loads(proc.stdout)["Dir"])
        if self.binary.exists():
            return
        print(f"[kafka-suites] building franz-go's kgo tests (log {log})", flush=True)
        # the module cache is read-only; `go test -c` only reads it
        run([go, "test", "-c", "-o", str(self.binary), "./pkg/kgo"], cwd=module, log=log)

    def broker_tests(self) -> list[str]:
        """Tests that reach the broker: those whose body calls, directly or through the
        test files' helpers, the helpers that dial KGO_SEEDS (the rest are unit tests)."""
        bodies: dict[str, str] = {}
        for path in sorted((self.module / "pkg" / "kgo").glob("*_test.go")):
            text = path.read_text()
            starts = [m.start() for m in re.finditer(r"^func ", text, re.M)] + [len(text)]
            for a, b in zip(starts, starts[1:]):
                m = re.match(r"func (?:\([^)]*\) )?(\w+)", text[a:b])
                if m:
                    bodies[m.group(1)] = bodies.get(m.group(1), "") + text[a:b]
        reach = {"getSeedBrokers"}
        while True:
            more = {name for name, body in bodies.items() if name not in reach
                    and any(re.search(rf"\b{r}\(", body) for r in reach)}
            if not more:
                break
            reach |= more
        return sorted(n for n in reach if n.startswith("Test"))

    def run(self, test: str, address: str, run_dir: Path) -> Result:
        work = run_dir / "franz-go"
        work.mkdir(exist_ok=True)
        log = work / f"{test.replace('/', '--')}.log"
        env = dict(os.environ, KGO_SEEDS=address, KGO_TEST_RF="1",
                   KGO_TEST_RECORDS=str(self.args.records), KGO_LOG_LEVEL="info")
        pattern = "/".join(f"^{part}$" for part in test.split("/"))
        code, seconds = run_test([str(self.binary), "-test.run", pattern, "-test.v",
                                  "-test.count", "1",
                                  "-test.timeout", f"{self.args.timeout:.0f}s"],
                                 work, env, log, self.args.timeout + 30)
        text = log.read_text(errors="replace")
        if code is None:
            return Result("franz-go", test, "FAILED", seconds,
                          f"killed after {self.args.timeout:.0f}s", log)
        name = re.escape(test)
        # the first error or skip reason a test reported (its clean-up's notes left out)
        errors = [e for e in re.findall(r"^\s+\w+_test\.go:\d+: (.*)$", text, re.M)
                  if not re.match(r"FAILED TESTING|.* completed in |deleting ", e)]
        if re.search(rf"^\s*--- SKIP: {name} ", text, re.M):
            return Result("franz-go", test, "SKIPPED", seconds,
                          errors[0] if errors else "", log)
        if code == 0 and re.search(rf"^\s*--- PASS: {name} ", text, re.M):
            return Result("franz-go", test, "PASSED", seconds, log=log)
        panic = re.search(r"^panic: (.*)$", text, re.M)
        detail = panic.group(1) if panic else (errors[0] if errors
                                                else f"exit status {code}")
        return Result("franz-go", test, "FAILED", seconds, detail[:200], log)


def _last_fail(log: Path, test: str) -> str:
    """Why librdkafka's runner failed or skipped ``test``: the first failure it reported
    (its message and where), else its summary line's reason."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    m = re.search(r'^### Test "([^"]+)" failed at (\S+?)(?:\(\))? at .*###\n(.*)$', text, re.M)
    if m:
        return f"{m.group(3).strip()} ({m.group(2)})"[:200]
    m = re.search(rf"^\|[ \t]*{test}[ \t]*\|[ \t]*\w+[ \t]*\|[ \t]*[\d.]+s[ \t]*\|[ \t]*(.*)$",
                  text, re.M)
    return m.group(1).strip()[:200] if m else ""

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("[kafka-suites] interrupted", file=sys.stderr)
        sys.exit(130)
