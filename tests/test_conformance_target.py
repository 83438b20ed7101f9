"""The conformance kit's target contract is split by capability: a target
implements what its sink can do and nothing else."""

import importlib

import pytest

from eoskit.testing.conformance.target import ConformanceTarget, PreparingTarget


class _IdempotentOnly(ConformanceTarget):
    """What a plug-in author writes for a sink with no two-phase mode."""

    format = "acme-sqlite"

    def options(self, table):
        return {"table": table}

    def create_table(self, table):
        pass

    def rows(self, table):
        return []


def test_an_idempotent_only_target_needs_no_prepared():
    target = _IdempotentOnly()
    assert target.prepared("eoskit:") == [] and target.in_doubt("eoskit:", "t") == []


def test_a_two_phase_target_must_read_its_prepared_transactions():
    class Forgot(PreparingTarget, _IdempotentOnly):
        pass

    with pytest.raises(TypeError, match="prepared"):
        Forgot()

    class Reads(PreparingTarget, _IdempotentOnly):
        def prepared(self, prefix):
            return [f"{prefix}1:0:0"]

    assert Reads().in_doubt("eoskit:s:", "t") == ["eoskit:s:1:0:0"]


@pytest.mark.parametrize("module, name, preparing", [
    ("postgres", "PostgresTarget", True),
    ("mysql", "MySQLTarget", True),
    ("files", "LocalFilesTarget", True),
    ("files", "LocalJsonTarget", True),
    ("files", "S3FilesTarget", True),
    ("kafka", "KafkaTopicTarget", False),
])
def test_eoskit_s_own_targets_declare_what_their_sinks_can_do(module, name, preparing):
    target = getattr(importlib.import_module(f"eoskit.testing.conformance.{module}"), name)
    assert issubclass(target, ConformanceTarget) and not target.__abstractmethods__
    assert issubclass(target, PreparingTarget) is preparing
