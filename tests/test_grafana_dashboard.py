"""docs/grafana/eoskit-dashboard.json: a well-formed Grafana dashboard whose
PromQL names only metrics (and labels) that eoskit's metrics code registers.

The registered names are read from the code itself: ``PrometheusMetrics``
(``runtime/job/listeners.py``) builds its metrics in a fresh ``CollectorRegistry``
of its own (``self.registry``; its constructor takes no registry), so the test
creates one on an ephemeral port of 127.0.0.1, feeds it one event of each
kind so that every labelled metric has a child, and reads the sample names
(with the ``_total``, ``_bucket``, ``_sum``, ``_count``, ``_created`` suffixes
prometheus-client adds) and their labels from ``registry.collect()``. No
Spark, no services."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eoskit.runtime.job.listeners import PrometheusMetrics

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "eoskit-dashboard.json"

#: PromQL functions, aggregation operators and keywords: never metric names.
PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters",
    "double_exponential_smoothing", "hour", "idelta", "increase", "irate", "label_join",
    "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time",
    "min_over_time", "minute", "month", "predict_linear", "present_over_time",
    "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort",
    "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "stddev_over_time",
    "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
    # aggregation operators
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "limitk", "limit_ratio",
    # Grafana's variable query functions
    "label_values", "label_names", "metrics", "query_result",
}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                   "offset", "and", "or", "unless", "atan2", "inf", "nan", "le", "start", "end"}
#: Labels Prometheus itself puts on every scraped series (the target's).
TARGET_LABELS = {"instance", "job"}
#: Grafana's built-in variables usable in a query.
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                    "__range_ms", "__from", "__to", "__dashboard", "__org", "__user"}

_STRING = r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`'
_IDENT = r"[A-Za-z_:][A-Za-z0-9_:]*"
_SELECTOR = re.compile(rf"(?P<name>{_IDENT})?\s*\{{(?P<body>(?:{_STRING}|[^}}\"'`])*)\}}")
_MATCHER = re.compile(rf"(?P<label>{_IDENT})\s*(?:=~|!~|!=|=)\s*(?P<value>{_STRING})")
_GROUPING = re.compile(r"\b(?P<kw>by|without|on|ignoring|group_left|group_right)\s*\((?P<labels>[^()]*)\)")
_TOKEN = re.compile(rf"(?P<number>\d[\w.]*)|(?P<ident>{_IDENT})(?P<call>\s*\()?")


def parse_promql(expr: str) -> tuple[set[str], list[tuple[str | None, set[str]]], set[str], set[str]]:
    """What one PromQL expression refers to: the metric names, each selector
    (metric name or None, the labels it matches on), the labels of its
    grouping clauses, and the functions it calls. A small scanner, not a
    parser: enough for the dashboard's expressions, and it refuses what it
    cannot place (an unknown function)."""
    metrics: set[str] = set()
    selectors: list[tuple[str | None, set[str]]] = []
    grouping: set[str] = set()
    functions: set[str] = set()

    def selector(match: re.Match) -> str:
        name, body, before = match.group("name"), match.group("body"), ""
        if name in PROMQL_KEYWORDS or name in PROMQL_FUNCTIONS:
            name, before = None, f"{name} "  # a keyword before a bare {...} is not its name
        labels = set()
        for m in _MATCHER.finditer(body):
            labels.add(m.group("label"))
            if m.group("label") == "__name__":
                name = m.group("value")[1:-1]
        selectors.append((name, labels))
        if name:
            metrics.add(name)
        return before + " "

    text = _SELECTOR.sub(selector, expr)
    text = re.sub(_STRING, " ", text)            # string arguments (label_replace's)
    text = re.sub(r"\[[^\]]*\]", " ", text)       # range and subquery durations, $__rate_interval
    text = re.sub(r"\$\{?\w+\}?", " ", text)      # Grafana variables outside brackets

    def group(match: re.Match) -> str:
        grouping.update(label.strip() for label in match.group("labels").split(",") if label.strip())
        return " "

    text = _GROUPING.sub(group, text)
    for token in _TOKEN.finditer(text):
        ident = token.group("ident")
        if ident is None:
            continue
        if token.group("call"):
            functions.add(ident)
        elif ident not in PROMQL_KEYWORDS:
            metrics.add(ident)
    return metrics, selectors, grouping, functions


def all_panels(panels: list[dict]) -> list[dict]:
    """Every panel, rows' nested panels (a collapsed row keeps them) included."""
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(all_panels(panel.get("panels", [])))
    return out


