"""The conformance kit: crash scenarios every transactional sink must pass.

A sink author implements ``ConformanceTarget`` (how to point a job at the
sink, and how to read its table and its prepared transactions with an
independent client) and runs ``SCENARIOS`` against it; see
integration_tests/test_postgres_conformance.py for the shape.
"""

from eoskit.twophase.conformance.scenarios import (
    SCENARIOS,
    Scenario,
    Workload,
    run_scenario,
    scenarios_for,
)
from eoskit.twophase.conformance.target import ConformanceTarget

__all__ = ["SCENARIOS", "ConformanceTarget", "Scenario", "Workload", "run_scenario", "scenarios_for"]
