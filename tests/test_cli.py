"""The eoskit CLI's one way to fail: a line that names the cause, a
documented exit code, the traceback only with --verbose, no password
anywhere. In process (``eoskit.runtime.cli.main.main``), no Spark."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from eoskit.runtime.cli import main as cli
from eoskit.runtime.cli import errors as cli_errors
from eoskit.runtime.cli.main import build_parser, main
from eoskit.runtime.cli.errors import FAILED, INTERRUPTED, UNREACHABLE, USAGE, describe, guarded, redact
from eoskit.runtime.spark.errors import RootCause, python_error, root_cause

SECRET = "SECRETPW"
# Port 1 on the loopback: nothing listens there, the connection is refused at once.
REFUSED = {
    "postgres": f"postgresql+psycopg://u:{SECRET}@127.0.0.1:1/db",
    "mysql": f"mysql+pymysql://u:{SECRET}@127.0.0.1:1/db",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def txn_list(url: str, tmp_path: Path, *extra: str) -> list[str]:
    return ["txn", "list", "--url", url, "--checkpoint-dir", str(tmp_path / "ck"), *extra]


# -- txn ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(REFUSED))
def test_a_refused_connection_is_one_line_exit_3_and_no_password(backend, tmp_path, capsys):
    code, out, err = run(capsys, *txn_list(REFUSED[backend], tmp_path))
    assert code == UNREACHABLE == 3
    assert err.count("\n") == 1 and err.startswith("eoskit txn list: "), err
    assert "refused" in err.lower() and "127.0.0.1" in err
    assert "Traceback" not in err
    assert SECRET not in out + err


@pytest.mark.parametrize("where", ["before", "after", "env"])
def test_verbose_adds_the_traceback_after_the_line(where, tmp_path, capsys, monkeypatch):
    argv = txn_list(REFUSED["postgres"], tmp_path)
    if where == "before":
        argv = ["--verbose", *argv]
    elif where == "after":
        argv = [*argv, "-v"]
    else:
        monkeypatch.setenv(cli_errors.VERBOSE_ENV, "1")
    code, out, err = run(capsys, *argv)
    assert code == UNREACHABLE
    first, _, rest = err.partition("\n")
    assert first.startswith("eoskit txn list: listing prepared transactions in PostgreSQL")
    assert "cannot reach the database" in first and "Connection refused" in first
    assert "Traceback (most recent call last)" in rest and "psycopg.OperationalError" in rest
    assert SECRET not in out + err


def test_a_url_no_sink_handles_is_bad_input_shown_without_its_password(tmp_path, capsys):
    code, out, err = run(capsys, *txn_list(f"oracle://u:{SECRET}@127.0.0.1:1/db", tmp_path))
    assert code == USAGE == 2
    assert err == ("eoskit txn list: no eoskit sink handles the url 'oracle://u:***@127.0.0.1:1/db' "
                   "(two-phase sinks installed: " + err.split("installed: ", 1)[1])
    assert SECRET not in out + err


def test_a_bad_sink_id_is_bad_input(tmp_path, capsys):
    code, _, err = run(capsys, *txn_list(REFUSED["postgres"], tmp_path, "--sink-id", "not valid"))
    assert code == USAGE
    assert err.startswith("eoskit txn list: option 'sinkId' = 'not valid': use 1 to 24 letters")


def test_an_option_without_a_value_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(txn_list(REFUSED["postgres"], tmp_path, "--option", "endpoint"))
    assert exited.value.code == USAGE
    assert "argument --option: 'endpoint' is not KEY=VALUE" in capsys.readouterr().err


# -- run (without starting Spark) -------------------------------------------------


def test_a_missing_job_file(tmp_path, capsys):
    code, _, err = run(capsys, "run", str(tmp_path / "nope.py"), "--checkpoint-dir", str(tmp_path / "ck"))
    assert code == USAGE
    assert err == f"eoskit run: job file {str(tmp_path / 'nope.py')!r} does not exist\n"


@pytest.mark.parametrize(
    ("source", "expected", "hint"),
    [
        ("x = 1\n", "must define a module-level `pipeline = Pipeline(...)`", False),
        ("x = 1\nif x\n", "line 2: SyntaxError: expected ':'", False),
        # eoskit's own error speaks for itself; the job file's line is named.
        ("from eoskit.connectors.kafka import KafkaSource\n\n"
         "source = KafkaSource('127.0.0.1:9092', {'subscribe': 't', 'startingOffsets': 'latest-ish'})\n",
         "line 3: option 'startingOffsets' is neither earliest, latest nor valid JSON", False),
        # An error eoskit did not foresee is named by its type; the URL's password is hidden.
        (f"raise RuntimeError('cannot open postgresql://u:{SECRET}@db.example/orders')\n",
         "line 1: RuntimeError: cannot open postgresql://u:***@db.example/orders", True),
    ],
)
def test_a_broken_job_file_is_bad_input_naming_its_line(source, expected, hint, tmp_path, capsys):
    job = tmp_path / "job.py"
    job.write_text(source)
    code, out, err = run(capsys, "run", str(job), "--checkpoint-dir", str(tmp_path / "ck"))
    assert code == USAGE
    assert err.count("\n") == 1 and err.startswith(f"eoskit run: job file {str(job)!r}"), err
    assert expected in err
    assert ("run with --verbose for the traceback" in err) is hint
    assert "Traceback" not in err and SECRET not in out + err


# -- dev ---------------------------------------------------------------------------------


def test_dev_env_with_nothing_running(tmp_path, capsys):
    code, out, err = run(capsys, "dev", "env", "--dir", str(tmp_path))
    assert code == FAILED and out == ""
    assert err == (f"eoskit dev env: dev services in {tmp_path} are not running; "
                   f"start them with: eoskit dev up --dir {tmp_path}\n")


def test_dev_up_docker_without_an_engine(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    code, _, err = run(capsys, "dev", "up", "--docker", "--dir", str(tmp_path / "dev"))
    assert code == FAILED
    assert err.count("\n") == 1 and err.startswith("eoskit dev up: "), err
    assert "Docker" in err and "Traceback" not in err


# -- the convention itself ----------------------------------------------------------------


def test_an_unforeseen_error_names_its_type_and_points_at_verbose(capsys):
    def broken(args: argparse.Namespace) -> int:
        return 1 // 0

    assert guarded("demo", broken)(argparse.Namespace()) == FAILED
    err = capsys.readouterr().err
    assert err == "eoskit demo: ZeroDivisionError: integer division or modulo by zero (run with --verbose for the traceback)\n"
    assert guarded("demo", broken)(argparse.Namespace(verbose=True)) == FAILED
    first, _, rest = capsys.readouterr().err.partition("\n")
    assert first == "eoskit demo: ZeroDivisionError: integer division or modulo by zero"
    assert rest.startswith("Traceback (most recent call last)") and "1 // 0" in rest


def test_eoskit_errors_speak_for_themselves(capsys):
    from eoskit.twophase.contract import SinkError

    def refused(args: argparse.Namespace) -> int:
        raise SinkError("PostgreSQL refused the write to orders: duplicate key\nDETAIL: Key (id)=(1)")

    assert guarded("run", refused)(argparse.Namespace()) == FAILED
    assert capsys.readouterr().err == "eoskit run: PostgreSQL refused the write to orders: duplicate key\n"


def test_ctrl_c_is_130(capsys):
    def waiting(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    assert guarded("dev up", waiting)(argparse.Namespace()) == INTERRUPTED == 130
    assert capsys.readouterr().err == "eoskit dev up: interrupted\n"


def test_pipeline_failures_take_their_code_from_the_root_cause():
    from eoskit.core.options import OptionError  # noqa: F401 - imported, so resolvable
    from eoskit.runtime.job.pipeline import PipelineError
    from eoskit.twophase.contract import SinkError  # noqa: F401

    option = describe(PipelineError("pipeline p failed: unknown option 'x'", "eoskit.core.options.OptionError"))
    sink = describe(PipelineError("pipeline p failed: table t does not exist", "eoskit.twophase.contract.SinkError"))
    udf = describe(PipelineError("pipeline p failed: ZeroDivisionError: division by zero", "ZeroDivisionError"))
    jvm = describe(PipelineError("pipeline p failed: [USER_RAISED_EXCEPTION] poison record", None))
    broker = describe(PipelineError("pipeline p failed: no broker answered", "eoskit.connectors.kafka.client.BrokerUnreachableError"))
    assert broker.code == UNREACHABLE
    assert (option.code, option.hint) == (USAGE, False)
    assert (sink.code, sink.hint) == (FAILED, False)
    assert (udf.code, udf.hint) == (FAILED, True)  # a user's ValueError/ZeroDivisionError is a failed job
    assert (jvm.code, jvm.hint) == (FAILED, True)


def test_redact_hides_url_passwords_and_the_given_secrets():
    assert redact("mysql+pymysql://app:s3cr%40t@h:3306/db and https://host:8443/x") == \
        "mysql+pymysql://app:***@h:3306/db and https://host:8443/x"
    assert redact("password=s3cr@t failed", cli_errors.secrets_in(["mysql://app:s3cr%40t@h/db"])) == \
        "password=*** failed"


def _verbs(parser=None, prefix=()):
    """Every leaf verb of the eoskit command line: (argv prefix, its parser)."""
    parser = parser or build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for name, sub in subs[0].choices.items():
        yield from _verbs(sub, (*prefix, name))


def test_every_verb_is_in_the_cli_reference_and_refuses_bad_usage_with_exit_2(capsys):
    docs = (Path(__file__).parents[1] / "docs" / "runtime.md").read_text()
    verbs = [verb for verb, _ in _verbs()]
    assert len(verbs) >= 20
    for verb in verbs:
        assert f"eoskit {' '.join(verb)}" in docs, f"eoskit {' '.join(verb)} is not in docs/runtime.md"
        with pytest.raises(SystemExit) as exit_:
            main([*verb, "--no-such-option"])
        assert exit_.value.code == USAGE, verb
        assert "error:" in capsys.readouterr().err


NAMES_A_CHECKPOINT = {("run",), ("stop",), ("savepoint", "trigger"), ("checkpoint", "list"),
                      ("checkpoint", "inspect"), ("state", "inspect"), ("state", "read"),
                      ("state", "rescale"), ("status",), ("txn", "list"), ("txn", "resolve")}


def test_the_checkpoint_is_named_one_way_and_given_once(tmp_path, capsys):
    for verb, parser in _verbs():
        options = {o for a in parser._actions for o in a.option_strings}
        if verb in NAMES_A_CHECKPOINT:
            assert "--checkpoint-dir" in options, verb
            assert "--checkpoint" not in options and "--dir" not in options, verb
    code, _, err = run(capsys, "checkpoint", "list")
    assert code == USAGE and "give --checkpoint-dir DIR" in err
    code, _, err = run(capsys, "checkpoint", "list", str(tmp_path / "a"), "--checkpoint-dir", str(tmp_path / "b"))
    assert code == USAGE and "two checkpoints given" in err


def test_file_system_options_are_storage_options_in_every_verb():
    for verb, parser in _verbs():
        options = {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}
        assert "--option" not in options, verb


def test_a_bad_conf_is_refused_before_the_job_file_is_read(tmp_path, capsys):
    code, _, err = run(capsys, "run", str(tmp_path / "missing.py"), "--checkpoint-dir",
                       str(tmp_path / "ck"), "--conf", "spark.executor.memory")
    assert code == USAGE and "--conf 'spark.executor.memory': expected KEY=VALUE" in err


#: A job file whose source cannot hold a batch back (not Pausable).
_RATE_JOB = """from eoskit.runtime.job.pipeline import Pipeline


