"""Does a warm-up job shorten the first batch? (issue 33, item 4)

The first batch of eoskit's default query (``eoskit-kafka`` -> ``from_json``
-> ``eoskit-postgres`` two-phase, 250,000-row batches, ``local[2]``) takes
about 3x a later one. This script tests the lever the traced run of
2026-12-07 named: a small job through the same path (a Python data
source's Arrow read, ``from_json``, the rows sent to a Python worker as
Arrow), one task per slot, run

- ``cold``: not at all (the benchmark's default query as it is);
- ``beside``: on a thread of the driver, started with the query, so that
  it runs while the first batch plans (the lever);
- ``before``: to its end before the query starts (how much of the excess
  such a job can take off at all, whatever it costs).

Each run is a fresh process (a fresh JVM and Python helpers), the modes
alternated each round, on one topic produced once; every run's table is
verified by psql-side counts (``benchlib.postgres``). Results: medians of
the first batch, of the later batches and of the query's wall time.

    .venv/bin/python benchmarks/first_batch_warmup.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid

MODES = ("cold", "beside", "before")
TABLE = "bench_first_batch_warmup"
RECORDS = 1_000_000
PARTITIONS = 4
MAX_OFFSETS = 250_000
#: The longest one run (a fresh process: its session, the query of 1M records) may take.
RUN_TIMEOUT_S = 600
#: The warm-up's rows per task: a handful, as the job is to warm, not to load.
WARM_ROWS = 64
WARM_VALUE = json.dumps({"order_id": 1, "customer": "customer-1", "amount": "3.50",
                         "created_at": "2026-11-21T12:00:00Z"}).encode()


def warm_up(spark, slots: int) -> float:
    """The warm-up job: ``slots`` tasks through the first batch's path; its seconds."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from benchlib.results import ORDER_SCHEMA

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(slots)]

        def read(self, partition):
            yield pa.record_batch({"key": pa.array([b"k"] * WARM_ROWS, pa.binary()),
                                   "value": pa.array([WARM_VALUE] * WARM_ROWS, pa.binary())})

    class Source(DataSource):
        @classmethod
        def name(cls):
            return "bench_first_batch_warmup"

        def schema(self):
            return "key binary, value binary"

        def reader(self, schema):
            return Reader()

    def drain(batches):
        for batch in batches:
            yield batch.slice(0, 0)

    started = time.perf_counter()
    spark.dataSource.register(Source)
    raw = spark.read.format(Source.name()).load()
    parsed = raw.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*")
    parsed.mapInArrow(drain, parsed.schema).collect()
    return time.perf_counter() - started


def one_run(mode: str, bootstrap: str, url: str, topic: str) -> dict:
    """One query in this process, in ``mode``; its figures."""
    from benchlib.postgres import reset_table
    from benchlib.spark import kafka_stream, parse_orders, run_stream, spark_session
    from kafka_to_postgres import postgres_writer

    spark = spark_session()
    reset_table(url, TABLE)
    warm: dict[str, float] = {}
    if mode == "before":
        warm["warm_s"] = warm_up(spark, 2)

    def configure(writer):
        if mode == "beside":
            threading.Thread(target=lambda: warm.update(warm_s=warm_up(spark, 2)), daemon=True).start()
        return postgres_writer(url, TABLE)(writer)

    result = run_stream(configure, parse_orders(kafka_stream(spark, bootstrap, topic, MAX_OFFSETS)), mode)
    batches = [d["triggerExecution"] / 1000 for d in result.durations_ms]
    return {"mode": mode, "wall_s": result.wall_s, "first_s": batches[0], "later_s": statistics.median(batches[1:]),
            **warm}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--services-dir", default=".eoskit/dev")
    parser.add_argument("--one", nargs=4, metavar=("MODE", "BOOTSTRAP", "URL", "TOPIC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_run(*args.one)))
        return 0

    from eoskit.runtime.devtools.services import LocalServices

    from benchlib.harness import Unavailable, run_peer_process
    from benchlib.postgres import table_stats, verify
    from benchlib.report import say
    from benchlib.topics import delete_topic, produce

    endpoints = LocalServices(args.services_dir).up()
    bootstrap, url = endpoints.kafka_bootstrap, endpoints.postgres_url
    topic = f"bench-warmup-{uuid.uuid4().hex[:12]}"
    expected, _ = produce(bootstrap, topic, RECORDS, PARTITIONS)
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    problems: list[str] = []
    try:
        for round_ in range(args.rounds):
            for mode in MODES[round_ % len(MODES):] + MODES[:round_ % len(MODES)]:
                label = f"round {round_ + 1} {mode}"
                try:
                    figures, _ = run_peer_process(label, [sys.executable, __file__, "--one", mode, bootstrap,
                                                          url, topic], timeout=RUN_TIMEOUT_S)
                except Unavailable as error:
                    print(error, file=sys.stderr)
                    return 1
                problems += verify(label, table_stats(url, TABLE), expected)
                runs[mode].append(figures)
                say(f"{label}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items() if isinstance(v, float)))
    finally:
        delete_topic(bootstrap, topic)
    print(f"\n{'mode':8} {'first batch s':>14} {'later batch s':>14} {'query wall s':>13} {'warm-up s':>10}")
    for mode, figures in runs.items():
        def median(key: str) -> str:
            values = [f[key] for f in figures if key in f]
            return f"{statistics.median(values):.2f}" if values else "-"
        print(f"{mode:8} {median('first_s'):>14} {median('later_s'):>14} {median('wall_s'):>13} "
              f"{median('warm_s'):>10}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    say(f"verified: every run's table holds each of the {expected.count:,} orders exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
