"""The command line's conventions (issue 34): one exit-code table that every
verb keeps, every verb and option in the reference, ``--json`` and
``--storage-option`` wherever they make sense, one spelling of a savepoint,
``--log-format json``. In process, no Spark, no services."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import threading
import time
from pathlib import Path

import fsspec.config
import pytest

from eoskit.core.fs import use_storage_options
from eoskit.runtime.cli import errors, logs
from eoskit.runtime.cli.main import build_parser, main
from eoskit.runtime.cli.reference import GLOBAL_DESTS, cli_docs
from eoskit.runtime.job.control import ControlDir

DOCS = Path(__file__).parents[1] / "docs"


def block(page: str, marker: str) -> str:
    text = (DOCS / page).read_text()
    return text.split(f"<!-- {marker}:begin -->\n")[1].split(f"<!-- {marker}:end -->")[0].strip()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- the exit codes: one table, derived from errors.py -----------------------------------


def test_the_exit_code_table_is_the_one_errors_py_declares():
    assert block("operations.md", "exit-codes") == "\n".join(errors.exit_code_docs()), (
        "docs/operations.md's exit codes are out of date: regenerate them with scripts/options_docs.py")
    declared = {code for code, _ in errors.SITUATIONS}
    assert declared == set(errors.EXIT_CODES) == {errors.OK, errors.FAILED, errors.USAGE,
                                                  errors.UNREACHABLE, errors.INTERRUPTED}
    assert set(errors.VERDICT_CODES.values()) <= declared


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A checkpoint directory of a query that started and has no job running."""
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "metadata").write_text('{"id": "q"}')
    (ck / "offsets").mkdir()
    return ck


@pytest.mark.parametrize("argv", [["stop"], ["savepoint", "trigger"], ["status"]])
def test_not_running_is_1_in_every_verb(argv, checkpoint, capsys):
    code, out, err = run(capsys, *argv, "--checkpoint-dir", str(checkpoint), "--json")
    assert code == errors.FAILED, err
    assert out == "" and ("no job is running" in err or "no eoskit run has kept a status" in err)


def test_dev_services_not_running_is_1_and_flags_that_do_not_go_together_2(tmp_path, capsys):
    code, out, _ = run(capsys, "dev", "status", "--dir", str(tmp_path / "dev"), "--json")
    assert code == errors.FAILED
    assert {s["running"] for s in json.loads(out).values()} == {False}
    code, _, err = run(capsys, "dev", "env", "--dir", str(tmp_path / "dev"))
    assert code == errors.FAILED and "not running" in err
    code, _, err = run(capsys, "dev", "up", "--docker", "--network", "--dir", str(tmp_path / "dev"))
    assert code == errors.USAGE and "--network" in err
    assert not (tmp_path / "dev").exists()


def test_a_checkpoint_in_use_is_1_for_a_rescale_as_for_a_second_run(checkpoint, capsys):
    record = ControlDir(str(checkpoint)).claim("totals")
    try:
        code, _, err = run(capsys, "state", "rescale", "--checkpoint-dir", str(checkpoint),
                           "--partitions", "2", "--dry-run")
    finally:
        record.release()
    assert code == errors.FAILED and "is in use by job 'totals'" in err


