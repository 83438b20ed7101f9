"""``eoskit chaos --records N --generator SPEC`` without Spark or a broker:
the SPEC found in a file and in a module, or refused saying what is wrong;
every record shape normalised to bytes, every other refused naming its index;
a count other than N refused saying how many came; the options refused alone
on the command line; the command's preparation filling a scratch input (never
the job's input) that the runs' job files read; the Kafka source's scratch
input refused for more than one topic."""

from __future__ import annotations

import io
import itertools
import json
import textwrap

import pytest

from eoskit.runtime.devtools.chaos.generate import GeneratorError, generate, load, record, records
from eoskit.runtime.job.components import Fillable, InputRecord, ScratchInput

SPEC = "the.spec:make"


@pytest.fixture
def gen_file(tmp_path):
    """A generator file: ``SOURCE`` written to ``tmp_path/gen.py``; its path."""
    def write(source: str, name: str = "gen.py") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)
    return write


# -- the SPEC -------------------------------------------------------------------------


def test_a_function_in_a_file_is_called_once_with_n(gen_file):
    path = gen_file("""
        calls = []
        def make(n):
            calls.append(n)
            return [f"v{i}" for i in range(n)]
    """)
    made = generate(f"{path}:make", 3)
    assert made == [InputRecord(None, b"v0"), InputRecord(None, b"v1"), InputRecord(None, b"v2")]
    assert load(f"{path}:make").__module__ == "eoskit_generator_gen"


