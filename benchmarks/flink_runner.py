"""PyFlink 2.x exactly-once on the Kafka benchmark's topic: KafkaSource -> enrich -> KafkaSink.

Run by kafka_to_kafka.py (through flink_peer.py) as a subprocess, with the
Python of PyFlink's own virtualenv (PyFlink pins a pandas, pyarrow and py4j
older than eoskit's), so it imports nothing of eoskit but the enrichment
module, loaded from its file (stdlib only) inside each Python worker. One
DataStream job on a local mini-cluster, as a PyFlink user writes it:

- Flink's ``KafkaSource`` from the earliest offsets, bounded at the latest
  offsets when the job starts (the benchmark produces the whole topic
  before), so the job ends by itself once the input is read; values read as
  raw bytes (``ByteArraySchema``: no decode in Java, no encode in Python);
- a Python ``MapFunction``: the enrichment, ``enrich_value(bytes) -> (key,
  value)``, exactly the bytes every peer writes;
- Flink's ``KafkaSink`` with ``DeliveryGuarantee.EXACTLY_ONCE``, the key and
  the value written as they are. PyFlink's DataStream ``KafkaSink`` builder
  can only serialize the whole record as the key (it has no schema that
  takes one field of a row as the key, another as the value), so the sink
  is declared as a table of Flink's Kafka connector (``key.format`` and
  ``value.format`` ``raw``, ``sink.delivery-guarantee`` ``exactly-once``),
  which builds that same ``KafkaSink``, and attached to this DataStream job
  (``attach_as_datastream``): one job, run by ``env.execute()``.

Exactly once: checkpoints in EXACTLY_ONCE mode every
``--checkpoint-interval-ms``. Each sink subtask writes into a Kafka
transaction, with a transactional id of its own (a new prefix per run), and
commits it when the checkpoint completes; readers see the output with
``isolation.level=read_committed`` only. Once every task has read to the
end of its input, Flink 2.x (checkpoints after tasks finish, on by
default) triggers one last checkpoint at once, not at the next interval
(``SchedulerBase.notifyEndOfData``); it commits the last transactions before
``execute()`` returns. ``transaction.timeout.ms`` is set below the broker's
``transaction.max.timeout.ms`` (Apache Kafka's default 900,000; Flink's
own default of one hour is refused by the broker).

With ``--sql``, the same job as a Flink user writes it in Flink SQL
instead (issue 33): a source table and a sink table of Flink's Kafka
connector (``format`` ``json``; the sink's key ``raw``, its value ``json``,
``sink.delivery-guarantee`` ``exactly-once``) and one ``INSERT INTO ...
SELECT`` that enriches with SQL expressions built from the enrichment
module's constants: no Python worker, the whole job in the JVM
(:func:`sql_statements`). It is timed whole (``execute_sql`` to the job's
end) and from the job's start (Flink's net runtime of the job: the
mini-cluster's start excluded, the tasks' deployment in), since no Python
worker is there to note the first record. Unrun on the machine it was
written on (no PyFlink virtualenv there); the README says so.

Prints one JSON line: rows (``--records``: the job reads the whole topic,
and the benchmark's reader checks the output holds each of them once),
seconds of ``env.execute()``, of its part from the first record on (the
mini-cluster's and the Python workers' start before it: each worker
notes when its first record came, in a file), Flink's own net runtime of
the job, the interpreter's start to just before ``execute()`` (imports,
the JVM gateway, the job's build), and the settings.

    <flink venv>/bin/python benchmarks/flink_runner.py --bootstrap HOST:PORT \\
        --input TOPIC --output TOPIC --records N --enrich .../enrich.py \\
        --connector-jar <flink venv>/jars/flink-sql-connector-kafka-5.0.0-2.2.jar
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType

STARTED = time.perf_counter()
#: Below Apache Kafka's transaction.max.timeout.ms default (900,000); far
#: above any checkpoint interval this runner is given.
TRANSACTION_TIMEOUT_MS = 600_000


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("eoskit_demo_enrich", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the enrichment module from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True, help="an existing topic")
    parser.add_argument("--records", type=int, required=True,
                        help="the input topic's record count (reported as rows)")
    parser.add_argument("--enrich", required=True, help="path of eoskit/runtime/devtools/demo/enrich.py")
    parser.add_argument("--connector-jar", required=True,
                        help="flink-sql-connector-kafka, built for this Flink")
    parser.add_argument("--parallelism", type=int, default=2,
                        help="source, map and sink subtasks (default 2: the machine's 2 cores)")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=5000,
                        help="how often the sink's transactions commit (default 5000: Quix "
                             "Streams' 5 s commit bound)")
    parser.add_argument("--sql", action="store_true",
                        help="the job in Flink SQL: Kafka tables and one INSERT ... SELECT (no Python worker)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    jar = Path(args.connector_jar).resolve()
    if not jar.is_file():
        raise SystemExit(f"no Kafka connector jar at {jar}: make the virtualenv with "
                         "benchmarks/flink_peer.py --make-venv")
    enrich = load_module(args.enrich)  # fail here, not in a worker, if the module is not there

    import pyflink.version

    if args.sql:
        print(json.dumps({**run_sql_job(args, jar, enrich), "pyflink": pyflink.version.__version__,
                          "kafka_connector": jar.stem.removeprefix("flink-sql-connector-kafka-"),
                          "parallelism": args.parallelism,
                          "checkpoint_interval_ms": args.checkpoint_interval_ms}))
        return 0

    marks = tempfile.TemporaryDirectory(prefix="eoskit-bench-flink-")

    run = f"eoskit-bench-flink-{uuid.uuid4().hex[:8]}"
    env = build_job(args, jar, run, marks.name)

    built = time.perf_counter()
    try:
        result = env.execute(run)
        ended, ended_wall = time.perf_counter(), time.time()
        firsts = [float(mark.read_text()) for mark in Path(marks.name).iterdir()]
    finally:
        marks.cleanup()
    print(json.dumps({
        "rows": args.records,
        "run_s": ended - built,
        "from_first_record_s": ended_wall - min(firsts) if firsts else None,
        "job_net_runtime_s": result.get_net_runtime() / 1000,
        "start_and_import_s": built - STARTED,
        "pyflink": pyflink.version.__version__,
        "kafka_connector": jar.stem.removeprefix("flink-sql-connector-kafka-"),
        "parallelism": args.parallelism,
        "checkpoint_interval_ms": args.checkpoint_interval_ms,
    }))
    return 0


def build_job(args: argparse.Namespace, jar: Path, run: str, marks: str):  # noqa: ANN201 - pyflink's environment
    """The job (not started): Kafka source, the enrichment, the exactly-once
    Kafka sink, in a StreamExecutionEnvironment named by ``run``; each
    Python worker writes the time of its first record into ``marks``."""
    from pyflink.common import Row, Types, WatermarkStrategy
    from pyflink.common.serialization import ByteArraySchema
    from pyflink.datastream import MapFunction, RuntimeContext
    from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
    from pyflink.table import StreamTableEnvironment

    class Enrich(MapFunction):
        """The enrichment, its module loaded by path in each Python worker,
        which writes the time of its first record into ``marks``."""

        def __init__(self, path: str, marks: str):
            self.path, self.marks = path, marks
            self.enrich_value = None
            self.started = False

        def open(self, runtime_context: RuntimeContext) -> None:
            self.enrich_value = load_module(self.path).enrich_value

        def map(self, value: bytes) -> Row:
            if not self.started:
                self.started = True
                Path(self.marks, uuid.uuid4().hex).write_text(repr(time.time()))
            return Row(*self.enrich_value(value))

    env = environment(args, jar)
    env.set_python_executable(sys.executable)  # the workers' Python: this virtualenv's, not PATH's

    source = (KafkaSource.builder()
              .set_bootstrap_servers(args.bootstrap)
              .set_topics(args.input)
              .set_group_id(run)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_bounded(KafkaOffsetsInitializer.latest())
              .set_value_only_deserializer(ByteArraySchema())
              .set_property("isolation.level", "read_committed")  # as the hand-written loop reads
              .build())
    raw_bytes = Types.PRIMITIVE_ARRAY(Types.BYTE())
    enriched = (env.from_source(source, WatermarkStrategy.no_watermarks(), "KafkaSource",
                                type_info=raw_bytes)
                .map(Enrich(str(Path(args.enrich).resolve()), marks),
                     output_type=Types.ROW_NAMED(["k", "v"], [raw_bytes, raw_bytes]))
                .name("enrich"))

    tables = StreamTableEnvironment.create(env)
    statements = tables.create_statement_set()
    statements.add_insert(kafka_sink(args, run), tables.from_data_stream(enriched))
    statements.attach_as_datastream()
    return env


def environment(args: argparse.Namespace, jar: Path):  # noqa: ANN201 - pyflink's environment
    """STREAMING mode (checkpoints commit the transactions), ``--parallelism``,
    EXACTLY_ONCE checkpoints every ``--checkpoint-interval-ms``, the jar."""
    from pyflink.datastream import CheckpointingMode, RuntimeExecutionMode, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(args.checkpoint_interval_ms, CheckpointingMode.EXACTLY_ONCE)
    env.add_jars(jar.as_uri())
    return env


def literal(text: str) -> str:
    """``text`` as a Flink SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_statements(args: argparse.Namespace, run: str, enrich: ModuleType) -> list[str]:
    """The SQL job: the input table (bounded at the latest offsets when the
    job starts, read_committed, JSON), the output table (key ``raw``, value
    ``json`` without the key, exactly-once under transactional ids named by
    ``run``) and the INSERT that enriches as ``enrich.enrich_value`` does:
    ``amount`` passed through as text, ``amount_with_tax`` the amount times
    TAX_FACTOR rounded half up to the cent (Flink's ROUND on a DECIMAL),
    ``tier`` from TIERS, keyed by the order id."""
    amount = "CAST(amount AS DECIMAL(12, 2))"
    tiers = " ".join(f"WHEN {amount} >= {bound} THEN {literal(name)}" for bound, name in enrich.TIERS)
    source = (f"CREATE TEMPORARY TABLE orders (order_id BIGINT, customer STRING, amount STRING, "
              f"created_at STRING) WITH ('connector' = 'kafka', 'topic' = {literal(args.input)}, "
              f"'properties.bootstrap.servers' = {literal(args.bootstrap)}, "
              f"'properties.group.id' = {literal(run)}, 'properties.isolation.level' = 'read_committed', "
              "'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset', "
              "'format' = 'json', 'json.fail-on-missing-field' = 'true')")
    sink = (f"CREATE TEMPORARY TABLE enriched (k STRING, order_id BIGINT, customer STRING, amount STRING, "
            f"created_at STRING, amount_with_tax STRING, tier STRING) WITH ('connector' = 'kafka', "
            f"'topic' = {literal(args.output)}, 'properties.bootstrap.servers' = {literal(args.bootstrap)}, "
            "'key.format' = 'raw', 'key.fields' = 'k', 'value.format' = 'json', "
            "'value.fields-include' = 'EXCEPT_KEY', 'sink.delivery-guarantee' = 'exactly-once', "
            f"'sink.transactional-id-prefix' = {literal(run)}, "
            f"'properties.transaction.timeout.ms' = '{TRANSACTION_TIMEOUT_MS}')")
    insert = (f"INSERT INTO enriched SELECT CAST(order_id AS STRING), order_id, customer, amount, created_at, "
              f"CAST(ROUND({amount} * {enrich.TAX_FACTOR}, 2) AS STRING), "
              f"CASE {tiers} ELSE {literal(enrich.LOWEST_TIER)} END FROM orders")
    return [source, sink, insert]


