"""``eoskit run --metrics-port``'s endpoint as Prometheus reads it: names and
labels by Prometheus's naming guidelines (``_total`` counters, base units,
no ``job`` label, topic and partition apart, ``eoskit_build_info``), and
values that move as the run's events drive them.

``PrometheusMetrics`` (``runtime/job/listeners.py``) is started on a free
port of 127.0.0.1 and fed by hand with progress reports shaped like Spark's
``StreamingQueryProgress`` JSON (what ``_SparkListener`` passes on); the
endpoint is scraped over HTTP and parsed with prometheus-client's own text
parser. No Spark, no services."""

from __future__ import annotations

import json
import platform
import re
import socket
import urllib.request
from importlib.metadata import version
from pathlib import Path

import pyspark
import pytest
from prometheus_client.parser import text_string_to_metric_families

from eoskit.runtime.job.lag import lag_by_topic_partition, lag_per_partition
from eoskit.runtime.job.listeners import PrometheusMetrics

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "eoskit-dashboard.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def progress(batch: int, rows: int, end: dict, latest: dict, trigger_ms: int = 1200,
             add_batch_ms: int = 700) -> dict:
    """One batch's progress as Spark's ``StreamingQueryProgress.json`` has it:
    a source's offsets are JSON strings of ``{topic: {partition: offset}}``."""
    return {
        "id": "q", "runId": "r", "name": "orders", "batchId": batch, "numInputRows": rows,
        "inputRowsPerSecond": rows / 2.0, "processedRowsPerSecond": rows / (trigger_ms / 1000),
        "timestamp": "2026-01-01T00:00:00.000Z",
        "durationMs": {"triggerExecution": trigger_ms, "addBatch": add_batch_ms, "latestOffset": 3},
        "sources": [{"description": "eoskit-kafka", "startOffset": None,
                     "endOffset": json.dumps(end), "latestOffset": json.dumps(latest),
                     "numInputRows": rows}],
    }


def scrape(port: int) -> dict[str, object]:
    """The endpoint's families by name, as prometheus-client's parser reads them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families: dict, sample_name: str, **labels: str) -> float:
    """The one sample of that name whose labels include ``labels``."""
    found = [s.value for family in families.values() for s in family.samples
             if s.name == sample_name and labels.items() <= s.labels.items()]
    assert len(found) == 1, f"{sample_name} {labels}: {len(found)} samples"
    return found[0]


@pytest.fixture(scope="module")
def driven() -> tuple[dict, dict]:
    """The endpoint scraped after the start, and after a run of every event:
    two batches (a topic whose name holds a dash, two partitions), a restart,
    a savepoint, a recovery sweep, the end."""
    port = free_port()
    metrics = PrometheusMetrics(port)
    try:
        metrics.on_start("orders", "/nonexistent/ck")
        first = scrape(port)
        metrics.on_progress(progress(0, 40, {"eu-orders": {"0": 20, "1": 20}},
                                     {"eu-orders": {"0": 50, "1": 25}}))
        metrics.on_progress(progress(1, 35, {"eu-orders": {"0": 50, "1": 25}},
                                     {"eu-orders": {"0": 60, "1": 25}}, trigger_ms=45_000))
        metrics.on_restart(1, "a cause", 1.0)
        metrics.on_savepoint("/nonexistent/sp", 1)
        metrics.on_in_doubt_settled(2, 1)
        last = scrape(port)
    finally:
        metrics.on_end(None)
    return first, last


def test_counters_end_in_total_and_no_label_is_named_job(driven):
    first, last = driven
    counters = [f for f in last.values() if f.type == "counter"]
    assert {f.name for f in counters} >= {"eoskit_input_rows", "eoskit_batches", "eoskit_restarts",
                                         "eoskit_in_doubt_transactions_settled"}
    for family in counters:
        assert family.samples and all(s.name.endswith("_total") for s in family.samples), family.name
    for family in last.values():
        assert family.name.startswith("eoskit_"), family.name
        for sample in family.samples:
            assert "job" not in sample.labels, sample
            assert all(re.fullmatch(r"[a-z][a-z0-9_]*", label) for label in sample.labels), sample
            assert sample.labels.get("eoskit_job") == "orders", sample
    assert not any(name.endswith("_per_second") for name in last), "a rate exported as a gauge"


def test_topic_and_partition_are_labels_of_their_own(driven):
    _, last = driven
    lag = {(s.labels["topic"], s.labels["partition"]): s.value for s in last["eoskit_lag_offsets"].samples}
    assert lag == {("eu-orders", "0"): 10, ("eu-orders", "1"): 0}  # the last batch's: 60-50, 25-25
    assert all("topic_partition" not in s.labels for s in last["eoskit_lag_offsets"].samples)


def test_build_info_names_the_versions_with_value_one(driven):
    first, _ = driven
    (sample,) = first["eoskit_build_info"].samples  # an Info: a gauge of 1 in the text format
    assert sample.name == "eoskit_build_info" and sample.value == 1
    assert sample.labels == {"eoskit_job": "orders", "version": version("eoskit"),
                             "pyspark_version": pyspark.__version__,
                             "python_version": platform.python_version()}


def test_the_values_move_as_the_run_drives_them(driven):
    first, last = driven
    for name in ("eoskit_input_rows_total", "eoskit_batches_total", "eoskit_restarts_total"):
        assert value(first, name, eoskit_job="orders") == 0, name  # there from the start for rate()
    assert value(last, "eoskit_input_rows_total") == 40 + 35
    assert value(last, "eoskit_batches_total") == 2
    assert value(last, "eoskit_restarts_total") == 1
    assert value(last, "eoskit_in_doubt_transactions_settled_total", outcome="committed") == 2
    assert value(last, "eoskit_in_doubt_transactions_settled_total", outcome="rolled_back") == 1
    assert value(last, "eoskit_batch_duration_seconds_count") == 2
    assert value(last, "eoskit_batch_duration_seconds_sum") == pytest.approx(1.2 + 45)
    assert value(last, "eoskit_batch_duration_seconds_bucket", le="30.0") == 1  # base units: seconds
    assert value(last, "eoskit_batch_duration_seconds_bucket", le="60.0") == 2
    assert value(last, "eoskit_commit_duration_seconds_sum") == pytest.approx(1.4)
    assert value(last, "eoskit_last_checkpoint_timestamp_seconds") > 1.7e9
    assert value(last, "eoskit_last_savepoint_timestamp_seconds") >= \
        value(last, "eoskit_last_checkpoint_timestamp_seconds")
    assert "eoskit_last_savepoint_timestamp_seconds" not in {
        s.name for f in first.values() for s in f.samples}  # no savepoint yet: no sample


def test_two_runs_in_one_process_keep_registries_of_their_own():
    """Each listener registers its metrics in a registry of its own: a second
    one does not clash with the first, and neither sees the other's values."""
    a, b = PrometheusMetrics(free_port()), PrometheusMetrics(free_port())
    try:
        a.on_start("a", "/ck/a")
        b.on_start("b", "/ck/b")
        a.on_progress(progress(0, 5, {"t": {"0": 5}}, {"t": {"0": 5}}))
        assert value(scrape(a.server.server_address[1]), "eoskit_input_rows_total") == 5
        assert value(scrape(b.server.server_address[1]), "eoskit_input_rows_total") == 0
    finally:
        a.on_end(None)
        b.on_end(None)


