"""Producer throughput and acknowledgement latency over SASL_SSL beside PLAINTEXT, in
the same run against the same broker process.

One broker process on a temporary local storage root with two listeners: PLAINTEXT
and SASL_SSL (TLS with a certificate made for the run, SCRAM-SHA-512), the ACL
authorizer on (the SASL user has Write on its topic; the PLAINTEXT principal is a super
user).

One producer per protocol (acks=1, linger 5 ms, 256 KiB batches), both connected and
authenticated before anything is timed. After a warm-up, ``--rounds`` rounds: in each,
the two producers take turns sending ``--chunk`` 100-byte records and flushing, until
each has sent ``--records``; who goes first alternates chunk by chunk, so a burst of
load from other jobs on a shared machine hits both protocols alike. A round's ratio is
SASL_SSL's records/s over PLAINTEXT's; the result is the median of the rounds' ratios.
The CPU seconds of the client and the broker spent on each protocol are printed too:
their ratio is what the throughput ratio would be on a machine with no other load.
Then acknowledgement latency (``send()`` to callback of records paced at ``--rate``,
p50/p99), alternating protocols per round. Target: SASL_SSL throughput >= 0.8x
PLAINTEXT's.

    .venv/bin/python bench/bench_security.py [--records 1000000] [--chunk 50000] \
        [--rounds 7] [--rate 2000] [--seconds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_latency import percentiles  # noqa: E402

from sparklog.clients.admin import Admin  # noqa: E402
from sparklog.clients.producer import Producer  # noqa: E402
from sparklog.security.acl import AclBinding  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' helpers)
from tests.support.processes import cpu_seconds  # noqa: E402
from tests.support.tlscerts import make_pki  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

VALUE = b"v" * 100


class SecuredBroker(BrokerProcess):
    """A broker process started from a properties file (several listeners) instead of
    ``--listen``; :meth:`listener` is a listener's address from its stdout."""

    def __init__(self, storage_uri: str, config: Path, **kwargs):
        super().__init__(storage_uri, **kwargs)
        self.config = config

    def command(self) -> list[str]:
        return [sys.executable, "-m", "sparklog.cli.main", "--log-level", "WARNING",
                "broker", "start", "--storage", self.storage_uri,
                "--config", str(self.config)]

    def listener(self, name: str) -> str:
        prefix = f"listener {name} "
        line = wait_until(lambda: next((s for s in self._lines if s.startswith(prefix)),
                                       None), 30, f"the {name} listener's address")
        return line.rsplit(" ", 1)[1].strip()