def run_sql_job(args: argparse.Namespace, jar: Path, enrich: ModuleType) -> dict:
    """The SQL job run to its end: its figures (run_s whole, from_job_start_s
    Flink's net runtime, submit_s the mini-cluster's start and the job's
    submission, start_and_import_s)."""
    from pyflink.table import StreamTableEnvironment

    run = f"eoskit-bench-flink-sql-{uuid.uuid4().hex[:8]}"
    tables = StreamTableEnvironment.create(environment(args, jar))
    tables.get_config().set("pipeline.name", run)
    *tables_ddl, insert = sql_statements(args, run, enrich)
    for statement in tables_ddl:
        tables.execute_sql(statement)
    built = time.perf_counter()
    submitted_result = tables.execute_sql(insert)  # starts the mini-cluster, submits the job
    submitted = time.perf_counter()
    job = submitted_result.get_job_client().get_job_execution_result().result()  # to the job's end
    ended = time.perf_counter()
    return {"rows": args.records, "run_s": ended - built, "from_job_start_s": job.get_net_runtime() / 1000,
            "submit_s": submitted - built, "start_and_import_s": built - STARTED, "variant": "sql"}


def kafka_sink(args: argparse.Namespace, run: str):  # noqa: ANN201 - pyflink's TableDescriptor
    """Flink's Kafka table sink, exactly-once, its transactional ids named by ``run``."""
    from pyflink.table import DataTypes, Schema, TableDescriptor

    return (TableDescriptor.for_connector("kafka")
            .schema(Schema.new_builder().column("k", DataTypes.BYTES())
                    .column("v", DataTypes.BYTES()).build())
            .option("topic", args.output)
            .option("properties.bootstrap.servers", args.bootstrap)
            .option("key.format", "raw")
            .option("key.fields", "k")
            .option("value.format", "raw")
            .option("value.fields-include", "EXCEPT_KEY")
            .option("sink.delivery-guarantee", "exactly-once")
            .option("sink.transactional-id-prefix", run)
            .option("properties.transaction.timeout.ms", str(TRANSACTION_TIMEOUT_MS))
            .build())

if __name__ == "__main__":
    sys.exit(main())