def test_lag_keeps_a_dashed_topic_apart_from_its_partition():
    report = progress(0, 1, {"a-b": {"10": 3}, "a": {"0": 1}}, {"a-b": {"10": 7}, "a": {"0": 1}})
    assert lag_by_topic_partition(report) == {("a-b", 10): 4, ("a", 0): 0}
    assert lag_per_partition(report) == {"a-b-10": 4, "a-0": 0}  # the progress line's names


def test_every_metric_the_dashboard_queries_is_scraped(driven):
    """The Grafana dashboard cannot drift from the endpoint: each ``eoskit_...``
    name in a query, variable or annotation is a sample name scraped above
    (tests/test_grafana_dashboard.py checks the labels and PromQL too)."""
    _, last = driven
    scraped = {s.name for family in last.values() for s in family.samples}
    text = DASHBOARD.read_text()
    dashboard = json.loads(text)
    exprs = [v for k, v in _strings(dashboard) if k in ("expr", "query", "definition")]
    queried = {name for expr in exprs for name in re.findall(r"\beoskit_[a-z_]+", expr)}
    queried -= {"eoskit_job"}  # the label, in selectors, by (...) and label_values(...)
    assert len(queried) >= 8, queried  # the scan found the dashboard's queries
    assert queried - scraped == set()
    assert not re.search(r"\bjob\s*=~", text) and "topic_partition" not in text


def _strings(node: object, key: str = ""):
    """Every (key, string value) of a JSON document, nested ones included."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item, key)
    elif isinstance(node, str):
        yield key, node


def test_the_operations_guide_lists_every_metric_with_its_labels(driven):
    """docs/operations.md's table of metrics is the endpoint's: the same
    families, each with the labels it carries besides ``eoskit_job``."""
    _, last = driven
    doc = (DASHBOARD.parent.parent / "operations.md").read_text()
    rows = re.findall(r"^\| `(eoskit_[a-z_]+)` \|[^|]+\|([^|]*)\|", doc, re.MULTILINE)
    listed = {name: set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", labels)))
              for name, labels in rows}  # a label's values, in parentheses, left out
    scraped: dict[str, set[str]] = {}
    for family in last.values():
        if family.name.endswith("_created"):  # prometheus-client's, beside each counter
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        for sample in family.samples:
            scraped.setdefault(name, set()).update(set(sample.labels) - {"eoskit_job"})
    assert listed == scraped
