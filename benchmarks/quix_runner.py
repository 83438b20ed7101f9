"""Quix Streams' exactly-once mode on the Kafka benchmark's topic.

Run by kafka_to_kafka.py as a subprocess, with the Python of Quix Streams'
own virtualenv (Quix Streams pins a confluent-kafka older than eoskit's), so
it imports nothing of eoskit but the enrichment module, loaded from its file
(stdlib only). It does what a Quix Streams user writes: JSON in, the
enrichment as ``apply``, JSON out with the input's key, under
``processing_guarantee="exactly-once"`` (one Kafka transaction per
checkpoint, committed every ``--commit-every`` records or 5 seconds), and
stops after ``--records`` outputs. Prints one JSON line: rows processed
(an aborted checkpoint's rows are processed again), seconds from
building the Application to the end of ``run()`` and from its first record
on (the consumer group's join before it; the interpreter's start and the
import are reported apart), and the versions.

    <quix venv>/bin/python benchmarks/quix_runner.py --bootstrap HOST:PORT \\
        --input TOPIC --output TOPIC --records N --enrich .../enrich.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import uuid
from types import ModuleType

STARTED = time.perf_counter()
JOIN_SESSION_TIMEOUT_MS = 6000


def load_module(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("eoskit_demo_enrich", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the enrichment module from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--enrich", required=True, help="path of eoskit/runtime/devtools/demo/enrich.py")
    parser.add_argument("--commit-every", type=int, default=10_000)
    parser.add_argument("--idle-timeout", type=float, default=60.0,
                        help="stop when no record arrives for this long (a stuck run fails)")
    args = parser.parse_args()
    enrich = load_module(args.enrich)

    import confluent_kafka
    import quixstreams
    from quixstreams import Application

    imported = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eoskit-bench-quix-") as state_dir:
        app = Application(
            broker_address=args.bootstrap,
            consumer_group=f"eoskit-bench-quix-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            processing_guarantee="exactly-once",
            commit_every=args.commit_every,
            use_changelog_topics=False,
            auto_create_topics=False,
            state_dir=state_dir,
            loglevel="WARNING",
            # A short session timeout, kept from the Tansu days (Tansu held a
            # new group's first join for half of it). Apache Kafka holds the
            # first join for group.initial.rebalance.delay.ms (0 on the dev
            # broker); to be re-measured with the peers benchmark.
            consumer_extra_config={"session.timeout.ms": JOIN_SESSION_TIMEOUT_MS},
        )
        source = app.topic(args.input, key_deserializer="bytes", value_deserializer="json")
        sink = app.topic(args.output, key_serializer="bytes", value_serializer="json")
        processed = 0
        first_record = 0.0

        def enrich_order(order: dict) -> dict:
            nonlocal processed, first_record
            if not processed:
                first_record = time.perf_counter()
            processed += 1
            return enrich.enrich_order(order)

        app.dataframe(source).apply(enrich_order).to_topic(sink)
        app.run(count=args.records, timeout=args.idle_timeout, collect=False)
        ended = time.perf_counter()
    print(json.dumps({
        "rows": processed,
        "run_s": ended - imported,
        "from_first_record_s": ended - first_record if processed else None,
        "start_and_import_s": imported - STARTED,
        "quixstreams": quixstreams.__version__,
        "confluent_kafka": confluent_kafka.version()[0],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
