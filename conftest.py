"""The test tiers: which tests a run selects (``--tier``), and the
submission tier's share of the crash matrix.

Every test belongs to the tiers its markers allow (docs/development.md has
the table, with each tier's command and time):

- ``submission`` (the default; what ``.ci/run`` and the README's test
  command run): the unit tests, and every capability proven once against
  its real service, with a driver SIGKILL and a worker kill per sink and
  commit mode and every crash point of the protocol fired at least once
  across the sinks (``SUBMISSION_CRASH_MATRIX`` below), the demo, the Kafka
  compatibility suite, one cluster scenario, one outage per service, one
  ``eoskit chaos`` scenario, and the network suite's subset;
- ``full``: all of the submission tier and every test marked ``full``: the
  whole crash matrix, every chaos scenario, every service and network
  fault, the endurance runs;
- ``network``: the network-fault suite alone (marker ``network``);
- ``long``: the 1,300-batch runs (marker ``long``);
- ``containers``: the Podman path (marker ``containers``);
- ``kafka3``: every test marked ``kafka_versions`` (the Kafka sink's and
  source's suites, the transactional crash matrix and read_committed reads
  included), against Apache Kafka 3.9 (``KAFKA3_VERSION``, transactions
  before KIP-890's server side) in services of its own
  (``.eoskit/test-kafka3``); the other tiers run them on 4.4;
- ``all``: everything.

``-m`` narrows a tier further (``--tier full -m crash``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import pytest


#: The Kafka 3.x release of the kafka3 tier (docs/compatibility.md).
KAFKA3_VERSION = "3.9.1"


@dataclass(frozen=True)
class Tier:
    name: str
    #: What a test's markers must have (any of) to be in the tier; empty: no such need.
    needs: frozenset[str]
    #: What keeps a test out of the tier.
    excludes: frozenset[str]
    proves: str
    #: The environment the tier's services start with (set before any starts).
    env: tuple[tuple[str, str], ...] = ()

    def selects(self, markers: Iterable[str]) -> bool:
        found = set(markers)
        return (not self.needs or bool(found & self.needs)) and not found & self.excludes


TIERS = {tier.name: tier for tier in (
    Tier("submission", frozenset(), frozenset({"full", "long", "containers"}),
         "what CI runs: every capability once, a driver and a worker kill per sink and mode, "
         "every crash point"),
    Tier("full", frozenset(), frozenset({"long", "containers"}),
         "the whole crash matrix, every chaos scenario, service and network fault, the endurance runs"),
    Tier("network", frozenset({"network"}), frozenset(), "the network-fault suite alone"),
    Tier("long", frozenset({"long"}), frozenset(), "one job per SQL sink through 1,300 batches"),
    Tier("containers", frozenset({"containers"}), frozenset(),
         "the Podman path: the services as containers of the local images, the job image",
         (("EOSKIT_SERVICES", "podman"), ("EOSKIT_DEV_DIR", ".eoskit/test-containers"))),
    Tier("kafka3", frozenset({"kafka_versions"}), frozenset({"long", "containers"}),
         f"the Kafka suites on Apache Kafka {KAFKA3_VERSION}",
         (("EOSKIT_KAFKA_VERSION", KAFKA3_VERSION), ("EOSKIT_DEV_DIR", ".eoskit/test-kafka3"))),
    Tier("all", frozenset(), frozenset(), "every test"),
)}


@dataclass(frozen=True)
class CrashSuite:
    """A conformance test parametrized by ``scenario``, the sink and commit
    mode it proves, and the scenarios of it the submission tier keeps."""

    test: str
    sink: str
    mode: str
    kept: tuple[str, ...]


#: The submission tier's share of the conformance crash matrix; every other
#: scenario of these tests runs in the full tier. Rotated over the sinks so
#: that each sink and commit mode keeps a driver SIGKILL and a worker (or
#: executor) kill, and every crash point of ``core/crash.py`` fires at
#: least once (tests/test_tiers.py checks both against the kit's scenarios).
SUBMISSION_CRASH_MATRIX = (
    CrashSuite("integration_tests/test_postgres_conformance.py::test_postgres_twophase", "postgres", "twophase",
               ("task_killed_after_prepare", "driver_killed_after_decision", "failing_task_aborts_batch")),
    CrashSuite("integration_tests/test_postgres_conformance.py::test_postgres_idempotent", "postgres", "idempotent",
               ("worker_killed_during_write", "driver_killed_after_some_task_commits")),
    CrashSuite("integration_tests/test_postgres_conformance.py::test_postgres_stateful", "postgres", "twophase",
               ("driver_killed_after_some_commits",)),
    CrashSuite("integration_tests/test_mysql_conformance.py::test_mysql_twophase", "mysql", "twophase",
               ("worker_killed_during_write", "driver_killed_after_some_commits",
                "checkpoint_deleted_is_refused")),
    CrashSuite("integration_tests/test_mysql_conformance.py::test_mysql_idempotent", "mysql", "idempotent",
               ("task_killed_after_commit", "driver_killed_at_random", "replay_of_committed_batch")),
    CrashSuite("integration_tests/test_mysql_conformance.py::test_mysql_stateful", "mysql", "twophase", ()),
    CrashSuite("integration_tests/test_kafka_conformance.py::test_kafka_exactly_once", "kafka", "idempotent",
               ("task_killed_after_commit", "driver_killed_after_some_task_commits",
                "replay_with_other_parallelism_is_refused")),
    CrashSuite("integration_tests/test_kafka_conformance.py::test_kafka_stateful", "kafka", "idempotent", ()),
    CrashSuite("integration_tests/test_kafka_conformance.py::test_kafka_markers_dropped_by_the_broker", "kafka",
               "idempotent", ("markers_dropped_with_a_replay_pending",)),
    CrashSuite("integration_tests/test_files_conformance.py::test_files_local", "files", "twophase",
               ("driver_killed_after_all_commits", "replay_of_committed_batch", "worker_killed_before_its_end")),
    CrashSuite("integration_tests/test_files_conformance.py::test_files_s3", "files-s3", "twophase",
               ("driver_killed_after_some_commits",)),
    CrashSuite("integration_tests/test_chained_conformance.py::test_postgres_chained_twophase", "postgres-chained",
               "twophase", ("task_killed_after_prepare", "driver_killed_after_decision")),
    CrashSuite("integration_tests/test_chained_conformance.py::test_postgres_chained_idempotent", "postgres-chained",
               "idempotent", ("driver_killed_after_some_task_commits",)),
    CrashSuite("integration_tests/test_cluster.py::test_postgres_on_cluster", "postgres-cluster", "twophase",
               ("executor_killed_after_prepare",)),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=sorted(TIERS), default="submission",
                     help="which test tier to run (docs/development.md): "
                          + "; ".join(f"{t.name}: {t.proves}" for t in TIERS.values()))


def pytest_configure(config: pytest.Config) -> None:
    tier = TIERS[config.getoption("--tier")]
    for name, value in tier.env:
        if name == "EOSKIT_DEV_DIR" and not os.path.isabs(value):
            value = str(config.rootpath / value)
        os.environ[name] = value


def _suite_of(item: pytest.Item) -> CrashSuite | None:
    test = f"{item.path.parent.name}/{item.path.name}::{getattr(item, 'originalname', item.name)}"
    return next((s for s in SUBMISSION_CRASH_MATRIX if s.test == test), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = TIERS[config.getoption("--tier")]
    matched: set[str] = set()
    modules = {f"{i.path.parent.name}/{i.path.name}" for i in items}
    for item in items:
        suite = _suite_of(item)
        if suite is None:
            continue
        matched.add(suite.test)
        scenario = getattr(item, "callspec", None) and item.callspec.params.get("scenario")
        if scenario is None:
            raise pytest.UsageError(f"{item.nodeid}: SUBMISSION_CRASH_MATRIX names it, "
                                    "but it takes no `scenario` parameter")
        if scenario.name not in suite.kept:
            item.add_marker(pytest.mark.full)
    # A module collected whole must have every test the matrix names in it
    # (one picked by node id, `file.py::test`, has only that one).
    narrowed = any("::" in arg for arg in config.args)
    stale = [] if narrowed else [s.test for s in SUBMISSION_CRASH_MATRIX
                                 if s.test.split("::")[0] in modules and s.test not in matched]
    if stale:
        raise pytest.UsageError(f"conftest.py SUBMISSION_CRASH_MATRIX names tests that do not exist: {stale}")
    selected, deselected = [], []
    for item in items:
        (selected if tier.selects(m.name for m in item.iter_markers()) else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
    config.stash[_COUNTS] = (tier.name, len(selected), len(deselected))


_COUNTS = pytest.StashKey[tuple[str, int, int]]()


def pytest_report_header(config: pytest.Config) -> str:
    tier = TIERS[config.getoption("--tier")]
    return f"eoskit test tier: {tier.name} ({tier.proves}); --tier chooses another"


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    counts = config.stash.get(_COUNTS, None)
    if counts is not None and counts[2]:
        name, selected, deselected = counts
        terminalreporter.write_line(
            f"tier {name}: {selected} tests selected, {deselected} left to other tiers "
            "(bash scripts/test.sh --tier full runs the whole crash matrix; docs/development.md)")
