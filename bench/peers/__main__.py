"""sparklog beside Apache Kafka and Spark's Kafka source, measured in the same run.

    .venv/bin/python -m bench.peers [--quick] [--rounds 3] [--only producer,consumer,...]

Starts a sparklog broker and a one-node Apache Kafka 4 (KRaft, from Maven Central's jars,
``sparklog classpath kafka``) with their data under one temporary directory (the same
disk), runs every row in alternating rounds (sparklog first in odd rounds, the peer first
in even ones) and prints a table: each row the median of the rounds' figures for both
and the median of the per-round ratios sparklog ÷ peer. Progress goes to stderr.

Rows (sections for ``--only``): ``producer`` (records/s from one Python process, 100-byte
values: sparklog ``send()`` vs confluent-kafka ``produce()`` and kafka-python ``send()``;
``send_batch()`` vs the best of them), ``consumer`` (records/s from one Python process),
``ingest`` (broker MB/s at acks=1 and acks=all: kafka-producer-perf-test against Kafka,
``flush.messages=1`` for the durable row, vs the same load against sparklog),
``latency`` (produce->consume p50/p99/p99.9 at 1k, 10k and 50k records/s),
``kafka-tools`` (Kafka's own clients, unchanged, against Kafka and against sparklog's
Kafka listener: kafka-producer-perf-test at acks=1 and acks=all, kafka-consumer-perf-test,
librdkafka produce()/consume() and its produce->consume latency at 10k records/s;
bench/peers/kafka_tools.py), ``spark``
(count, aggregate over value and filter on timestamp by format("sparklog") vs
format("kafka") vs Parquet; a capped AvailableNow backlog drain, both sources; each
sparklog row also by the log's storage root, ``path``, beside the broker; with
``--spark-hdfs`` also by ``path`` on HDFS beside Parquet on HDFS, and
``--spark-no-drains`` leaves out the drains),
``failover`` (outage of writes after SIGKILL of the partition leader: 3 KRaft nodes with
replication 3 vs 3 sparklog brokers on ZooKeeper, default settings; its own clusters,
one kill per round on each).
See docs/performance.md for figures and how to read them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from .systems import Systems, say  # sets sys.path for the tests' helpers first

# isort: split
from . import clients, failover, ingest, kafka_tools, spark_jobs  # noqa: E402

SECTIONS = ("producer", "consumer", "ingest", "latency", "kafka-tools", "spark", "failover")


def figure(x: float) -> str:
    """A figure for the table: whole numbers with separators from 100 up, else 3 digits."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


class Table:
    """Rows of (name, sparklog figures, peer figures, unit, higher-is-better)."""

    def __init__(self):
        self.rows = []

    def add(self, name: str, ours: list[float], theirs: list[float], unit: str,
            higher_better: bool = True, peer: str = "") -> None:
        """One row from per-round figures (paired by round)."""
        ratios = [a / b for a, b in zip(ours, theirs) if b]
        self.rows.append((name, statistics.median(ours), statistics.median(theirs), unit,
                          statistics.median(ratios) if ratios else float("nan"),
                          higher_better, peer))
        say(f"{name}: sparklog {figure(statistics.median(ours))} {unit}, {peer} "
            f"{figure(statistics.median(theirs))} {unit}")

    def render(self) -> str:
        """The table as Markdown."""
        out = ["| row | peer | sparklog | peer figure | unit | sparklog ÷ peer |",
               "| --- | --- | --- | --- | --- | --- |"]
        for name, ours, theirs, unit, ratio, higher, peer in self.rows:
            arrow = "" if higher else " (lower is better)"
            out.append(f"| {name} | {peer} | {figure(ours)} | {figure(theirs)} | {unit}{arrow} "
                       f"| {ratio:.2f} |")
        return "\n".join(out)


def alternate(rounds: int, ours, theirs) -> tuple[list, list]:
    """Run ``ours()`` and ``theirs()`` in ``rounds`` alternating rounds."""
    a, b = [], []
    for r in range(rounds):
        if r % 2 == 0:
            a.append(ours())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(ours())
    return a, b