class Rate:
    def read_stream(self, spark): ...
    def describe(self): return "rate"


pipeline = Pipeline("job", Rate(), sink=object())
"""


@pytest.fixture
def sessions_asked(monkeypatch) -> list[str]:
    """eoskit's session builder replaced by one that starts nothing: the
    names of the jobs ``eoskit run`` asked a session for."""
    import eoskit.runtime.spark.session as spark

    asked: list[str] = []

    def get_session(app_name, conf=None):
        asked.append(app_name)
        raise RuntimeError("no session in a unit test")

    monkeypatch.setattr(spark, "get_session", get_session)
    return asked


@pytest.mark.parametrize(("flags", "expected"), [
    # Alone: refused before the job file runs (the file is missing here).
    (["--checkpoint-interval", "0s"],
     "setting checkpoint_interval (--checkpoint-interval) = '0s': expected a duration greater than zero"),
    (["--restart-strategy", "sometimes"], "unknown restart strategy 'sometimes'"),
    # With the job file's settings and source.
    (["--incremental-checkpoints", "true"],
     "setting incremental_checkpoints (--incremental-checkpoints) = True needs state_backend = 'rocksdb'"),
    (["--min-pause", "2s"], "setting min_pause (--min-pause) = 2 s: the source rate cannot hold a batch back"),
])
def test_a_bad_setting_flag_is_refused_before_spark_starts(flags, expected, sessions_asked, tmp_path, capsys):
    job = tmp_path / "job.py"
    if "incremental" in flags[0] or "pause" in flags[0]:
        job.write_text(_RATE_JOB)
    code, _, err = run(capsys, "run", str(job), "--checkpoint-dir", str(tmp_path / "ck"), *flags)
    assert code == USAGE and err.count("\n") == 1 and expected in err, err
    assert sessions_asked == []


def test_good_setting_flags_reach_the_session(sessions_asked, tmp_path, capsys):
    """The other side of the test above: flags that pass are merged and the
    session is asked for (here the stand-in refuses it)."""
    job = tmp_path / "job.py"
    job.write_text(_RATE_JOB)
    run(capsys, "run", str(job), "--checkpoint-dir", str(tmp_path / "ck"),
        "--checkpoint-interval", "2s", "--state-backend", "rocksdb", "--incremental-checkpoints", "true")
    assert sessions_asked == ["job"]


def test_every_exit_code_is_documented():
    docs = (Path(__file__).parents[1] / "docs" / "operations.md").read_text()
    for code in cli_errors.EXIT_CODES:
        assert re.search(rf"^\| `{code}` ", docs, re.MULTILINE), f"exit code {code} is not in docs/operations.md"


# -- root causes out of Spark's wrapping (texts as Spark 4 produced them) ---------------

PLANNER_ERROR = """[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/eoskit/twophase/adapter.py", line 122, in streamWriter
    sink.check(schema, SinkContext(decisions.sink_id, self.checkpoint_location(),
  File "/venv/lib/python3.11/site-packages/eoskit/connectors/sql/tables.py", line 67, in resolve_table
    raise SinkError(
eoskit.twophase.contract.SinkError: table orders does not exist; create it, or set the option createTable=true to create it from the DataFrame schema
 SQLSTATE: 38000
=== Streaming Query ===
Identifier: orders [id = 76155d9d-15e1-460d-b8a1-139b33d55e10, runId = 7ee7800a-eec7-459c-8fd0-5916668bfac5]
Current State: ACTIVE"""

TASK_ERROR = """Job aborted due to stage failure: Task 1 in stage 0.0 failed 1 times, most recent failure: Lost task 1.0 in stage 0.0 (TID 1) (192.0.2.2 executor driver): org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/eoskit/connectors/postgres/transactions.py", line 126, in _finish_writes
    self._copy_cm.__exit__(None, None, None)
psycopg.errors.CheckViolation: new row for relation "orders" violates check constraint "positive"

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/eoskit/connectors/postgres/transactions.py", line 130, in _finish_writes
    raise SinkError(_describe_error(exc, self.sink.target.qualified)) from None
eoskit.twophase.contract.SinkError: PostgreSQL refused the write to orders: new row violates check constraint "positive"
 SQLSTATE: 38000
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:647)
\tat org.apache.spark.sql.execution.python.PythonArrowOutput$$anon$1.read(PythonArrowOutput.scala:118)"""


def test_the_root_cause_is_the_exception_python_raised_last():
    assert python_error(PLANNER_ERROR) == RootCause(
        "table orders does not exist; create it, or set the option createTable=true to create it "
        "from the DataFrame schema", "eoskit.twophase.contract.SinkError")
    assert python_error(TASK_ERROR) == RootCause(
        'PostgreSQL refused the write to orders: new row violates check constraint "positive"',
        "eoskit.twophase.contract.SinkError")
    assert python_error("[STREAM_FAILED] no Python here") is None


def test_the_innermost_python_error_wins_and_foreign_types_are_named():
    inner = RuntimeError('Traceback (most recent call last):\n  File "udf.py", line 3, in f\n'
                         "    return 1 / x\nZeroDivisionError: division by zero\n")
    outer = RuntimeError("[STREAM_FAILED] Query [id = 1] terminated with exception: Writing job aborted")
    outer.__cause__ = inner
    cause = root_cause(outer)
    assert cause == RootCause("division by zero", "ZeroDivisionError")
    assert str(cause) == "ZeroDivisionError: division by zero"


def test_without_python_the_innermost_jvm_message_is_the_cause():
    inner = RuntimeError("org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] poison record SQLSTATE: P0001")
    outer = RuntimeError("Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times")
    outer.__cause__ = inner
    assert str(root_cause(outer)) == "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] poison record"


def test_version_names_the_installed_package(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"eoskit {version('eoskit')}"


def test_metrics_can_be_served_on_every_interface(tmp_path):
    import socket
    import urllib.request

    from eoskit.runtime.job.listeners import PrometheusMetrics

    args = cli.build_parser().parse_args(["run", "job.py", "--checkpoint-dir", str(tmp_path),
                                          "--metrics-port", "1", "--metrics-host", "0.0.0.0"])
    assert (args.metrics_host, args.metrics_port) == ("0.0.0.0", 1)
    assert cli.build_parser().parse_args(["run", "j.py", "--checkpoint-dir", "c"]).metrics_host == "127.0.0.1"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    metrics = PrometheusMetrics(port, "0.0.0.0")
    try:
        assert metrics.server.server_address[0] == "0.0.0.0"
        try:  # reached on the host's own address where it has one besides loopback
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
            assert b"eoskit_batches" in answer.read()
    finally:
        metrics.on_end(None)


@pytest.mark.parametrize("argv", [
    ["stop", "--checkpoint-dir", "{missing}"],
    ["savepoint", "trigger", "--checkpoint-dir", "{missing}"],
    ["checkpoint", "list", "{missing}"],
    ["checkpoint", "list", "--checkpoint-dir", "{missing}"],
    ["checkpoint", "inspect", "--checkpoint-dir", "{missing}"],
    ["state", "inspect", "{missing}"],
    ["state", "inspect", "--checkpoint-dir", "{missing}"],
    ["state", "read", "--checkpoint-dir", "{missing}", "--operator", "0"],
    ["state", "read", "{missing}", "--operator", "0"],
    ["status", "--checkpoint-dir", "{missing}"],
])
def test_a_missing_checkpoint_is_bad_input_in_every_verb_before_spark_starts(argv, tmp_path, capsys):
    """Exit 2 naming the directory, for every verb that takes a checkpoint;
    the unit tier's guard (tests/conftest.py) fails the test if Spark starts."""
    missing = str(tmp_path / "nowhere")
    code, out, err = run(capsys, *[a.replace("{missing}", missing) for a in argv])
    assert code == USAGE, err
    assert f"checkpoint {missing}: no such directory" in err


def test_spark_s_refusal_of_update_mode_on_an_eoskit_format_points_at_foreach_batch():
    # The text Spark 4.3 ended such a query with (writeStream.outputMode("update").format("eoskit-json")).
    spark_text = ("[STREAM_FAILED] Query [id = 3ea8c459-4618-4f0d-9752-b5fbf0d4ce1e, runId = "
                  "1c035d34-3d52-4632-b392-0ecd676e02d4] terminated with exception: requirement "
                  "failed: eoskit-json does not support Update mode. SQLSTATE: XXKST")
    line = str(root_cause(Exception(spark_text)))
    assert line.startswith("eoskit-json takes the update output mode through foreachBatch")
    assert "foreachBatch(sink.foreach_batch())" in line and "output_mode='update'" in line
    assert str(root_cause(Exception("requirement failed: parquet does not support Update mode"))) == \
        "requirement failed: parquet does not support Update mode"


def test_metrics_counters_exist_from_the_start_and_batch_histograms_reach_ten_minutes():
    from eoskit.runtime.job.listeners import PrometheusMetrics

    metrics = PrometheusMetrics(0)
    try:
        metrics.on_start("orders", "/ck")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in metrics.registry.collect() for s in family.samples}
        for name in ("eoskit_restarts_total", "eoskit_batches_total", "eoskit_input_rows_total"):
            assert samples[(name, (("eoskit_job", "orders"),))] == 0, name
        metrics.on_progress({"durationMs": {"triggerExecution": 45_000}})
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in metrics.registry.collect() for s in family.samples}
        assert samples[("eoskit_batch_duration_seconds_bucket", (("eoskit_job", "orders"), ("le", "60.0")))] == 1
        assert samples[("eoskit_batch_duration_seconds_bucket", (("eoskit_job", "orders"), ("le", "30.0")))] == 0
    finally:
        metrics.on_end(None)


def test_txn_storage_options_reach_the_files_sink_as_its_fs_options(monkeypatch, tmp_path):
    from eoskit.runtime.cli import txn as txn_cli

    seen = {}

    def in_doubt_sink(kind, target, options):
        seen.update(kind=kind, target=target, options=options)
        raise RuntimeError("stop here")

    monkeypatch.setattr(txn_cli, "in_doubt_sink", in_doubt_sink)
    args = build_parser().parse_args(["txn", "list", "--path", "s3://lake/orders", "--storage-option",
                                      "s3.endpoint_url=http://127.0.0.1:9000", "--checkpoint-dir",
                                      str(tmp_path)])
    with pytest.raises(RuntimeError, match="stop here"):
        txn_cli._sink(args)
    assert seen == {"kind": "path", "target": "s3://lake/orders",
                    "options": {"fs.s3.endpoint_url": "http://127.0.0.1:9000"}}


@pytest.mark.parametrize("verb", [["stop"], ["savepoint", "trigger"]])
@pytest.mark.parametrize("given, seconds", [("30s", 30.0), ("2m", 120.0), ("45", 45.0)])
def test_timeout_takes_a_duration_as_every_setting_does(verb, given, seconds):
    args = build_parser().parse_args([*verb, "--checkpoint-dir", "ck", "--timeout", given])
    assert args.timeout == seconds


def test_a_timeout_that_is_no_duration_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["stop", "--checkpoint-dir", "ck", "--timeout", "soon"])
    assert "--timeout" in capsys.readouterr().err
