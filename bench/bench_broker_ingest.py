"""Broker ingest rate beside a raw sequential write of the same bytes (same run).

A real broker process (``sparklog broker start``) on a temporary local storage root;
a simple pipelined client sends pre-built frames (100-byte values, acks=1, one
partition) with several requests in flight. The baseline writes the same request-sized
chunks to a file with ``os.write``. Prints both rates and their ratio (target >= 50%).

    .venv/bin/python bench/bench_broker_ingest.py [--mb 256] [--rounds 5]
        [--records-per-frame 8000] [--frames-per-request 1] [--in-flight 8]
        [--regime page-cache|durable|both]

Two regimes are measured, each against its own baseline:

* page cache: nothing is synced (acks=1 means visible, not durable, as the broker's
  hflush); the raw write is then a memory copy, and the broker pays its CPU per byte
  (receive, CRC, write) against that copy alone;
* durable: each round ends when its bytes are on the device, ``fdatasync`` for the raw
  write and an acks=all last request for the broker (it syncs the segment and waits for
  the rolled ones), as ``dd conv=fdatasync`` measures a disk's sequential write rate.
  The raw write and the TCP loop start writeback every 8 MiB as the broker's local
  storage does (``sync_behind_writes``), so all three overlap writing with the device.

Rounds alternate (raw, TCP loop, broker) so that all see the same machine load, and
each starts after an ``os.sync()`` so that none pays for the writeback of an earlier one
(the broker's log keeps its bytes, the baselines delete theirs); the best round of each
is compared (and the median of the per-round ratios is printed too). The TCP loop shows
what receiving costs here: another process receives the same bytes over loopback TCP
(``recv_into``, no protocol, no CRC) and ``os.write``s them from one thread. In the
page-cache regime it is the floor of any TCP ingest; in the durable one the broker,
which receives and writes on two threads, can beat it.

The default request, one frame of about 1 MiB, is what ``Producer.send()`` sends at
its default max.request.size (it merges a partition's batches into one frame);
``--frames-per-request 64 --records-per-frame 150`` sends many small frames per request.
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

from sparklog.format.frame import encode_frame, raw_batch  # noqa: E402
from sparklog.protocol import ApiKey, Connection, raise_for_error  # noqa: E402
from sparklog.storage.local import DEFAULT_SYNC_BEHIND_WRITES as SYNC_BEHIND  # noqa: E402
from sparklog.storage.posix import WriteBehind  # noqa: E402
from tests.support.brokerproc import BrokerProcess  # noqa: E402  (the tests' broker process helper)


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


class _Writer:
    """os.write of sequential chunks; when durable, writeback is started every
    SYNC_BEHIND bytes as the broker's storage does, and ``finish`` fdatasyncs."""

    def __init__(self, fd: int, durable: bool):
        self.fd, self.durable = fd, durable
        self.written = 0
        self.behind = WriteBehind(SYNC_BEHIND if durable else 0)

    def write(self, data) -> None:
        self.written += os.write(self.fd, data)
        self.behind.written(self.fd, self.written)

    def finish(self) -> None:
        if self.durable:
            os.fdatasync(self.fd)