def producer_rows(systems, table, rounds, n):
    """records/s of one Python process's producer (and the consumer's topic)."""
    systems.create_topic("produce", 1)
    per = lambda f, target: (lambda: n / f(target, "produce", n))  # noqa: E731
    say(f"producer: {n:,} records per run, {rounds} rounds")
    send, confluent = alternate(rounds, per(clients.sparklog_send, systems.sparklog),
                                per(clients.confluent_produce, systems.bootstrap))
    table.add("producer send() records/s", send, confluent, "records/s",
              peer="confluent-kafka produce()")
    send2, kpython = alternate(rounds, per(clients.sparklog_send, systems.sparklog),
                               per(clients.kafka_python_send, systems.bootstrap))
    table.add("producer send() records/s", send2, kpython, "records/s",
              peer="kafka-python send()")
    best = [max(c, k) for c, k in zip(confluent, kpython)]
    batch = [per(clients.sparklog_send_batch, systems.sparklog)() for _ in range(rounds)]
    table.add("producer send_batch() records/s", batch, best, "records/s",
              peer="best Python Kafka client")


def consumer_rows(systems, table, rounds, n):
    """records/s of one Python process's consumer over the producer rows' topic."""
    per = lambda f, target: (lambda: n / f(target, "produce", n))  # noqa: E731
    say(f"consumer: {n:,} records per run, {rounds} rounds")
    ours, confluent = alternate(rounds, per(clients.sparklog_consume, systems.sparklog),
                                per(clients.confluent_consume, systems.bootstrap))
    table.add("consumer records/s", ours, confluent, "records/s", peer="confluent-kafka")
    ours2, kpython = alternate(rounds, per(clients.sparklog_consume, systems.sparklog),
                               per(clients.kafka_python_consume, systems.bootstrap))
    table.add("consumer records/s", ours2, kpython, "records/s", peer="kafka-python")


def ingest_rows(systems, table, rounds, n):
    """Broker ingest MB/s at acks=1 and acks=all."""
    systems.create_topic("ingest", 1)
    systems.create_topic("ingest-durable", 1, kafka_config={"flush.messages": "1"})
    cp = systems.kafka.classpath
    say(f"ingest: {n:,} records ({n * 100 / 1e6:.0f} MB of values) per run, {rounds} rounds")
    for acks, topic in (("1", "ingest"), ("all", "ingest-durable")):
        ours, theirs = alternate(
            rounds, lambda: ingest.sparklog_ingest(systems.sparklog, topic, n, acks == "all"),
            lambda: ingest.kafka_perf(cp, systems.bootstrap, topic, n, acks))
        table.add(f"broker ingest MB/s, acks={acks}", ours, theirs, "MB/s",
                  peer="Kafka (kafka-producer-perf-test" +
                       (", flush.messages=1)" if acks == "all" else ")"))


def latency_rows(systems, table, rounds, seconds):
    """produce->consume latency percentiles at three rates."""
    systems.create_topic("latency", 1)
    for rate in (1_000, 10_000, 50_000):
        say(f"latency at {rate:,} records/s, {seconds:g} s per run, {rounds} rounds")
        ours, theirs = alternate(
            rounds,
            lambda: clients.percentiles(clients.sparklog_latency(
                systems.sparklog, "latency", rate, seconds,
                clients.SPARKLOG_LATENCY_LINGER_MS)),
            lambda: clients.percentiles(clients.kafka_latency(
                systems.bootstrap, "latency", rate, seconds,
                clients.KAFKA_LATENCY_LINGER_MS)))
        for q in ("p50", "p99", "p99.9"):
            table.add(f"latency {q} at {rate // 1000}k records/s", [o[q] for o in ours],
                      [t[q] for t in theirs], "ms", higher_better=False,
                      peer="Kafka + confluent-kafka")
        delivered = min(o["n"] for o in ours), min(t["n"] for t in theirs)
        say(f"  delivered (fewest in a round): sparklog {delivered[0]:,}, Kafka "
            f"{delivered[1]:,} of {int(rate * seconds):,}")


