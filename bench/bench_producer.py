"""Producer throughput: records/s through ``send()`` and ``send_batch()`` beside the
broker's ingest of the same records as pre-built frames (same run, same broker).

A real broker process on a temporary local storage root; 100-byte values, acks=1, one
partition. The baseline sends frames encoded before the clock starts through a minimal
pipelined connection: the rate a client could reach if building frames cost nothing.
``send()`` is one Python call per record (targets >= 300k records/s); ``send_batch()``
takes a pyarrow Table (target >= 2M records/s). Prints rates and ratios to the baseline.

    .venv/bin/python bench/bench_producer.py [--records 1000000] [--rounds 3] [--profile]

``--profile`` runs one send() round under pyinstrument and prints where the time goes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparklog.clients.admin import Admin  # noqa: E402
from sparklog.clients.producer import Producer  # noqa: E402
from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.protocol import ApiKey, Connection, raise_for_error  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process helper)

VALUE = b"v" * 100
FRAME_RECORDS = 8000


def baseline(address: str, topic: str, records: int) -> float:
    """Seconds to produce ``records`` 100-byte records as pre-built frames."""
    frame = encode_frame(raw_batch([VALUE] * FRAME_RECORDS))
    count = max(1, records // FRAME_RECORDS)
    body = {"acks": 1, "topics": [{"name": topic, "partitions": [
        {"partition": 0, "records": frame}]}]}
    with Connection(address, client_id="bench-baseline") as conn:
        start = time.perf_counter()
        sent = done = 0
        while done < count:
            while sent < count and sent - done < 8:
                conn.send(ApiKey.PRODUCE, body)
                sent += 1
            raise_for_error(conn.receive()["topics"][0]["partitions"][0])
            done += 1
        return time.perf_counter() - start


def bench_send(address: str, topic: str, records: int, desc: str) -> float:
    """(wall, client CPU) seconds to send ``records`` records one send() call each, then
    flush (CPU: every thread of this process; the broker is another process)."""
    with Producer(address, acks=1, linger_ms=5, batch_size=256 * 1024) as producer:
        producer.send(topic, VALUE).get(10)  # metadata and connection ready
        send = producer.send
        step = max(1, records // 20)
        bar = tqdm(total=records, desc=desc, unit="rec", file=sys.stderr, leave=False,
                   unit_scale=True)
        start, cpu = time.perf_counter(), time.process_time()
        for chunk in range(0, records, step):
            for _ in range(min(step, records - chunk)):
                send(topic, VALUE)
            bar.update(min(step, records - chunk))
        producer.flush()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        bar.close()
    return elapsed, cpu


def bench_send_batch(address: str, topic: str, records: int, desc: str) -> float:
    """(wall, client CPU) seconds to send ``records`` records as pyarrow Tables of 100k
    rows."""
    rows = 100_000
    table = pa.table({"value": pa.array([VALUE] * rows, pa.binary())})
    with Producer(address, acks=1, buffer_memory=64 * 1024 * 1024,
                  max_request_size=4 * 1024 * 1024) as producer:
        producer.send_batch(topic, table.slice(0, 10)).get(10)
        bar = tqdm(total=records, desc=desc, unit="rec", file=sys.stderr, leave=False,
                   unit_scale=True)
        start, cpu = time.perf_counter(), time.process_time()
        futures = []
        for chunk in range(0, records, rows):
            futures.append(producer.send_batch(topic, table.slice(0, min(rows, records - chunk))))
            bar.update(min(rows, records - chunk))
        for f in futures:
            f.get(60)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        bar.close()
    return elapsed, cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per send() round (send_batch rounds send 5x)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true",
                        help="profile one send() round with pyinstrument")
    args = parser.parse_args(argv)
    n = args.records
    times = {"baseline": [], "send": [], "send_batch": []}
    cpus = {"send": [], "send_batch": []}
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        storage = Path(tmp, "log")
        with BrokerProcess(storage.as_uri(), log_path=Path(tmp, "broker.log"),
                           log_level="WARNING") as broker, Admin(broker.address) as admin:
            admin.create_topic("bench", 1)
            if args.profile:
                from pyinstrument import Profiler

                profiler = Profiler()
                profiler.start()
                bench_send(broker.address, "bench", n, "profiled send()")
                profiler.stop()
                print(profiler.output_text(unicode=False, color=False, show_all=False))
            for r in range(args.rounds):
                times["baseline"].append(baseline(broker.address, "bench", 5 * n))
                for name, fn, count in (("send", bench_send, n),
                                        ("send_batch", bench_send_batch, 5 * n)):
                    wall, cpu = fn(broker.address, "bench", count, f"{name}() round {r + 1}")
                    times[name].append(wall)
                    cpus[name].append(cpu / count * 1e6)
    base = 5 * n // FRAME_RECORDS * FRAME_RECORDS / min(times["baseline"])
    send = n / min(times["send"])
    batch = 5 * n / min(times["send_batch"])
    print(f"100-byte values, acks=1, one partition, local storage, best of {args.rounds}")
    print(f"baseline (pre-built frames) : {base / 1e6:8.2f} M records/s")
    print(f"send()                      : {send / 1e6:8.2f} M records/s  "
          f"({send / base:6.1%} of baseline; target >= 0.30 M); client CPU "
          f"{min(cpus['send']):.2f} us/record")
    print(f"send_batch()                : {batch / 1e6:8.2f} M records/s  "
          f"({batch / base:6.1%} of baseline; target >= 2.00 M); client CPU "
          f"{min(cpus['send_batch']):.3f} us/record")
    print(f"(machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: the "
          "broker and this client share them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
