"""The state backend of a job: Flink's hashmap and RocksDB backends on Spark's
state store providers, and the checks that keep a job on the one its
checkpoint was written with.

Why: Spark chooses the state store by a SQL setting
(``spark.sql.streaming.stateStore.providerClass``), records it in every
offset-log entry, and on restart quietly puts the recorded one back over the
session's (a warning in the driver log). A job whose settings say one
backend and whose checkpoint holds the other would run on the other without
a word; and ``transformWithState`` fails a batch in on the hash map backend.
So, before a query starts:

1. ``settings_with_spark_conf``: a job that names a provider in its
   ``spark_conf`` gets the matching ``state_backend`` (naming both, and
   disagreeing, is refused);
2. ``check_checkpoint``: a checkpoint whose newest offset-log entry records
   another provider is refused, naming the setting and both values;
3. ``check_plan``: a query with ``transformWithState`` on the hash map
   backend is refused, naming the setting;
4. ``apply``: the provider, RocksDB changelog checkpointing and the two
   TTL cleanup settings (``state_snapshot_interval``,
   ``state_compact_on_commit``) are set on the session. Spark records none
   of the last three in the offset log, so they may change between runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from eoskit.runtime.job.settings import JobSettings, SettingError
from eoskit.runtime.state.checkpoints import Checkpoint, CheckpointError

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG_KEY = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
#: Deltas (hashmap) or changelogs (rocksdb, incremental) between snapshots.
SNAPSHOT_KEY = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
#: RocksDB compacts at every commit, dropping deleted (expired) entries' keys.
COMPACT_KEY = "spark.sql.streaming.stateStore.rocksdb.compactOnCommit"
#: Spark's own keys in a job's ``spark_conf`` -> the setting each becomes.
_CONF_SETTINGS = {
    CHANGELOG_KEY: "incremental_checkpoints",
    SNAPSHOT_KEY: "state_snapshot_interval",
    COMPACT_KEY: "state_compact_on_commit",
}
_STATE = "org.apache.spark.sql.execution.streaming.state."
PROVIDERS = {
    "hashmap": _STATE + "HDFSBackedStateStoreProvider",
    "rocksdb": _STATE + "RocksDBStateStoreProvider",
}
#: Plan nodes of Spark's transformWithState (Scala, and the Python API's
#: ``transformWithState`` / ``transformWithStateInPandas``), which keep their
#: state in RocksDB only.
_TWS_NODES = ("TransformWithState",)


def backend_of(provider: str) -> str | None:
    """``hashmap`` or ``rocksdb`` for a provider class name (qualified or not),
    None for any other provider."""
    simple = provider.strip().rsplit(".", 1)[-1]
    for backend, qualified in PROVIDERS.items():
        if simple == qualified.rsplit(".", 1)[-1]:
            return backend
    return None


def settings_with_spark_conf(spark_conf: Mapping[str, str], settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with ``state_backend``, ``incremental_checkpoints``,
    ``state_snapshot_interval`` and ``state_compact_on_commit`` taken from
    Spark's own keys in a job's ``spark_conf`` where the job set them there
    (``apply`` would otherwise put the settings' defaults over them); a
    provider that disagrees with the ``state_backend`` given is refused, and
    for the others the setting given wins."""
    out = dict(settings)
    provider = spark_conf.get(PROVIDER_KEY)
    if provider is not None:
        backend = backend_of(provider)
        if backend is None:
            raise SettingError(
                f"spark_conf sets {PROVIDER_KEY} = {provider!r}, which is neither backend eoskit "
                f"runs on; set state_backend ({' or '.join(PROVIDERS)}) instead")
        given = out.get("state_backend")
        if given is not None and str(given).strip().lower() != backend:
            raise SettingError(
                f"setting state_backend = {given!r} contradicts spark_conf's {PROVIDER_KEY} = "
                f"{provider!r} ({backend}); set only state_backend")
        out["state_backend"] = backend
    for key, name in _CONF_SETTINGS.items():
        if spark_conf.get(key) is not None and out.get(name) is None:
            out[name] = spark_conf[key]
    return out


def recorded_backend(checkpoint: str) -> tuple[str, str, int] | None:
    """(backend or provider class, provider class, batch) recorded in the
    newest offset-log entry of ``checkpoint``; None for a checkpoint that
    does not exist yet or has no batch (or predates Spark's recording)."""
    try:
        recorded = Checkpoint(checkpoint).batch_conf()
    except CheckpointError:
        return None  # no directory yet, or not a checkpoint: Spark starts a new one
    if recorded is None:
        return None
    batch, conf = recorded
    provider = conf.get(PROVIDER_KEY)
    if not provider:
        return None
    return backend_of(provider) or provider, provider, batch


def check_checkpoint(checkpoint: str, settings: JobSettings) -> None:
    """Refuse to run ``checkpoint`` on a state backend other than its own."""
    recorded = recorded_backend(checkpoint)
    if recorded is None:
        return
    backend, provider, batch = recorded
    if backend == settings.state_backend:
        return
    raise SettingError(
        f"setting state_backend (--state-backend) = {settings.state_backend!r}, but checkpoint "
        f"{checkpoint} keeps its state in {backend!r} ({provider.rsplit('.', 1)[-1]}, recorded "
        f"in offsets/{batch}). A checkpoint's state backend is fixed for its life (Spark would "
        f"quietly go on with {backend!r}): run with state_backend = {backend!r}, or start the "
        "job on a new checkpoint directory")


def uses_transform_with_state(df: DataFrame) -> bool:
    """Does the query's logical plan hold a transformWithState operator?"""
    try:
        plan = df._jdf.queryExecution().logical().toString()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - no JVM plan to read (Spark Connect): Spark tells at run time
        return False
    return any(node in plan for node in _TWS_NODES)


def check_plan(df: DataFrame, settings: JobSettings, job: str) -> None:
    """Refuse transformWithState on the hash map backend before the query starts
    (Spark would fail its first batch with
    UNSUPPORTED_FEATURE.STORE_BACKEND_NOT_SUPPORTED_FOR_TWS)."""
    if settings.state_backend != "rocksdb" and uses_transform_with_state(df):
        raise SettingError(
            f"pipeline {job} uses transformWithState, which keeps its state in RocksDB only: "
            f"set state_backend = 'rocksdb' (--state-backend rocksdb); it is "
            f"{settings.state_backend!r}")


def spark_confs(settings: JobSettings) -> dict[str, str]:
    """The Spark settings that carry the state backend's job settings."""
    return {
        PROVIDER_KEY: PROVIDERS[settings.state_backend],
        CHANGELOG_KEY: "true" if settings.incremental_checkpoints else "false",
        SNAPSHOT_KEY: str(settings.state_snapshot_interval),
        COMPACT_KEY: "true" if settings.state_compact_on_commit else "false",
    }


def apply(spark: SparkSession, settings: JobSettings) -> None:
    """Set the session's state store provider, changelog checkpointing and
    TTL cleanup (``spark_confs``)."""
    for key, value in spark_confs(settings).items():
        spark.conf.set(key, value)