def kafka_tools_rows(systems, table, rounds, n, seconds):
    """Kafka's own clients against Kafka and against sparklog's Kafka listener."""
    cp = systems.kafka.classpath
    both = {"Kafka": systems.bootstrap, "sparklog": systems.sparklog_kafka}
    systems.create_topic("kt-ingest", 1)
    systems.create_topic("kt-ingest-durable", 1, kafka_config={"flush.messages": "1"})
    say(f"kafka-tools: {n:,} records per run, {rounds} rounds, Kafka's clients against "
        f"Kafka ({both['Kafka']}) and sparklog's Kafka listener ({both['sparklog']})")
    for acks, topic in (("1", "kt-ingest"), ("all", "kt-ingest-durable")):
        ours, theirs = alternate(
            rounds, lambda: ingest.kafka_perf(cp, both["sparklog"], topic, n, acks),
            lambda: ingest.kafka_perf(cp, both["Kafka"], topic, n, acks))
        table.add(f"kafka-producer-perf-test MB/s, acks={acks}", ours, theirs, "MB/s",
                  peer="Kafka, same tool" + (" (flush.messages=1)" if acks == "all" else ""))
    ours, theirs = alternate(
        rounds, lambda: kafka_tools.consumer_perf(cp, both["sparklog"], "kt-ingest", n),
        lambda: kafka_tools.consumer_perf(cp, both["Kafka"], "kt-ingest", n))
    table.add("kafka-consumer-perf-test records/s", ours, theirs, "records/s",
              peer="Kafka, same tool")
    systems.create_topic("kt-librdkafka", 1)
    per = lambda f, target: (lambda: n / f(target, "kt-librdkafka", n))  # noqa: E731
    ours, theirs = alternate(rounds, per(clients.confluent_produce, both["sparklog"]),
                             per(clients.confluent_produce, both["Kafka"]))
    table.add("librdkafka produce() records/s, acks=1", ours, theirs, "records/s",
              peer="Kafka, same client")
    ours, theirs = alternate(rounds, per(clients.confluent_consume, both["sparklog"]),
                             per(clients.confluent_consume, both["Kafka"]))
    table.add("librdkafka consume() records/s", ours, theirs, "records/s",
              peer="Kafka, same client")
    systems.create_topic("kt-latency", 1)
    rate = 10_000
    say(f"kafka-tools: latency at {rate:,} records/s, {seconds:g} s per run")
    ours, theirs = alternate(rounds, *(
        (lambda target=target: clients.percentiles(clients.kafka_latency(
            target, "kt-latency", rate, seconds, clients.KAFKA_LATENCY_LINGER_MS)))
        for target in (both["sparklog"], both["Kafka"])))
    for q in ("p50", "p99"):
        table.add(f"librdkafka latency {q} at 10k records/s", [o[q] for o in ours],
                  [t[q] for t in theirs], "ms", higher_better=False, peer="Kafka, same client")


