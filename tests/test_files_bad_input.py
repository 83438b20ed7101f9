"""The files sink against a file system that says no: a full disk mid-write,
a file size limit, no write permission. Each runs in a child process (a
small tmpfs in a mount namespace, an rlimit, dropped capabilities), through
the real protocol code, and checks the error and that committed batches are
intact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent('''
    import json, os, resource, signal, sys
    import pyarrow as pa, pyarrow.dataset as ds
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    from eoskit.connectors.files.settings import FilesSettings
    from eoskit.connectors.files.transactions import FilesTransactions
    from eoskit.twophase.contract import CommitMode, SinkContext, SinkError
    from eoskit.twophase.coordinator import Coordinator
    from eoskit.twophase.decision_log import DecisionLog
    from eoskit.twophase.task import write_task

    out, checkpoint, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    schema = StructType([StructField("id", LongType()), StructField("pad", StringType())])
    settings = FilesSettings.parse({"path": out, "compression": "none"}, "eoskit-parquet", "parquet",
                                   FilesTransactions)
    sink = FilesTransactions(settings, schema)
    decisions = DecisionLog(checkpoint, "full")
    sink.check(schema, SinkContext("full", checkpoint, CommitMode.TWOPHASE))
    decisions.create()

    def rows(start, count, width):
        ids = list(range(start, start + count))
        return iter([pa.record_batch({"id": pa.array(ids, pa.int64()),
                                      "pad": pa.array([os.urandom(width).hex() for _ in ids])})])

    acks = [write_task(sink, decisions, CommitMode.TWOPHASE, rows(0, 100, 8), identity=(0, 0, 0))]
    Coordinator(sink.committer(), decisions).commit(acks, 0)
    if limit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        write_task(sink, decisions, CommitMode.TWOPHASE, rows(100, 4000, 256), identity=(1, 0, 0))
        error = None
    except SinkError as exc:
        error = str(exc)
    table = ds.dataset(out, format="parquet").to_table()
    print(json.dumps({"error": error, "ids": sorted(table.column("id").to_pylist()),
                      "staging": os.listdir(os.path.join(out, "_eoskit", "staging")),
                      "prepared": sink.committer().in_doubt("eoskit:full:")}))
''')


def run_child(prefix: list[str], out: str, checkpoint: str, limit: int = 0) -> dict:
    result = subprocess.run([*prefix, sys.executable, "-c", CHILD, out, checkpoint, str(limit)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_batch_0_intact_and_nothing_staged(report: dict) -> None:
    assert report["ids"] == list(range(100)), "the committed batch changed"
    assert report["staging"] == [] and report["prepared"] == []


def test_a_full_disk_mid_write_fails_the_task_clearly_and_keeps_committed_batches(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a small tmpfs")
    mount = tmp_path / "disk"
    mount.mkdir()
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user and mount namespaces here: {probe.stderr.decode().strip()}")
    inner = f"mount -t tmpfs -o size=256k tmpfs {mount} && exec \"$@\""
    report = run_child(["unshare", "-rm", "sh", "-c", inner, "sh"], str(mount / "out"),
                       str(tmp_path / "ck"))
    assert report["error"] is not None, "the disk did not fill up"
    assert "the file system is full (no space left on device)" in report["error"]
    assert "Nothing of this batch is committed" in report["error"]
    assert_batch_0_intact_and_nothing_staged(report)


def test_a_file_size_limit_mid_write_fails_the_task_clearly_and_keeps_committed_batches(tmp_path):
    report = run_child([], str(tmp_path / "out"), str(tmp_path / "ck"), limit=64 * 1024)
    assert report["error"] is not None and "file size limit" in report["error"]
    assert_batch_0_intact_and_nothing_staged(report)


def test_no_write_permission_is_refused_before_any_data_moves(tmp_path):
    out = tmp_path / "locked"
    out.mkdir()
    out.chmod(0o555)
    prefix: list[str] = []
    if os.geteuid() == 0:  # root ignores mode bits unless it gives up the capability
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv(1) to drop CAP_DAC_OVERRIDE")
        prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    script = textwrap.dedent(f'''
        from pyspark.sql.types import LongType, StructField, StructType
        from eoskit.connectors.files.settings import FilesSettings
        from eoskit.connectors.files.transactions import FilesTransactions
        from eoskit.twophase.contract import CommitMode, SinkContext, SinkError
        schema = StructType([StructField("id", LongType())])
        settings = FilesSettings.parse({{"path": {str(out)!r}}}, "eoskit-parquet", "parquet", FilesTransactions)
        try:
            FilesTransactions(settings, schema).check(schema, SinkContext("s", "/ck", CommitMode.TWOPHASE))
        except SinkError as exc:
            print(exc)
    ''')
    try:
        result = subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=60)
    finally:
        out.chmod(0o755)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"cannot write under {out}" in result.stdout and "permission denied" in result.stdout