def queries(dashboard: dict) -> list[tuple[str, str, str]]:
    """(where, PromQL, legend format) of every panel target and annotation."""
    out = []
    for panel in all_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            out.append((f"panel {panel.get('id')} {panel.get('title')!r} target {target.get('refId')}",
                        target.get("expr"), target.get("legendFormat", "")))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            out.append((f"annotation {annotation.get('name')!r}", annotation["expr"],
                        annotation.get("textFormat", "")))
    return out


@pytest.fixture(scope="module")
def registered() -> dict[str, set[str] | None]:
    """Every sample name eoskit's metrics export -> its label names (None:
    known by its family's type only, labels unknown)."""
    metrics = PrometheusMetrics(0)  # port 0: any free port of 127.0.0.1
    try:
        metrics.on_start("orders", "/nonexistent/ck")
        metrics.on_progress({
            "runId": "r", "batchId": 0, "numInputRows": 10, "inputRowsPerSecond": 5.0,
            "processedRowsPerSecond": 20.0, "timestamp": "2026-01-01T00:00:00.000Z",
            "durationMs": {"triggerExecution": 1200, "addBatch": 700},
            "sources": [{"endOffset": json.dumps({"orders": {"0": 40}}),
                         "latestOffset": json.dumps({"orders": {"0": 50}})}]})
        metrics.on_restart(1, "a cause", 1.0)
        metrics.on_savepoint("/nonexistent/sp", 0)
        metrics.on_in_doubt_settled(1, 1)
        families = list(metrics.registry.collect())
    finally:
        metrics.on_end(None)
        metrics.server.server_close()
    suffixes = {"counter": ["_total", "_created"], "gauge": [""], "histogram":
                ["_bucket", "_count", "_sum", "_created"], "summary": ["_count", "_sum", "_created"],
                "info": ["_info"], "stateset": [""], "gaugehistogram": ["_bucket", "_gcount", "_gsum"],
                "unknown": [""]}
    names: dict[str, set[str] | None] = {}
    for family in families:
        if family.samples:
            for sample in family.samples:
                names.setdefault(sample.name, set()).update(sample.labels)
        else:  # a metric no event above reaches (one added since): its type tells its names
            for suffix in suffixes.get(family.type, [""]):
                names.setdefault(family.name + suffix, None)
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_the_registry_is_read_from_the_code(registered):
    """The fixture found eoskit's metrics, suffixes and labels as
    prometheus-client exports them (a guard on the fixture, not a list to keep)."""
    assert registered["eoskit_batches_total"] == {"eoskit_job"}
    assert registered["eoskit_batch_duration_seconds_bucket"] == {"eoskit_job", "le"}
    assert "eoskit_in_doubt_transactions_settled" not in registered  # a counter is exported with _total


def test_the_dashboard_has_a_grafana_shape(dashboard):
    assert isinstance(dashboard.get("title"), str) and dashboard["title"].strip()
    assert isinstance(dashboard.get("uid"), str) and dashboard["uid"].strip()
    assert isinstance(dashboard.get("schemaVersion"), int) and dashboard["schemaVersion"] >= 36
    assert isinstance(dashboard.get("panels"), list) and dashboard["panels"]
    panels = all_panels(dashboard["panels"])
    ids = [panel.get("id") for panel in panels]
    assert all(isinstance(i, int) for i in ids), ids
    assert len(ids) == len(set(ids)), f"panel ids repeat: {sorted(ids)}"

    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    inputs = {i.get("name") for i in dashboard.get("__inputs", [])}
    datasource_vars = {n for n, v in variables.items()
                       if v.get("type") == "datasource" and v.get("query") == "prometheus"}
    assert datasource_vars or "DS_PROMETHEUS" in inputs, "no Prometheus data source variable or input"
    names = datasource_vars | inputs
    data_sources = {f"${{{n}}}" for n in names} | {f"${n}" for n in names}

    for panel in panels:
        where = f"panel {panel['id']} {panel.get('title')!r}"
        assert isinstance(panel.get("type"), str) and isinstance(panel.get("title"), str), where
        position = panel.get("gridPos", {})
        assert all(isinstance(position.get(k), int) for k in "hwxy"), where
        assert position["x"] + position["w"] <= 24, where
        if panel["type"] == "row":
            continue
        assert isinstance(panel.get("description"), str) and panel["description"].strip(), \
            f"{where} has no description"
        targets = panel.get("targets")
        assert isinstance(targets, list) and targets, f"{where} has no targets"
        ref_ids = [t.get("refId") for t in targets]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in targets:
            assert isinstance(target.get("expr"), str) and target["expr"].strip(), where
        for source in [panel.get("datasource")] + [t.get("datasource") for t in targets]:
            if source is not None:
                assert source.get("type") == "prometheus" and source.get("uid") in data_sources, where