def test_a_function_in_a_module_is_imported_by_its_name(tmp_path, monkeypatch):
    package = tmp_path / "shopgen"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "orders.py").write_text("def make(n):\n    return [(str(i), '{}') for i in range(n)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert generate("shopgen.orders:make", 2) == [InputRecord(b"0", b"{}"), InputRecord(b"1", b"{}")]


@pytest.mark.parametrize("spec, says", [
    ("gen.py", "give path/to/file.py:function or package.module:function"),
    (":make", "give path/to/file.py:function or package.module:function"),
    ("gen.py:", "give path/to/file.py:function or package.module:function"),
    ("no/such/gen.py:make", "there is no file no/such/gen.py"),
    ("no_such_module_here:make", "there is no module no_such_module_here"),
    ("json:no_such_function", "json has no function 'no_such_function'"),
    ("json.decoder:__name__", "json.decoder's '__name__' is of type str, not a function"),
])
def test_a_bad_spec_is_one_line_naming_the_option(spec, says):
    with pytest.raises(GeneratorError) as refused:
        load(spec)
    assert str(refused.value).startswith(f"--generator {spec!r}: {says}")
    assert "\n" not in str(refused.value)


def test_a_file_that_fails_to_load_and_a_function_that_raises_are_named(gen_file):
    broken = gen_file("import no_such_dependency_here\n", "broken.py")
    with pytest.raises(GeneratorError, match="broken.py failed to load: ModuleNotFoundError: No module"):
        load(f"{broken}:make")
    raising = gen_file("def make(n):\n    raise RuntimeError('no orders today')\n", "raising.py")
    with pytest.raises(GeneratorError, match="the function raised RuntimeError: no orders today"):
        generate(f"{raising}:make", 2)


# -- the records ----------------------------------------------------------------------


@pytest.mark.parametrize("given, expected", [
    (b"\x00raw", InputRecord(None, b"\x00raw")),
    ("café", InputRecord(None, "café".encode())),
    (("k", "v"), InputRecord(b"k", b"v")),
    ((None, b"v"), InputRecord(None, b"v")),
    ((b"k", None), InputRecord(b"k", None)),
    ({"value": "v"}, InputRecord(None, b"v")),
    ({"key": "k", "value": None}, InputRecord(b"k", None)),
    ({"key": b"k", "value": "v", "headers": [("trace", "t1"), ("raw", b"\x01")], "partition": 2},
     InputRecord(b"k", b"v", (("trace", b"t1"), ("raw", b"\x01")), 2)),
    ({"value": "v", "headers": {"a": "1", "b": b"2"}}, InputRecord(None, b"v", (("a", b"1"), ("b", b"2")))),
    ({"value": "v", "headers": [], "partition": 0}, InputRecord(None, b"v", (), 0)),
])
def test_each_record_shape_is_normalised_to_bytes(given, expected):
    assert record(given, 0, SPEC) == expected


@pytest.mark.parametrize("given, says", [
    (7, "is of type int; a record is a value (bytes or str), a (key, value) tuple, or a dict"),
    (None, "is of type NoneType"),
    (["k", "v"], "is of type list"),
    (("k", "v", "x"), "is a tuple of 3 items; a tuple must be (key, value)"),
    ((1, "v"), "has a key of type int; expected bytes, str or None"),
    (("k", 2.5), "has a value of type float"),
    ({"key": "k"}, "has no 'value' (None for a record without a value)"),
    ({"value": "v", "topic": "t"}, "has the key 'topic'; a record's keys are among key, value, headers, partition"),
    ({"value": "v", "headers": "a=1"}, "has headers of type str; expected a list of (name, value) pairs or a dict"),
    ({"value": "v", "headers": [("a",)]}, "has the header ('a',); a header is a (name, value) pair"),
    ({"value": "v", "headers": [(1, b"x")]}, "has a header name of type int; expected str"),
    ({"value": "v", "headers": {"a": 1}}, "has the header 'a' of type int; expected bytes or str"),
    ({"value": "v", "partition": -1}, "has the partition -1; expected an int >= 0"),
    ({"value": "v", "partition": True}, "has the partition True"),
    ({"value": "v", "partition": "0"}, "has the partition '0'"),
])
def test_any_other_record_is_refused_naming_its_index_and_what_is_wrong(given, says):
    with pytest.raises(GeneratorError) as refused:
        records(["ok", "ok", given], 3, SPEC)
    assert str(refused.value).startswith(f"--generator {SPEC!r}: the record at index 2 {says}")


@pytest.mark.parametrize("made, says", [
    (["a", "b"], "returned 2 records; --records asked for 3"),
    (["a", "b", "c", "d"], "returned 4 records; --records asked for 3"),
    (iter(["a", "b"]), "returned 2 records; --records asked for 3"),
    (itertools.repeat("a"), "returned more than 3 records; --records asked for 3"),
    (None, "returned a value of type NoneType, not an iterable of records"),
    ("abc", "returned a value of type str, not an iterable of records"),
    ({"value": "v"}, "returned a value of type dict, not an iterable of records"),
])
def test_a_count_other_than_n_is_refused_saying_how_many_came(made, says):
    with pytest.raises(GeneratorError) as refused:
        records(made, 3, SPEC)
    assert str(refused.value).startswith(f"--generator {SPEC!r} {says}")


def test_a_generator_that_fails_while_read_says_after_how_many(gen_file):
    path = gen_file("""
        def make(n):
            yield "a"
            raise KeyError("sku")
    """)
    with pytest.raises(GeneratorError, match=r"reading its records raised KeyError: 'sku' after 1$"):
        generate(f"{path}:make", 2)


# -- the command line -----------------------------------------------------------------


@pytest.mark.parametrize("argv, says", [
    (["--records", "10"], "eoskit chaos: --records needs --generator SPEC (path/to/file.py:function or "
                          "package.module:function): the function that makes the records"),
    (["--generator", "gen.py:make"], "eoskit chaos: --generator needs --records N: how many records it makes"),
    (["--records", "0", "--generator", "gen.py:make"],
     "eoskit chaos: --records 0: give how many records to generate (1 or more)"),
])
def test_records_and_generator_come_together(argv, says, tmp_path, capsys):
    from eoskit.runtime.cli.main import build_parser, main

    job = tmp_path / "never_loaded.py"
    args = build_parser().parse_args(["chaos", str(job), "--records", "5", "--generator", "g.py:f"])
    assert (args.records, args.generator) == (5, "g.py:f")
    assert main(["chaos", str(job), *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines()[0] == says


# -- the command's preparation, with stand-ins for the job's source and sink ---------


class Sink:
    def write_stream(self, df):  # pragma: no cover - never started here
        raise AssertionError

    def describe(self) -> str:
        return "a sink"


class Scratch:
    def __init__(self, suffix: str, log: list[str]) -> None:
        self.name, self.suffix, self.log = f"scratch {suffix}", suffix, log

    def sink(self) -> Sink:
        return Sink()

    def create(self) -> None:
        self.log.append(f"create {self.name}")

    def rows(self):
        return (), [], ()

    def drop(self) -> None:
        self.log.append(f"drop {self.name}")


class RedirectableSink(Sink):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def scratch(self, suffix: str) -> Scratch:
        return Scratch(suffix, self.log)


class Source:
    """A replayable source reading ``topic``."""

    def __init__(self, topic: str, log: list[str]) -> None:
        self.topic, self.log = topic, log

    def read_stream(self, spark):  # pragma: no cover
        raise AssertionError

    def describe(self) -> str:
        return f"a source of {self.topic}"

    def pin(self) -> dict:
        return {"topic": self.topic, "end": 5}

    def bounded(self, pin: dict) -> "Source":
        bounded = Source(self.topic, self.log)
        bounded.pinned = pin
        return bounded

    def describe_pin(self, pin: dict) -> str:
        return f"{pin['topic']}: 5 offsets"


class FakeScratchInput:
    def __init__(self, original: "FillableSource", suffix: str) -> None:
        self.original, self.topic = original, f"{original.topic}-{suffix}"
        self.name = f"topic {self.topic}"
        self.produced: list[InputRecord] = []

    def create(self) -> None:
        self.original.log.append(f"create {self.name}")

    def produce(self, records) -> int:
        self.original.log.append(f"produce {len(records)} into {self.name}")
        return len(records)

    def source(self) -> Source:
        return Source(self.topic, self.original.log)

    def drop(self) -> None:
        self.original.log.append(f"drop {self.name}")


class FillableSource(Source):
    def scratch_input(self, suffix: str) -> FakeScratchInput:
        return FakeScratchInput(self, suffix)


def prepared(tmp_path, monkeypatch, source, generator: str, count: int = 5):
    from eoskit.runtime.devtools.chaos import runner
    from eoskit.runtime.devtools.chaos.runner import Chaos, ChaosSettings
    from eoskit.runtime.job.pipeline import Pipeline

    pipeline = Pipeline("job", source, RedirectableSink(source.log))
    monkeypatch.setattr(runner, "load_pipeline", lambda path: pipeline)
    settings = ChaosSettings(tmp_path / "job.py", seed=1, workdir=tmp_path / "runs",
                             records=count, generator=generator)
    return Chaos(settings, out=io.StringIO())


def test_the_stand_ins_are_what_the_command_asks_for():
    source = FillableSource("orders", [])
    assert isinstance(source, Fillable) and isinstance(source.scratch_input("x"), ScratchInput)


def test_the_generated_records_go_to_a_scratch_input_that_every_run_reads(tmp_path, monkeypatch, gen_file):
    path = gen_file("def make(n):\n    return [str(i) for i in range(n)]\n")
    log: list[str] = []
    chaos = prepared(tmp_path, monkeypatch, FillableSource("orders", log), f"{path}:make")
    chaos.prepare()
    token = chaos.token
    scratch_in = f"topic orders-chaos{token}i"
    assert log[:2] == [f"create {scratch_in}", f"produce 5 into {scratch_in}"]
    assert [s.name for s in chaos.created] == [scratch_in] + [f"scratch chaos{token}{r}" for r in "rdx"]
    said = chaos.out.getvalue().splitlines()
    assert said[:2] == [f"eoskit chaos: input: 5 records generated by {path}:make into {scratch_in}",
                        f"eoskit chaos: input pinned: orders-chaos{token}i: 5 offsets"]
    assert chaos.pin == {"topic": f"orders-chaos{token}i", "end": 5}
    for run in chaos.runs:
        spec = json.loads((run.folder / "chaos-run.json").read_text())
        assert spec["input"] == f"chaos{token}i" and spec["pin"] == chaos.pin
    chaos.cleanup()
    assert f"drop {scratch_in}" in log and not chaos.created


def test_a_run_s_job_reads_the_scratch_input_its_spec_names(tmp_path):
    from eoskit.runtime.devtools.chaos.redirect import redirect, write_spec
    from eoskit.runtime.job.pipeline import Pipeline

    log: list[str] = []
    original = Pipeline("job", FillableSource("orders", log), RedirectableSink(log))
    moved = redirect(original, {"end": 5}, "chaosab12r", "chaosab12i")
    assert moved.source.topic == "orders-chaosab12i" and moved.source.pinned == {"end": 5}
    assert redirect(original, {"end": 5}, "chaosab12r").source.topic == "orders"
    assert log == []  # side-effect free: nothing created, nothing produced
    job = tmp_path / "orders.py"
    job.write_text("")
    write_spec(tmp_path, job, {"end": 5}, "chaosab12r", "chaosab12i")
    assert json.loads((tmp_path / "chaos-run.json").read_text())["input"] == "chaosab12i"


def test_records_for_a_source_that_cannot_be_filled_are_refused_before_anything_is_made(
        tmp_path, monkeypatch, gen_file):
    from eoskit.runtime.devtools.chaos.redirect import ChaosRefusedError

    path = gen_file("def make(n):\n    raise AssertionError('never called')\n")
    chaos = prepared(tmp_path, monkeypatch, Source("orders", []), f"{path}:make")
    with pytest.raises(ChaosRefusedError, match=r"^--records: the source a source of orders cannot read a "
                       r"scratch input filled with generated records \(eoskit-kafka can\)"):
        chaos.prepare()
    assert chaos.created == []


def test_a_refused_generator_leaves_nothing_created(tmp_path, monkeypatch, gen_file):
    path = gen_file("def make(n):\n    return ['only one']\n")
    log: list[str] = []
    chaos = prepared(tmp_path, monkeypatch, FillableSource("orders", log), f"{path}:make")
    with pytest.raises(GeneratorError, match="returned 1 records; --records asked for 5"):
        chaos.prepare()
    assert chaos.created == [] and log == []


# -- the Kafka source's scratch input, without a broker ------------------------------


def kafka_source(**options):
    from eoskit.connectors.kafka import KafkaSource

    return KafkaSource("localhost:9092", options)


def test_the_kafka_scratch_input_copies_one_topic_and_reads_it_from_its_beginning():
    source = kafka_source(subscribe="orders", startingOffsets="latest", maxOffsetsPerTrigger="10",
                          stopAtOffsets='{"orders": {"0": 3}}', includeHeaders="true")
    assert isinstance(source, Fillable)
    scratch = source.scratch_input("chaosab12i")
    assert isinstance(scratch, ScratchInput) and scratch.name == "topic orders-chaosab12i"
    assert scratch.source().options == {"maxOffsetsPerTrigger": "10", "includeHeaders": "true",
                                        "subscribe": "orders-chaosab12i", "startingOffsets": "earliest"}
    assert scratch.source().bootstrap_servers == "localhost:9092"
    assigned = kafka_source(assign='{"orders": [0, 2]}').scratch_input("chaosab12i")
    assert assigned.source().options == {"subscribe": "orders-chaosab12i", "startingOffsets": "earliest"}


@pytest.mark.parametrize("options, says", [
    ({"subscribePattern": "orders.*"}, "the source reads the topics of subscribePattern=orders.*; a "
     "generated input fills one scratch topic, so the source must read one topic"),
    ({"subscribe": "orders,returns"}, "the source reads 2 topics (subscribe: orders, returns)"),
    ({"assign": '{"orders": [0], "returns": [1]}'}, "the source reads 2 topics (assign: orders, returns)"),
])
def test_a_kafka_source_of_more_than_one_topic_is_refused(options, says):
    from eoskit.core.options import OptionError

    with pytest.raises(OptionError) as refused:
        kafka_source(**options).scratch_input("chaosab12i")
    assert str(refused.value).startswith(f"--records: {says}")
