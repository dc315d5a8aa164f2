"""Before/after A/B of the produce->consume latency, the two commits alternating in one run.

    .venv/bin/python bench/ab_latency.py --before COMMIT [--after COMMIT] [--rounds 3]
        [--rate 10000] [--seconds 5] [--parts latency,stages,peers] [--peers-rounds 3]

Each side is a checkout: ``--before`` (and ``--after`` if given) extracted with ``git
archive`` into a temporary directory; without ``--after``, this working tree as it is.
Every round runs both sides one after the other (the before side first in odd rounds,
the after side first in even ones), each with this ``.venv``'s Python and its own code:

* ``latency``: the side's ``bench/bench_latency.py --rate R --seconds S --linger-ms 1``
  (its broker process and its clients): p50 and p99 of produce->consume, and the bare
  produce round trip's p50;
* ``stages``: this checkout's ``bench/bench_latency_stages.py`` (the client tracer and
  the broker's, bench/pathtrace.py) with ``--broker-source`` = the side: the clients
  are this checkout's, the broker the side's; its full output is printed (where each
  record's time goes, the event-loop turns of the broker's path);
* ``peers``: the side's ``python -m bench.peers --only latency --rounds N`` (Kafka and
  confluent-kafka beside it): sparklog's p50/p99/p99.9 at 1k, 10k and 50k records/s
  and their ratio to Kafka's.

At the end, for each figure: each side's per-round values and median, and after ÷
before (the median of the per-round ratios; below 1 is better: these are latencies).
Progress and the runs' own logs go to stderr. Timing: a round of all three parts takes
~10 minutes (the peers part ~8 of them), so the default 3 rounds ~30 minutes; run it on
an idle machine (a loaded one measures its own stalls: docs/performance.md, "Latency").
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("latency", "stages", "peers")
_NUMBER = r"([\d,]+(?:\.\d+)?)"


def say(message: str) -> None:
    """Progress on stderr."""
    print(f"[ab {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def extract(commit: str, into: Path) -> Path:
    """``commit`` of this repository as plain files in ``into``."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run(cmd: list[str], cwd: Path) -> str:
    """Run ``cmd`` in ``cwd``; its stdout (its stderr passes through); a failure names it."""
    say(f"  {' '.join(cmd[1:])}  (in {cwd.name})")
    done = subprocess.run(cmd, cwd=str(cwd), stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} in {cwd} exited with {done.returncode}:\n"
                           f"{done.stdout}")
    return done.stdout


def parse_latency(out: str) -> dict:
    """Figures of ``bench_latency.py``'s report."""
    got = {}
    rtt = re.search(r"baseline produce round trip\s*: p50\s+" + _NUMBER, out)
    lat = re.search(r"produce->consume linger.ms=\S+\s*: p50\s+" + _NUMBER
                    + r" ms\s+p99\s+" + _NUMBER, out)
    if rtt:
        got["round trip p50"] = float(rtt.group(1))
    if lat:
        got["p50"], got["p99"] = float(lat.group(1)), float(lat.group(2))
    return got


def parse_stages(out: str) -> dict:
    """Figures of ``bench_latency_stages.py``'s report."""
    got = {}
    for name in ("drained", "written", "acked", "fetched", "returned"):
        m = re.search(rf"^\s+{name}\s+{_NUMBER} /\s+{_NUMBER}", out, re.M)
        if m:
            got[f"{name} p50"], got[f"{name} p99"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"through the broker .*?: (\d+) turn\(s\) of the loop, " + _NUMBER
                  + " / " + _NUMBER, out)
    if m:
        got["broker turns"] = float(m.group(1))
        got["broker p50"], got["broker p99"] = float(m.group(2)), float(m.group(3))
    m = re.search(r"broker process: " + _NUMBER + r" us of CPU per record, .* woken "
                  + _NUMBER + " times", out)
    if m:
        got["broker CPU us/record"] = float(m.group(1))
        got["broker loop wake-ups/record"] = float(m.group(2))
    for m in re.finditer(r"^\s+(\w+ \w+ -> \w+ \w+):\s+" + _NUMBER + " /", out, re.M):
        got[f"{m.group(1)} p50"] = float(m.group(2))
    return got


def parse_peers(out: str) -> dict:
    """sparklog's latency figures and their ratios to Kafka's from the peers table."""
    got = {}
    for m in re.finditer(r"^\| (latency \S+ at \S+ records/s) \| [^|]+ \| " + _NUMBER
                         + r" \| " + _NUMBER + r" \| [^|]+ \| ([\d.]+|nan) \|", out, re.M):
        got[m.group(1)] = float(m.group(2).replace(",", ""))
        got[f"{m.group(1)} / Kafka"] = float(m.group(4))
    return got


def report(part: str, figures: dict) -> None:
    """One block: each figure of ``part``, per side, with after ÷ before."""
    names = []
    for side in ("before", "after"):
        for rnd in figures[side]:
            names += [n for n in rnd if n not in names]
    if not names:
        print(f"\n{part}: no figures")
        return
    print(f"\n{part} (per round; median; after / before, median of the rounds' ratios):")
    for name in names:
        vals = {s: [r.get(name) for r in figures[s]] for s in ("before", "after")}
        ratios = [a / b for a, b in zip(vals["after"], vals["before"])
                  if a is not None and b]
        line = f"  {name:<38}"
        for s in ("before", "after"):
            have = [v for v in vals[s] if v is not None]
            med = f"{statistics.median(have):.3g}" if have else "-"
            line += f" {s} {'/'.join(f'{v:.3g}' for v in have) or '-'} (median {med});"
        line += f" after/before {statistics.median(ratios):.2f}" if ratios else ""
        print(line)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the commit before the change")
    parser.add_argument("--after", help="the commit after it (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--peers-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}: use {', '.join(PARTS)}")
    py = sys.executable
    figures = {p: {"before": [], "after": []} for p in parts}
    with tempfile.TemporaryDirectory(prefix="sparklog-ab-") as tmp:
        sides = {"before": extract(args.before, Path(tmp, "before")),
                 "after": extract(args.after, Path(tmp, "after")) if args.after else ROOT}
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for side in order:
                src = sides[side]
                say(f"round {r + 1}/{args.rounds}, {side}; load average "
                    f"{os.getloadavg()[0]:.1f}")
                common = ["--rate", str(args.rate), "--seconds", f"{args.seconds:g}",
                          "--linger-ms", "1"]
                if "latency" in parts:
                    out = run([py, str(src / "bench/bench_latency.py"), *common], src)
                    figures["latency"][side].append(parse_latency(out))
                if "stages" in parts:
                    out = run([py, str(ROOT / "bench/bench_latency_stages.py"), *common,
                               "--broker-source", str(src)], ROOT)
                    print(f"--- stages, round {r + 1}, {side} broker ---\n{out}", flush=True)
                    figures["stages"][side].append(parse_stages(out))
                if "peers" in parts:
                    out = run([py, "-m", "bench.peers", "--only", "latency", "--rounds",
                               str(args.peers_rounds)], src)
                    figures["peers"][side].append(parse_peers(out))
    print(f"\nA/B: before {args.before}, after {args.after or 'this working tree'}; "
          f"{args.rounds} round(s), {args.rate} records/s for {args.seconds:g} s (peers: "
          f"its own rates); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for part in parts:
        report(part, figures[part])
    return 0


if __name__ == "__main__":
    sys.exit(main())
