"""``sparklog quickstart``: the main job, end to end on a local storage root.

1. starts an embedded broker on ``--root`` (``./quickstart-data``),
2. creates a topic with several partitions and produces a generated event stream,
3. runs an exactly-once incremental Spark job committing the events and the consumed
   offsets to a Delta table in one transaction,
4. produces a second batch and reruns the job, which picks up exactly the new records,
5. checks the table independently (delta-rs) and prints a summary.

Progress is shown while it runs; the summary ends with the checks that passed.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

MARKER = ".sparklog-quickstart"
TOPIC = "events"
APP_ID = "quickstart-events"
EVENT_TYPES = ["view", "click", "cart", "purchase"]

TRANSFORM = """
SELECT CAST(key AS STRING)                                   AS user,
       get_json_object(CAST(value AS STRING), '$.type')      AS type,
       CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE) AS amount,
       timestamp, partition, offset
FROM input
"""


def add_parser(subparsers) -> None:
    """Register ``sparklog quickstart``."""
    p = subparsers.add_parser(
        "quickstart", help="end-to-end demo: broker, producer, exactly-once Spark job",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default="quickstart-data",
                   help="local directory for the storage root and the output table "
                        "(default ./quickstart-data; recreated on every run)")
    p.add_argument("--records", type=int, default=200_000,
                   help="events in the first batch (default 200000)")
    p.add_argument("--second-batch", type=int, default=50_000,
                   help="events in the second batch (default 50000)")
    p.add_argument("--partitions", type=int, default=4, help="topic partitions (default 4)")
    p.set_defaults(func=run)


def generate_events(n: int, start: int, seed: int):
    """A pyarrow table of ``n`` synthetic events: key = user id, value = JSON."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    users = rng.integers(0, 5_000, n)
    types = rng.choice(len(EVENT_TYPES), n, p=[0.6, 0.25, 0.1, 0.05])
    amounts = np.round(rng.exponential(30.0, n), 2)
    keys = [f"user-{u}".encode() for u in users]
    values = [json.dumps({"id": start + i, "type": EVENT_TYPES[t], "amount": float(a)},
                         separators=(",", ":")).encode()
              for i, (t, a) in enumerate(zip(types, amounts))]
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def _produce(producer, n: int, start: int, seed: int, label: str) -> None:
    from tqdm import tqdm

    chunk = 10_000
    futures = []
    with tqdm(total=n, desc=label, unit="rec", unit_scale=True, file=sys.stderr) as bar:
        for i in range(0, n, chunk):
            size = min(chunk, n - i)
            futures.append(producer.send_batch(TOPIC, generate_events(size, start + i, seed + i)))
            bar.update(size)
        producer.flush()
    for f in futures:
        f.get(timeout=60)


def _check_extra() -> None:
    """InvalidArgumentError naming the ``quickstart`` extra when a module it brings
    (PySpark, deltalake, tqdm) is not installed."""
    from importlib.util import find_spec

    from ..errors import InvalidArgumentError

    missing = [m for m in ("pyspark", "deltalake", "tqdm") if find_spec(m) is None]
    if missing:
        raise InvalidArgumentError(
            f"sparklog quickstart needs {', '.join(missing)}: install the quickstart extra "
            "(pip install 'sparklog[quickstart]')")


def run(args) -> int:
    """Run the quickstart; returns 0 when every check passed."""
    _check_extra()
    from deltalake import DeltaTable

    import sparklog

    from ..errors import InvalidArgumentError
    from ..spark import local_session
    from ..spark.jobs import run_incremental

    if args.records < 1 or args.second_batch < 1 or args.partitions < 1:
        raise InvalidArgumentError("--records, --second-batch and --partitions must be >= 1")
    base = Path(args.root).resolve()
    if base.exists():
        if not (base / MARKER).exists():
            raise InvalidArgumentError(
                f"{base} exists and was not made by the quickstart; choose another --root")
        shutil.rmtree(base)
    base.mkdir(parents=True)
    (base / MARKER).write_text("made by sparklog quickstart\n")
    storage = (base / "log").as_uri()
    table_uri = (base / "tables" / "events").as_uri()
    say = lambda text: print(f"[quickstart] {text}", file=sys.stderr, flush=True)  # noqa: E731
    started = time.time()

    with sparklog.connect(storage) as session:
        say(f"embedded broker on {session.bootstrap_servers}, storage {storage}")
        session.admin().create_topic(TOPIC, partitions=args.partitions)
        producer = session.producer(acks="all", compression_type="zstd", linger_ms=5)
        _produce(producer, args.records, 0, 1, "produce batch 1")

        say("starting Spark (local[2])")
        spark = local_session("sparklog-quickstart")
        job_args: dict[str, Any] = dict(app_id=APP_ID, subscribe=TOPIC, output=table_uri, format="delta",
                        transform=TRANSFORM, bootstrap_servers=session.bootstrap_servers,
                        progress=lambda t: say(f"job: {t}"))
        first = run_incremental(spark, **job_args)
        _produce(producer, args.second_batch, args.records, 2, "produce batch 2")
        second = run_incremental(spark, **job_args)
        third = run_incremental(spark, **job_args)  # nothing new: must commit nothing
        producer.close()

        table = DeltaTable(table_uri)
        data = table.to_pyarrow_table(columns=["type", "amount", "partition", "offset"])
        spark.stop()

    total = args.records + args.second_batch
    pairs = set(zip(data.column("partition").to_pylist(), data.column("offset").to_pylist()))
    checks = {
        "run 1 read the first batch": first.input_records == args.records,
        "run 2 read exactly the second batch": second.input_records == args.second_batch,
        "run 3 found nothing new": not third.committed,
        "table holds every event once": data.num_rows == total and len(pairs) == total,
        "table versions carry the runs": table.version() >= 1,
    }
    by_type = data.group_by("type").aggregate([("amount", "sum"), ("type", "count")])
    print("\nsparklog quickstart summary")
    print(f"  topic {TOPIC!r}: {args.partitions} partitions, {total} events produced")
    print(f"  Delta table {table_uri}: {data.num_rows} rows, table version {table.version()}")
    for result in (first, second, third):
        print("  " + result.summary().replace("\n", "\n  "))
    print("  events by type:")
    for row in sorted(by_type.to_pylist(), key=lambda r: -r["type_count"]):
        print(f"    {row['type']:<9} {row['type_count']:>8}  amount {row['amount_sum']:>14,.2f}")
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    print(f"  total time {time.time() - started:.1f} s")
    return 0 if all(checks.values()) else 1