@pytest.mark.parametrize("argv", [
    ["savepoint", "inspect", "--savepoint", "{missing}"],
    ["savepoint", "dispose", "{missing}"],
    ["stop", "--checkpoint-dir", "{missing}"],
    ["state", "rescale", "--checkpoint-dir", "{missing}", "--partitions", "2", "--dry-run"],
    ["run", "{missing}", "--checkpoint-dir", "ck"],
])
def test_not_found_is_2_in_every_verb(argv, tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    code, _, err = run(capsys, *[a.replace("{missing}", missing) for a in argv])
    assert code == errors.USAGE and missing in err, err


# -- the reference: every verb and every option, read off the parser -------------------


def _leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
    for name, sub in (subs[0].choices.items() if subs else ()):
        yield from _leaves(sub, (*prefix, name))


def test_every_verb_and_each_of_its_long_options_is_in_the_cli_reference():
    reference = block("runtime.md", "cli")
    assert reference == "\n".join(cli_docs(build_parser())), (
        "docs/runtime.md's table of every verb's options is out of date: regenerate it with "
        "scripts/options_docs.py")
    # Each verb's option cells, as the page has them: from its row to the next verb's.
    sections: dict[str, set[str]] = {}
    verb = ""
    for line in reference.splitlines()[2:]:
        if line.startswith("| `eoskit "):
            verb = line.split("`")[1]
            sections[verb] = set()
        cell = line.split(" | ")[1]
        sections[verb].update(re.findall(r"--[a-z][a-z-]*", cell))
    leaves = list(_leaves(build_parser()))
    assert len(leaves) >= 25
    for words, parser in leaves:
        name = "eoskit " + " ".join(words)
        assert name in sections, f"{name} is not in docs/runtime.md"
        for action in parser._actions:
            if action.dest in GLOBAL_DESTS or action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                if option.startswith("--"):
                    assert option in sections[name], f"{name} {option} is not in docs/runtime.md"


def test_json_and_storage_options_are_on_the_verbs_the_issue_names():
    for words, parser in _leaves(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        if words in {("txn", "list"), ("txn", "resolve"), ("stop",), ("dev", "status"), ("run",)}:
            assert "--json" in options, words
        if words in {("run",), ("stop",), ("savepoint", "trigger"), ("state", "rescale")}:
            assert "--storage-option" in options, words
        assert "--log-format" in options and "--verbose" in options, words


# -- one spelling of a savepoint ----------------------------------------------------------


@pytest.mark.parametrize("verb", [["savepoint", "inspect"], ["savepoint", "dispose"]])
def test_a_savepoint_is_named_by_savepoint_and_the_bare_path_still_read(verb, tmp_path, capsys):
    missing = str(tmp_path / "sp")
    for argv in ([*verb, "--savepoint", missing], [*verb, missing]):
        code, _, err = run(capsys, *argv)
        assert code == errors.USAGE and f"savepoint {missing}: no such" in err, err
    code, _, err = run(capsys, *verb)
    assert code == errors.USAGE and "give --savepoint PATH" in err
    code, _, err = run(capsys, *verb, "--savepoint", missing, str(tmp_path / "other"))
    assert code == errors.USAGE and "two savepoints given" in err


class FakeJob(threading.Thread):
    """A job on ``checkpoint`` as the control plane sees it: it holds the run
    record and answers the first request (a savepoint of batch 7 at its
    target), then ends."""

    def __init__(self, checkpoint: Path) -> None:
        super().__init__(daemon=True)
        self.control = ControlDir(str(checkpoint))
        self.record = self.control.claim("orders")
        self.asked: list = []

    def run(self) -> None:
        deadline = time.monotonic() + 10
        while not self.asked and time.monotonic() < deadline:
            for request in self.control.pending():
                self.asked.append(request)
                self.control.answer(request, status="done", path=request.target, batch=7)
            time.sleep(0.05)
        self.record.release()


@pytest.mark.parametrize("argv", [["stop", "--savepoint", "{sp}"], ["savepoint", "trigger", "{sp}"]])
def test_stop_and_trigger_answer_in_json(argv, checkpoint, tmp_path, capsys):
    job = FakeJob(checkpoint)
    job.start()
    target = str(tmp_path / "sp")
    code, out, err = run(capsys, *[a.replace("{sp}", target) for a in argv],
                         "--checkpoint-dir", str(checkpoint), "--timeout", "10s", "--json")
    job.join(10)
    assert code == errors.OK, err
    assert job.asked[0].target == target
    answer = json.loads(out)
    assert (answer["savepoint"], answer["batch"], answer.get("stopped", True)) == (target, 7, True)
    assert answer["checkpoint"] == ControlDir(str(checkpoint)).checkpoint


# -- --storage-option -------------------------------------------------------------------


def test_storage_options_become_fsspec_s_configuration_here_and_in_child_processes(monkeypatch):
    monkeypatch.setattr(fsspec.config, "conf", {})
    environ: dict[str, str] = {}
    use_storage_options({"s3": {"endpoint_url": "http://127.0.0.1:9000", "anon": True,
                                "client_kwargs": {"region_name": "eu"}}}, environ)
    assert fsspec.config.conf["s3"]["endpoint_url"] == "http://127.0.0.1:9000"
    assert environ["FSSPEC_S3_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    # A child process reads them back with fsspec's own reader, as they were given.
    again: dict = {}
    fsspec.config.set_conf_env(again, environ)
    assert again == {"s3": {"endpoint_url": "http://127.0.0.1:9000", "anon": True,
                            "client_kwargs": {"region_name": "eu"}}}


def test_the_control_files_are_opened_with_the_verb_s_storage_options(tmp_path):
    assert ControlDir(str(tmp_path), {"file": {"auto_mkdir": True}}).fs.auto_mkdir is True
    assert ControlDir(str(tmp_path), {"s3": {"anon": True}}).fs.auto_mkdir is False


def test_rescale_s_storage_options_serve_the_whole_process(checkpoint, monkeypatch, capsys):
    monkeypatch.setattr(fsspec.config, "conf", {})
    monkeypatch.delenv("FSSPEC_FILE_AUTO_MKDIR", raising=False)
    code, _, err = run(capsys, "state", "rescale", "--checkpoint-dir", str(checkpoint),
                       "--partitions", "2", "--dry-run", "--storage-option", "file.auto_mkdir=true")
    assert code == errors.USAGE and "has no batch yet" in err  # got as far as reading the checkpoint
    assert fsspec.config.conf == {"file": {"auto_mkdir": True}}
    assert os.environ["FSSPEC_FILE_AUTO_MKDIR"] == "true"
    code, _, err = run(capsys, "state", "rescale", "--checkpoint-dir", str(checkpoint),
                       "--partitions", "2", "--dry-run", "--storage-option", "auto_mkdir=true")
    assert code == errors.USAGE and "expected PROTOCOL.KEY=VALUE" in err


# -- --log-format ---------------------------------------------------------------------------


@pytest.fixture
def restore_logging():
    yield
    logs.configure("text")


@pytest.mark.parametrize("verbose", [False, True])
def test_json_log_lines_are_one_object_each_without_secrets(verbose, capsys, restore_logging):
    logs.configure("json", verbose)
    log = logging.getLogger("eoskit.connectors.sql.committer")
    log.warning("cannot reach postgresql://app:s3cr3t@db/shop, retrying in %d s", 2)
    try:
        raise ConnectionError("refused")
    except ConnectionError:
        log.error("gave up", exc_info=True)
    logging.getLogger("eoskit.x").info("below WARNING: not written")
    lines = capsys.readouterr().err.splitlines()
    entries = [json.loads(line) for line in lines]
    assert len(entries) == 2
    assert {tuple(e) for e in entries[:1]} == {("ts", "level", "logger", "message")}
    assert entries[0]["level"] == "WARNING" and entries[0]["logger"] == log.name
    assert entries[0]["message"] == "cannot reach postgresql://app:***@db/shop, retrying in 2 s"
    assert entries[0]["ts"].endswith("Z") and "T" in entries[0]["ts"]
    assert ("exc_info" in entries[1]) is verbose
    if verbose:
        assert "ConnectionError: refused" in entries[1]["exc_info"]
    assert "s3cr3t" not in "".join(lines)


def test_log_format_goes_before_or_after_the_verb_and_text_is_the_default(restore_logging):
    parser = build_parser()
    assert parser.parse_args(["--log-format", "json", "list"]).log_format == "json"
    assert parser.parse_args(["list", "--log-format", "json"]).log_format == "json"
    assert parser.parse_args(["list"]).log_format == "text"
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["list", "--log-format", "xml"])
    assert exited.value.code == errors.USAGE


def test_run_s_progress_lines_become_json_log_lines(capsys, restore_logging):
    logs.configure("json")
    stream = logs.progress_stream("json")
    stream.write("[orders] batch 3: 10 rows, 5 rows/s, lag 0\n[orders] restart 1 in 1.0s")
    stream.write(" after: broker gone\n")
    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(e["logger"], e["level"], e["message"]) for e in entries] == [
        (logs.PROGRESS, "INFO", "[orders] batch 3: 10 rows, 5 rows/s, lag 0"),
        (logs.PROGRESS, "INFO", "[orders] restart 1 in 1.0s after: broker gone")]
    assert logs.progress_stream("text") is None  # stderr, as ever