def test_every_metric_and_label_the_dashboard_names_is_exported(dashboard, registered):
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    problems = []
    all_labels = set().union(*(labels for labels in registered.values() if labels)) | TARGET_LABELS

    checked = list(queries(dashboard))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            query = query.get("query") if isinstance(query, dict) else query
            checked.append((f"variable {variable['name']!r}", query, ""))

    for where, expr, legend in checked:
        if not isinstance(expr, str) or not expr.strip():
            problems.append(f"{where}: no expression")
            continue
        values = re.fullmatch(rf"\s*label_values\(\s*({_IDENT})\s*,\s*({_IDENT})\s*\)\s*", expr)
        if values:  # Grafana's label_values(metric, label)
            metrics, selectors, grouping, functions = {values[1]}, [(values[1], {values[2]})], set(), set()
        else:
            metrics, selectors, grouping, functions = parse_promql(expr)
        if not metrics:
            problems.append(f"{where}: no metric found in {expr!r}")
        for function in functions - PROMQL_FUNCTIONS:
            problems.append(f"{where}: {function}(...) is not a PromQL function")
        for name in sorted(metrics - registered.keys()):
            problems.append(f"{where}: {name} is not a metric eoskit registers")
        labels_here = set(TARGET_LABELS)
        for name in metrics & registered.keys():
            labels_here |= registered[name] if registered[name] is not None else all_labels
        for name, labels in selectors:
            known = (registered.get(name) if name else None) or all_labels
            for label in sorted(labels - known - TARGET_LABELS - {"__name__"}):
                problems.append(f"{where}: {name} has no label {label!r}")
        for label in sorted(grouping - labels_here):
            problems.append(f"{where}: groups by {label!r}, which none of {sorted(metrics)} carries")
        for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or ""):
            if label not in labels_here:
                problems.append(f"{where}: legend names {label!r}, which none of {sorted(metrics)} carries")
        for variable in re.findall(r"\$\{?(\w+)", expr):
            if variable not in variables and variable not in GRAFANA_BUILTINS:
                problems.append(f"{where}: ${variable} is not a dashboard variable")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("expr, unknown", [
    ('sum by (eoskit_job) (rate(eoskit_nonexistent_total{eoskit_job=~"$eoskit_job"}[$__rate_interval]))',
     {"eoskit_nonexistent_total"}),
    ("time() - eoskit_bare_gauge", {"eoskit_bare_gauge"}),
    ('{__name__="eoskit_by_name", eoskit_job="x"}', {"eoskit_by_name"}),
    ("eoskit_in_doubt_transactions_settled", {"eoskit_in_doubt_transactions_settled"}),  # no _total
    ('histogram_quantile(0.9, sum by (le) (rate(eoskit_batch_duration_seconds_bucket[5m]))) '
     'or eoskit_input_rows_total offset 1h', set()),
])
def test_the_scanner_finds_every_metric_name(expr, unknown, registered):
    """The check can fail: names a dashboard could carry by mistake are found."""
    metrics, _, _, functions = parse_promql(expr)
    assert metrics - registered.keys() == unknown
    assert functions <= PROMQL_FUNCTIONS
