"""The conformance kit: crash scenarios every transactional sink must pass.

A sink author implements ``ConformanceTarget`` (how to point a job at the
sink, and how to read its table with an independent client), and
``PreparingTarget`` for a sink with a two-phase mode (how to read its
prepared transactions) and runs ``SCENARIOS`` against it; see
integration_tests/test_postgres_conformance.py for the shape.
``CLUSTER_SCENARIOS`` (executors killed, a task retried on another worker, a
relative checkpoint directory) run on a Spark cluster:
``run_scenario(..., env={"EOSKIT_TEST_MASTER": "spark://..."})``, as in
integration_tests/test_cluster.py. The stateful job (running totals per
customer in update mode) runs the same scenarios against a target that is
also a ``TotalsTarget``: ``run_scenario(..., stateful=True)``, as in
integration_tests/test_stateful_crash.py. ``ENDURANCE`` runs a job through
thousands of tiny batches with a driver kill in the middle (the endurance
tier, ``pytest -m endurance``); ``ONE_LONG_RUN`` through as many in one run
without a fault (the long tier, ``pytest -m long``).
"""

from eoskit.testing.conformance.endurance import ENDURANCE, ONE_LONG_RUN
from eoskit.testing.conformance.scenarios import CLUSTER_SCENARIOS, SCENARIOS, Scenario, run_scenario, scenarios_for
from eoskit.testing.conformance.target import ConformanceTarget, PreparingTarget, TotalsTarget
from eoskit.testing.conformance.workload import Workload

__all__ = ["CLUSTER_SCENARIOS", "ENDURANCE", "ONE_LONG_RUN", "SCENARIOS", "ConformanceTarget", "PreparingTarget", "Scenario", "TotalsTarget", "Workload", "run_scenario", "scenarios_for"]