def spark_rows(systems, table, rounds, n, base, hdfs=False, drains=True):
    """Spark scans over the same n records, and the AvailableNow drain; ``hdfs``: the
    scans also read the log (by ``path``) and the Parquet files from a one-DataNode HDFS
    cluster started for the section (tests/support/hdfscluster.py); ``drains=False``
    leaves out the AvailableNow drains."""
    cluster = None
    if hdfs:
        from tests.support.hdfscluster import HdfsCluster, hadoop_unavailable

        reason = hadoop_unavailable()
        if reason:
            raise RuntimeError(f"--spark-hdfs: {reason}")
        say("spark: starting a one-DataNode HDFS cluster")
        cluster = HdfsCluster(str(base / "hdfs"), datanodes=1).start()
        os.environ["HADOOP_CONF_DIR"] = cluster.conf_dir  # the session's Python workers
    spark = spark_jobs.session()
    try:
        say(f"spark: writing {n:,} records to both brokers")
        spark_jobs.fill(systems, "scan", n, say)
        parquet = (base / "parquet").as_uri()  # file://: HADOOP_CONF_DIR names HDFS the default
        dfs = spark_jobs.frames(spark, systems, "scan", parquet)
        if cluster is not None:
            dfs.update(spark_jobs.hdfs_frames(spark, systems, "scan", parquet, cluster.hdfs_uri))
        mids = {fmt: spark_jobs.midpoint(df) for fmt, df in dfs.items()}
        for query in ("count", "aggregate over value", "filter on timestamp"):
            runs = {fmt: spark_jobs.queries(df, mids[fmt])[query] for fmt, df in dfs.items()}
            for run in runs.values():
                run()  # warm: plans, classes, page cache
            times = {fmt: [] for fmt in runs}
            for r in range(rounds):
                order = list(runs) if r % 2 == 0 else list(reversed(runs))
                for fmt in order:
                    times[fmt].append(spark_jobs.timed(runs[fmt]))
            rate = {fmt: [n / t for t in ts] for fmt, ts in times.items()}
            for peer in ("kafka", "parquet"):
                table.add(f"Spark {query} rows/s", rate["sparklog"], rate[peer], "rows/s",
                          peer='format("kafka")' if peer == "kafka" else "Parquet")
            for peer in ("kafka", "parquet"):
                table.add(f"Spark {query} rows/s, sparklog by path", rate["sparklog-path"],
                          rate[peer], "rows/s",
                          peer='format("kafka")' if peer == "kafka" else "Parquet")
            if cluster is not None:
                for peer in ("kafka", "parquet-hdfs"):
                    table.add(f"Spark {query} rows/s, sparklog by path on hdfs://",
                              rate["sparklog-hdfs"], rate[peer], "rows/s",
                              peer='format("kafka")' if peer == "kafka"
                              else "Parquet on hdfs://")
        if not drains:
            return
        cap = max(1, n // 5)
        say(f"spark: AvailableNow drain, maxOffsetsPerTrigger={cap:,}")
        ours, theirs = alternate(
            rounds, lambda: spark_jobs.drain(spark, "sparklog", systems.sparklog, "scan", cap),
            lambda: spark_jobs.drain(spark, "kafka", systems.bootstrap, "scan", cap))
        say(f"  micro-batches: sparklog {[b for _, b in ours]}, Kafka {[b for _, b in theirs]}")
        table.add(f"AvailableNow drain rows/s (maxOffsetsPerTrigger={cap:,})",
                  [n / s for s, _ in ours], [n / s for s, _ in theirs], "rows/s",
                  peer='format("kafka")')
        ours, theirs = alternate(
            rounds, lambda: spark_jobs.drain(spark, "sparklog", None, "scan", cap,
                                             path=systems.storage),
            lambda: spark_jobs.drain(spark, "kafka", systems.bootstrap, "scan", cap))
        say(f"  micro-batches: sparklog by path {[b for _, b in ours]}, Kafka "
            f"{[b for _, b in theirs]}")
        table.add(f"AvailableNow drain rows/s (maxOffsetsPerTrigger={cap:,}), sparklog by path",
                  [n / s for s, _ in ours], [n / s for s, _ in theirs], "rows/s",
                  peer='format("kafka")')
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop()


def failover_rows(table, rounds, base):
    """Leader failover after SIGKILL: Kafka's kills first, then sparklog's."""
    say(f"failover: 3 KRaft nodes (replication 3), {rounds} SIGKILLs of the leader")
    theirs = failover.kafka_failover(base, rounds)
    say(f"failover: 3 sparklog brokers on ZooKeeper, {rounds} SIGKILLs of the leader")
    ours = failover.sparklog_failover(base, rounds)["SIGKILL"]
    table.add("leader failover after SIGKILL (outage of writes)", ours, theirs, "s",
              higher_better=False, peer="Kafka, 3 KRaft nodes")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller runs (minutes, not tens of minutes)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per row")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections of {SECTIONS}")
    parser.add_argument("--spark-hdfs", action="store_true",
                        help="spark: also read the log (by path) and Parquet from HDFS")
    parser.add_argument("--spark-no-drains", action="store_true",
                        help="spark: the scans only, no AvailableNow drains")
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)} (known: {', '.join(SECTIONS)})")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    size = dict(clients=200_000, ingest=1_000_000, latency_s=3.0, spark=1_000_000,
                kafka_tools=200_000) \
        if args.quick else dict(clients=1_000_000, ingest=4_000_000, latency_s=10.0,
                                spark=10_000_000, kafka_tools=1_000_000)
    table = Table()
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sparklog-peers-") as tmp, Systems(Path(tmp)) as s:
        sections = [
            ("producer", lambda: producer_rows(s, table, args.rounds, size["clients"]),
             "producer" in only or "consumer" in only),
            ("consumer", lambda: consumer_rows(s, table, args.rounds, size["clients"]),
             "consumer" in only),
            ("ingest", lambda: ingest_rows(s, table, args.rounds, size["ingest"]),
             "ingest" in only),
            ("latency", lambda: latency_rows(s, table, args.rounds, size["latency_s"]),
             "latency" in only),
            ("kafka-tools", lambda: kafka_tools_rows(s, table, args.rounds,
                                                     size["kafka_tools"], size["latency_s"]),
             "kafka-tools" in only),
            ("spark", lambda: spark_rows(s, table, args.rounds, size["spark"], Path(tmp),
                                         args.spark_hdfs, not args.spark_no_drains),
             "spark" in only)]
        sections.append(("failover", lambda: failover_rows(table, args.rounds, Path(tmp)),
                         "failover" in only))
        for name, run, wanted in sections:
            if not wanted:
                continue
            try:
                run()
            except Exception as exc:  # one failed section leaves the others' rows
                failed.append(name)
                say(f"section {name} failed: {type(exc).__name__}: {exc}")
    kafka = next((Path(j).name[len("kafka_2.13-"):-len(".jar")] for j in s.kafka.classpath
                  if Path(j).name.startswith("kafka_2.13-")), "?")
    print(f"\nsparklog beside Apache Kafka {kafka} "
          f"({'quick' if args.quick else 'full'} run, median of {args.rounds} alternating "
          f"rounds; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f})\n")
    print(table.render())
    if failed:
        print(f"\nfailed sections (see the progress above): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
