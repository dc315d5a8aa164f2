"""Broker ingest rate beside a raw sequential write of the same bytes (same run).

A real broker process (``sparklog broker start``) on a temporary local storage root;
a simple pipelined client sends pre-built frames (100-byte values, acks=1, one
partition) with several requests in flight. The baseline writes the same request-sized
chunks to a file with ``os.write`` and flushes nothing more (acks=1 means visible, not
durable, as the broker's hflush). Prints both rates and their ratio (target >= 50%).

    .venv/bin/python bench/bench_broker_ingest.py [--mb 256] [--rounds 3]
        [--records-per-frame 8000] [--frames-per-request 1] [--in-flight 8]

Raw and broker rounds alternate so that both see the same machine load; the best round
of each is compared (and the median of the per-round ratios is printed too). A third
figure, the floor, is what any TCP ingest costs here: another process receives the same
bytes over loopback TCP (``recv_into``, no protocol, no CRC) and ``os.write``s them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process helper)
from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.protocol import ApiKey, Connection, raise_for_error  # noqa: E402


def build_requests(records_per_frame: int, frames_per_request: int, distinct: int = 4):
    """A few distinct request payloads (concatenated frames) of 100-byte values."""
    payloads = []
    for d in range(distinct):
        frames = []
        for f in range(frames_per_request):
            values = [(b"%08d-%04d-%04d-" % (i, d, f)).ljust(100, b"v")
                      for i in range(records_per_frame)]
            frames.append(encode_frame(raw_batch(values)))
        payloads.append(b"".join(frames))
    return payloads


def raw_write(directory: str, payloads, count: int) -> float:
    """Seconds to write ``count`` payloads sequentially with os.write."""
    path = os.path.join(directory, "raw.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    start = time.perf_counter()
    try:
        for i in range(count):
            os.write(fd, payloads[i % len(payloads)])
    finally:
        elapsed = time.perf_counter() - start
        os.close(fd)
        os.unlink(path)
    return elapsed


def _floor_server(sock: socket.socket, path: str, total: int, chunk: int) -> None:
    """Receive ``total`` bytes and append them to ``path``; answer one byte at the end."""
    conn, _ = sock.accept()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    buf = memoryview(bytearray(chunk))
    got = 0
    while got < total:
        n = conn.recv_into(buf)
        if not n:
            break
        os.write(fd, buf[:n])
        got += n
    os.close(fd)
    os.unlink(path)
    conn.sendall(b"k")
    conn.close()


def tcp_floor(directory: str, payloads, count: int) -> float:
    """Seconds for another process to receive ``count`` payloads over loopback TCP and
    write them with os.write: the floor of any TCP ingest on this machine."""
    total = sum(len(payloads[i % len(payloads)]) for i in range(count))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    server = multiprocessing.get_context("fork").Process(
        target=_floor_server, args=(sock, os.path.join(directory, "floor.bin"), total,
                                    len(payloads[0])))
    server.start()
    with socket.create_connection(sock.getsockname()) as client:
        start = time.perf_counter()
        for i in range(count):
            client.sendall(payloads[i % len(payloads)])
        client.recv(1)
        elapsed = time.perf_counter() - start
    server.join()
    sock.close()
    return elapsed


def broker_ingest(conn: Connection, payloads, count: int, in_flight: int, desc: str):
    """Seconds to produce ``count`` requests with ``in_flight`` outstanding, acks=1."""

    def body(i):
        return {"acks": 1, "topics": [{"name": "ingest", "partitions": [
            {"partition": 0, "records": payloads[i % len(payloads)]}]}]}

    bar = tqdm(total=count, desc=desc, unit="req", file=sys.stderr, leave=False)
    start = time.perf_counter()
    sent = 0
    while sent < min(in_flight, count):
        conn.send(ApiKey.PRODUCE, body(sent))
        sent += 1
    done = 0
    while done < count:
        res = conn.receive()
        raise_for_error(res)
        raise_for_error(res["topics"][0]["partitions"][0], "ingest-0")
        done += 1
        bar.update()
        if sent < count:
            conn.send(ApiKey.PRODUCE, body(sent))
            sent += 1
    elapsed = time.perf_counter() - start
    bar.close()
    return elapsed


def high_watermark(conn: Connection) -> int:
    """The ingest topic's high watermark."""
    res = conn.request(ApiKey.LIST_OFFSETS, {"topics": [{"name": "ingest", "partitions": [
        {"partition": 0, "timestamp": -1}]}]})
    return res["topics"][0]["partitions"][0]["offset"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=256, help="MiB of frames per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating raw/broker rounds; the best of each is compared")
    parser.add_argument("--records-per-frame", type=int, default=8000)
    parser.add_argument("--frames-per-request", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--extra-arg", action="append", default=[],
                        help="extra broker command-line argument (repeatable)")
    args = parser.parse_args(argv)
    payloads = build_requests(args.records_per_frame, args.frames_per_request)
    size = len(payloads[0])
    count = max(1, args.mb * 1024 * 1024 // size)
    total = sum(len(payloads[i % len(payloads)]) for i in range(count))
    records = count * args.records_per_frame * args.frames_per_request
    print(f"{count} requests of {size / 1024:.0f} KiB ({args.frames_per_request} frame(s) of "
          f"{args.records_per_frame} 100-byte records): {total / 2**20:.0f} MiB and "
          f"{records} records per round, {args.in_flight} in flight, acks=1, one partition, "
          f"{args.rounds} round(s)")
    raw_times, broker_times, floor_times = [], [], []
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        storage = Path(tmp, "log")
        storage.mkdir()
        broker = BrokerProcess(storage.as_uri(), args.extra_arg,
                               log_path=Path(tmp, "broker.log"), log_level="WARNING")
        with broker, Connection(broker.address, client_id="bench") as conn:
            conn.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "ingest",
                                                             "num_partitions": 1}]})
            for r in range(args.rounds):
                raw_times.append(raw_write(tmp, payloads, count))
                floor_times.append(tcp_floor(tmp, payloads, count))
                broker_times.append(
                    broker_ingest(conn, payloads, count, args.in_flight, f"round {r + 1}"))
            hw = high_watermark(conn)
        assert hw == records * args.rounds, f"high watermark {hw} != {records * args.rounds}"
    raw_rate = total / min(raw_times) / 2**20
    broker_rate = total / min(broker_times) / 2**20
    median = sorted(r / b for r, b in zip(raw_times, broker_times))[len(raw_times) // 2]
    print(f"raw sequential write : {raw_rate:9.1f} MiB/s  (best of {args.rounds}: "
          f"{min(raw_times):.2f} s)")
    floor_rate = total / min(floor_times) / 2**20
    print(f"TCP receive + write  : {floor_rate:9.1f} MiB/s  (best of {args.rounds}: "
          f"{min(floor_times):.2f} s; {floor_rate / raw_rate:.0%} of the raw write: "
          "the floor of any TCP ingest here)")
    print(f"broker ingest        : {broker_rate:9.1f} MiB/s  (best of {args.rounds}: "
          f"{min(broker_times):.2f} s, {records / min(broker_times) / 1e6:.2f} M records/s)")
    print(f"ratio broker/raw     : {broker_rate / raw_rate:9.1%}  best vs best; median of "
          f"rounds {median:.1%}  (target >= 50%); {broker_rate / floor_rate:.0%} of the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
