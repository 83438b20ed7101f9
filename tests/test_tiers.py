"""The test tiers (the root conftest.py): what each selects, and that the
submission tier keeps a crash proof of each kind per sink and commit mode
and fires every crash point of the protocol."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from eoskit.testing.conformance import CLUSTER_SCENARIOS, SCENARIOS
from eoskit.core import crash

ROOT = Path(__file__).resolve().parents[1]


def _load_tiers():
    spec = importlib.util.spec_from_file_location("eoskit_test_tiers", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tiers = _load_tiers()
KIT = {s.name: s for s in (*SCENARIOS, *CLUSTER_SCENARIOS)}
#: Scenarios a conformance module writes itself (not the kit's): what they kill.
OWN = {"markers_dropped_with_a_replay_pending": ("driver", crash.DRIVER_AFTER_TASK_COMMIT)}


def _kills(name: str) -> tuple[str, str | None]:
    if name in OWN:
        return OWN[name]
    return KIT[name].kills, KIT[name].point


@pytest.mark.parametrize("markers, chosen", [
    ((), {"submission", "full", "all"}),
    (("crash",), {"submission", "full", "all"}),
    (("full", "crash"), {"full", "all"}),
    (("network",), {"submission", "full", "network", "all"}),
    (("network", "full"), {"full", "network", "all"}),
    (("long",), {"long", "all"}),
    (("containers",), {"containers", "all"}),
])
def test_each_tier_selects_by_markers(markers, chosen):
    assert {name for name, tier in tiers.TIERS.items() if tier.selects(markers)} == chosen


def test_the_matrix_names_only_the_kits_scenarios_for_its_mode():
    for suite in tiers.SUBMISSION_CRASH_MATRIX:
        for name in suite.kept:
            assert name in KIT or name in OWN, f"{suite.test} keeps {name!r}, which no kit scenario is"
            if name in KIT:
                assert suite.mode in KIT[name].modes, f"{suite.test}: {name} is not a {suite.mode} scenario"


def test_every_sink_and_mode_keeps_a_driver_kill_and_a_worker_kill():
    kinds: dict[tuple[str, str], set[str]] = defaultdict(set)
    for suite in tiers.SUBMISSION_CRASH_MATRIX:
        sink = suite.sink.split("-")[0]  # files-s3 and postgres-cluster count for their sink
        kinds[(sink, suite.mode)] |= {_kills(name)[0] for name in suite.kept}
    expected = {("postgres", "twophase"), ("postgres", "idempotent"), ("mysql", "twophase"),
                ("mysql", "idempotent"), ("kafka", "idempotent"), ("files", "twophase")}
    assert expected <= set(kinds), f"no submission crash proof for {sorted(expected - set(kinds))}"
    lacking = {f"{sink} {mode}": sorted({"driver", "worker"} - (found | ({"worker"} if "executor" in found else set())))
               for (sink, mode), found in kinds.items() if (sink, mode) in expected}
    assert {what: missing for what, missing in lacking.items() if missing} == {}


#: Points outside the sinks' protocol (the Kafka source's broadcast state),
#: and the submission-tier test that fires each.
ELSEWHERE = {crash.BROADCAST_BEFORE_PIN: "test_broadcast_rules.py::test_dynamic_rules_are_exact_through_kills",
             crash.DRIVER_AFTER_BROADCAST_SNAPSHOT: "test_broadcast_rules.py::test_dynamic_rules_are_exact_through_kills",
             crash.DRIVER_AFTER_BROADCAST_PUBLISH: "test_broadcast_rules.py::test_dynamic_rules_are_exact_through_kills"}


def _in_submission_tier(module: str, test: str) -> bool:
    """Whether test function ``test`` of ``module`` (its source) keeps a case
    in the submission tier: neither the module nor the function is marked
    ``full``, and a parametrized one keeps a parameter that is not."""
    tree = ast.parse(module)
    marked = [ast.unparse(n.value) for n in tree.body if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)]
    if any("mark.full" in m for m in marked):
        return False
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test]
    for decorator in function.decorator_list:
        text = ast.unparse(decorator)
        if text.endswith("mark.full"):
            return False
        if ".parametrize(" in text:
            cases = decorator.args[1].elts if len(decorator.args) > 1 else []
            if cases and all("mark.full" in ast.unparse(case) for case in cases):
                return False
    return True


def test_every_crash_point_fires_in_the_submission_tier():
    fired = {_kills(name)[1] for suite in tiers.SUBMISSION_CRASH_MATRIX for name in suite.kept}
    for point, test in ELSEWHERE.items():
        path, name = test.split("::")
        text = (ROOT / "integration_tests" / path).read_text()
        assert f"crash.{point.upper()}" in text and _in_submission_tier(text, name), f"{test} does not fire {point}"
        fired.add(point)
    assert set(crash.POINTS) - fired == set()