def interleaved_round(producers: dict, records: int, chunk: int, broker_pid: int,
                      first: int) -> dict:
    """One round: ``records`` send() calls per protocol in chunks of ``chunk``, each
    chunk flushed, the protocols taking turns chunk by chunk (who starts alternating):
    a burst of load from other jobs hits both alike. Returns per protocol (records/s,
    client CPU s, broker CPU s)."""
    names = list(producers)
    wall = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    broker = dict.fromkeys(names, 0.0)
    for i in range(max(1, records // chunk)):
        order = names if (i + first) % 2 == 0 else names[::-1]
        for name in order:
            p, topic = producers[name]
            start, c0, b0 = time.perf_counter(), time.process_time(), cpu_seconds(broker_pid)
            for _ in range(chunk):
                p.send(topic, VALUE)
            p.flush()
            wall[name] += time.perf_counter() - start
            cpu[name] += time.process_time() - c0
            broker[name] += cpu_seconds(broker_pid) - b0
    sent = max(1, records // chunk) * chunk
    return {n: (sent / wall[n], cpu[n], broker[n]) for n in names}


def ack_latencies(address: str, topic: str, rate: int, seconds: float,
                  security: dict) -> list[float]:
    """send() -> acknowledgement times of records paced at ``rate`` per second."""
    out: list[float] = []
    with Producer(address, acks=1, linger_ms=0, **security) as p:
        p.send(topic, VALUE).get(30)
        count = int(rate * seconds)
        start = time.perf_counter()
        for i in range(count):
            due = start + i / rate
            while time.perf_counter() < due:
                pass
            sent = time.perf_counter()
            p.send(topic, VALUE).add_callback(
                lambda _md, sent=sent: out.append(time.perf_counter() - sent))
        p.flush()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records per protocol in one round")
    ap.add_argument("--chunk", type=int, default=50_000,
                    help="records sent (and flushed) per turn")
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the latency run")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of a latency run")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-security-") as tmp:
        tmp = Path(tmp)
        pki = make_pki(tmp / "pki")
        (tmp / "log").mkdir()
        config = tmp / "broker.properties"
        config.write_text(
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0\n"
            f"ssl.keystore.location={pki.server}\n"
            "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
            "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n"
            "super.users=User:ANONYMOUS\n")
        with SecuredBroker((tmp / "log").as_uri(), config, log_path=tmp / "broker.log") as b:
            plain, secure = b.address, b.listener("SASL_SSL")
            with Admin(plain) as admin:
                admin.alter_user_scram_credentials([("bench", "SCRAM-SHA-512", "bench-pw")])
                for topic in ("plain", "secure"):
                    admin.create_topic(topic, 1)
                admin.create_acls([AclBinding("User:bench", "*", "Write", "Allow", "Topic",
                                              "secure")])
            runs = {"PLAINTEXT": (plain, "plain", {}),
                    "SASL_SSL": (secure, "secure", {
                        "security_protocol": "SASL_SSL", "ssl_cafile": str(pki.ca),
                        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "bench",
                        "sasl_plain_password": "bench-pw"})}
            rates = {name: [] for name in runs}
            lat = {name: [] for name in runs}
            cpus = {name: [] for name in runs}
            ratios = []
            with contextlib.ExitStack() as stack:
                producers = {}
                for name, (address, topic, security) in runs.items():
                    p = stack.enter_context(Producer(address, acks=1, linger_ms=5,
                                                     batch_size=256 * 1024, **security))
                    p.send(topic, VALUE).get(30)  # connected, authenticated, metadata
                    producers[name] = (p, topic)
                interleaved_round(producers, args.chunk * 4, args.chunk, b.pid, 0)  # warm-up
                for r in range(args.rounds):
                    got = interleaved_round(producers, args.records, args.chunk, b.pid, r)
                    for name, (rate, cpu, broker_cpu) in got.items():
                        rates[name].append(rate)
                        cpus[name].append((cpu, broker_cpu))
                    ratios.append(rates["SASL_SSL"][-1] / rates["PLAINTEXT"][-1])
                    print(f"round {r + 1}: PLAINTEXT {rates['PLAINTEXT'][-1]:,.0f}/s, "
                          f"SASL_SSL {rates['SASL_SSL'][-1]:,.0f}/s, ratio {ratios[-1]:.2f}",
                          flush=True)
            order = list(runs)
            for r in range(args.rounds):
                if args.seconds > 0:
                    for name in (order if r % 2 == 0 else order[::-1]):
                        address, topic, security = runs[name]
                        lat[name] += ack_latencies(address, topic, args.rate, args.seconds,
                                                   security)
    print(f"{'protocol':<10} {'records/s (median)':>20} {'ack p50 ms':>11} {'ack p99 ms':>11}"
          f" {'client CPU s':>13} {'broker CPU s':>13}")
    for name in runs:
        p = percentiles(lat[name]) if lat[name] else {"p50": float("nan"),
                                                       "p99": float("nan")}
        cpu = statistics.median(c for c, _ in cpus[name])
        broker_cpu = statistics.median(c for _, c in cpus[name])
        print(f"{name:<10} {statistics.median(rates[name]):>20,.0f} {p['p50']:>11.2f} "
              f"{p['p99']:>11.2f} {cpu:>13.2f} {broker_cpu:>13.2f}")
    ratio = statistics.median(ratios)
    print(f"SASL_SSL / PLAINTEXT throughput, median of {len(ratios)} rounds' ratios: "
          f"{ratio:.2f}x (rounds: {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.80x): "
          f"{'met' if ratio >= 0.8 else 'not met'}")
    # what other jobs' load cannot skew: the CPU seconds (client + broker) per record
    cost = {name: statistics.median(c + b for c, b in cpus[name]) for name in runs}
    print(f"CPU (client + broker) per run: PLAINTEXT {cost['PLAINTEXT']:.2f} s, SASL_SSL "
          f"{cost['SASL_SSL']:.2f} s: CPU-bound throughput ratio "
          f"{cost['PLAINTEXT'] / cost['SASL_SSL']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