def raw_write(directory: str, payloads, count: int, durable: bool = False) -> float:
    """Seconds to write ``count`` payloads sequentially with os.write (then make them
    durable when ``durable``)."""
    path = os.path.join(directory, "raw.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    writer = _Writer(fd, durable)
    start = time.perf_counter()
    try:
        for i in range(count):
            writer.write(payloads[i % len(payloads)])
        writer.finish()
    finally:
        elapsed = time.perf_counter() - start
        os.close(fd)
        os.unlink(path)
    return elapsed


def _floor_server(sock: socket.socket, path: str, total: int, chunk: int,
                  durable: bool) -> None:
    """Receive ``total`` bytes and append them to ``path`` (then fdatasync when
    ``durable``); answer one byte at the end."""
    conn, _ = sock.accept()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    buf = memoryview(bytearray(chunk))
    writer = _Writer(fd, durable)
    got = 0
    while got < total:
        n = conn.recv_into(buf)
        if not n:
            break
        writer.write(buf[:n])
        got += n
    writer.finish()
    os.close(fd)
    os.unlink(path)
    conn.sendall(b"k")
    conn.close()


def tcp_floor(directory: str, payloads, count: int, durable: bool = False) -> float:
    """Seconds for another process to receive ``count`` payloads over loopback TCP and
    write them with os.write, from one thread."""
    total = sum(len(payloads[i % len(payloads)]) for i in range(count))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    server = multiprocessing.get_context("fork").Process(
        target=_floor_server, args=(sock, os.path.join(directory, "floor.bin"), total,
                                    len(payloads[0]), durable))
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


def broker_ingest(conn: Connection, payloads, count: int, in_flight: int, desc: str,
                  durable: bool = False, *, topic: str = "ingest", acks: int = 1):
    """Seconds to produce ``count`` requests to partition 0 of ``topic`` with
    ``in_flight`` outstanding, with ``acks`` (the last one acks=all when ``durable``)."""

    def body(i):
        return {"acks": -1 if durable and i == count - 1 else acks, "topics": [
            {"name": topic, "partitions": [
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
        raise_for_error(res["topics"][0]["partitions"][0], f"{topic}-0")
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


def report(regime: str, total: int, records: int, times: dict) -> None:
    """Print one regime's rates and ratios."""
    raw, floor, broker = times["raw"], times["floor"], times["broker"]
    raw_rate, floor_rate, broker_rate = (total / min(t) / 2**20 for t in (raw, floor, broker))
    median = sorted(r / b for r, b in zip(raw, broker))[len(raw) // 2]
    print(f"{regime}:")
    print(f"  raw sequential write : {raw_rate:9.1f} MiB/s  (best of {len(raw)}: "
          f"{min(raw):.2f} s)")
    print(f"  TCP loop             : {floor_rate:9.1f} MiB/s  (best of {len(floor)}: "
          f"{min(floor):.2f} s; {floor_rate / raw_rate:.0%} of the raw write: recv_into + "
          "os.write in one thread, no protocol)")
    print(f"  broker ingest        : {broker_rate:9.1f} MiB/s  (best of {len(broker)}: "
          f"{min(broker):.2f} s, {records / min(broker) / 1e6:.2f} M records/s)")
    print(f"  ratio broker/raw     : {broker_rate / raw_rate:9.1%}  best vs best; median of "
          f"rounds {median:.1%}  (target >= 50%); {broker_rate / floor_rate:.0%} of the TCP loop")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=256, help="MiB of frames per round")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating raw/TCP loop/broker rounds per regime; the best of "
                             "each is compared")
    parser.add_argument("--records-per-frame", type=int, default=8000)
    parser.add_argument("--frames-per-request", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--regime", choices=["page-cache", "durable", "both"], default="both")
    parser.add_argument("--extra-arg", action="append", default=[],
                        help="extra broker command-line argument (repeatable)")
    args = parser.parse_args(argv)
    payloads = build_requests(args.records_per_frame, args.frames_per_request)
    size = len(payloads[0])
    count = max(1, args.mb * 1024 * 1024 // size)
    total = sum(len(payloads[i % len(payloads)]) for i in range(count))
    records = count * args.records_per_frame * args.frames_per_request
    regimes = ["page cache", "durable"] if args.regime == "both" else \
        [args.regime.replace("-", " ")]
    print(f"{count} requests of {size / 1024:.0f} KiB ({args.frames_per_request} frame(s) of "
          f"{args.records_per_frame} 100-byte records): {total / 2**20:.0f} MiB and "
          f"{records} records per round, {args.in_flight} in flight, acks=1, one partition, "
          f"{args.rounds} round(s) per regime")
    times = {r: {"raw": [], "floor": [], "broker": []} for r in regimes}
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        storage = Path(tmp, "log")
        storage.mkdir()
        broker = BrokerProcess(storage.as_uri(), args.extra_arg,
                               log_path=Path(tmp, "broker.log"), log_level="WARNING")
        with broker, Connection(broker.address, client_id="bench") as conn:
            conn.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "ingest",
                                                             "num_partitions": 1}]})
            for r in range(args.rounds):
                for regime in regimes:
                    durable = regime == "durable"
                    t = times[regime]
                    os.sync()  # each round starts with no dirty pages (earlier rounds'
                    t["raw"].append(raw_write(tmp, payloads, count, durable))
                    os.sync()  # writeback would otherwise fall on the next one)
                    t["floor"].append(tcp_floor(tmp, payloads, count, durable))
                    os.sync()
                    t["broker"].append(broker_ingest(conn, payloads, count, args.in_flight,
                                                     f"{regime} round {r + 1}", durable))
            hw = high_watermark(conn)
    rounds = args.rounds * len(regimes)
    assert hw == records * rounds, f"high watermark {hw} != {records * rounds}"
    for regime in regimes:
        report(regime, total, records, times[regime])
    return 0


if __name__ == "__main__":
    sys.exit(main())
