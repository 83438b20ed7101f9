"""The conformance crash scenarios against the files sink (``eoskit-parquet``,
two-phase), on a local directory and on S3 (moto's server).

After each scenario the directory is read by readers that share no code
with the sink: pyarrow.dataset (with pyarrow's own S3 client on S3) and
DuckDB, which must agree, plus Spark's plain ``spark.read.parquet`` on the
local disk (this Spark has no S3 connector). One scenario also runs for
``eoskit-json`` (gzip JSON lines), read the same three ways. Prepared transactions and
leftover staged files are listed with ``os`` / boto3, not through eoskit.
A "table" of the kit is a sub-directory (a prefix on S3) of the root.
"""

from __future__ import annotations

import pytest

from eoskit.testing.conformance import ENDURANCE, Workload, run_scenario, scenarios_for
from eoskit.testing.conformance.files import LocalFilesTarget, LocalJsonTarget, S3FilesTarget


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    # Fewer records than the SQL sinks: every scenario proves the same with 24k.
    return Workload.produce(kafka, records=24_000, partitions=4, batches=5)


TWOPHASE = scenarios_for("twophase")
#: On S3 the scenarios where an object store differs from a disk: commits
#: half-done (copy then delete), a kill anywhere, staged objects of a killed task.
ON_S3 = [s for s in TWOPHASE if s.name in (
    "driver_killed_after_some_commits", "driver_killed_at_random", "worker_killed_during_write")]


@pytest.mark.crash
@pytest.mark.parametrize("scenario", TWOPHASE, ids=[s.name for s in TWOPHASE])
def test_files_local(spark, workload, scenario, tmp_path):
    run_scenario(LocalFilesTarget(tmp_path / "out", spark), workload, scenario, tmp_path / "work", spark)


@pytest.mark.crash
@pytest.mark.full
def test_files_local_json_worker_killed_during_write(spark, workload, tmp_path):
    [scenario] = [s for s in TWOPHASE if s.name == "worker_killed_during_write"]
    run_scenario(LocalJsonTarget(tmp_path / "out", spark), workload, scenario, tmp_path / "work", spark)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", ON_S3, ids=[s.name for s in ON_S3])
def test_files_s3(spark, s3, s3_bucket, workload, scenario, tmp_path):
    run_scenario(S3FilesTarget(s3, s3_bucket), workload, scenario, tmp_path / "work", spark)


def test_the_s3_scenarios_are_in_the_kit():
    assert len(ON_S3) == 3, f"a scenario was renamed: {[s.name for s in TWOPHASE]}"


#: The endurance tier (``ENDURANCE``, see test_postgres_conformance.py).
@pytest.mark.crash
@pytest.mark.endurance
@pytest.mark.full
def test_files_endurance(spark, kafka, tmp_path):
    workload = Workload.endurance(kafka)
    run_scenario(LocalFilesTarget(tmp_path / "out", spark), workload, ENDURANCE, tmp_path / "work", spark)
