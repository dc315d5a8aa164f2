"""Producer throughput and acknowledgement latency over SASL_SSL beside PLAINTEXT, in
the same run against the same broker process.

One broker process on a temporary local storage root with two listeners: PLAINTEXT
and SASL_SSL (TLS with a certificate made for the run, SCRAM-SHA-512), the ACL
authorizer on (the SASL user has Write on its topic; the PLAINTEXT principal is a super
user). For each protocol, alternately (``--rounds``): ``send()`` throughput of 100-byte
records (acks=1, linger 5 ms, records/s), then ``send()`` -> acknowledgement latency at
a paced ``--rate`` (p50/p99). Target: SASL_SSL throughput >= 0.8x PLAINTEXT's.

    .venv/bin/python bench/bench_security.py [--records 200000] [--rate 2000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench_latency import percentiles  # noqa: E402
from brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process helper)
from tlscerts import make_pki  # noqa: E402  (the tests' certificate helper)
from waiting import wait_until  # noqa: E402

from sparklog.admin import Admin  # noqa: E402
from sparklog.security.acl import AclBinding  # noqa: E402
from sparklog.writer.producer import Producer  # noqa: E402

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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(address: str, topic: str, records: int, security: dict,
               broker_pid: int) -> tuple[float, float, float]:
    """Records/s of ``records`` send() calls and a flush, and the CPU seconds the client
    and the broker spent on them."""
    with Producer(address, acks=1, linger_ms=5, batch_size=256 * 1024, **security) as p:
        p.send(topic, VALUE).get(30)  # connection, authentication and metadata ready
        start, cpu, broker_cpu = time.perf_counter(), time.process_time(), \
            cpu_seconds(broker_pid)
        for _ in range(records):
            p.send(topic, VALUE)
        p.flush()
        return (records / (time.perf_counter() - start), time.process_time() - cpu,
                cpu_seconds(broker_pid) - broker_cpu)


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
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the latency run")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of a latency run")
    ap.add_argument("--rounds", type=int, default=2)
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
            for _ in range(args.rounds):
                for name, (address, topic, security) in runs.items():
                    rate, cpu, broker_cpu = throughput(address, topic, args.records,
                                                       security, b.pid)
                    rates[name].append(rate)
                    cpus[name].append((cpu, broker_cpu))
                    lat[name] += ack_latencies(address, topic, args.rate, args.seconds,
                                               security)
    print(f"{'protocol':<10} {'records/s (median)':>20} {'ack p50 ms':>11} {'ack p99 ms':>11}"
          f" {'client CPU s':>13} {'broker CPU s':>13}")
    for name in runs:
        p = percentiles(lat[name])
        cpu = statistics.median(c for c, _ in cpus[name])
        broker_cpu = statistics.median(c for _, c in cpus[name])
        print(f"{name:<10} {statistics.median(rates[name]):>20,.0f} {p['p50']:>11.2f} "
              f"{p['p99']:>11.2f} {cpu:>13.2f} {broker_cpu:>13.2f}")
    ratio = statistics.median(rates["SASL_SSL"]) / statistics.median(rates["PLAINTEXT"])
    print(f"SASL_SSL / PLAINTEXT throughput: {ratio:.2f}x (target >= 0.80x): "
          f"{'met' if ratio >= 0.8 else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
