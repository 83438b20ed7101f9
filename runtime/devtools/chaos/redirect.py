"""A job pointed at its pinned input and a scratch copy of its sink.

``eoskit chaos`` checks the job once here (``check``), then runs it with
``eoskit run`` on a small job file of its own (``JOB_FILE``) that loads the
user's job and hands back ``redirected(...)``: the same pipeline (transform,
settings, Spark configuration) with the source bounded to the pin and the
sink writing into the scratch target. Nothing of the job's real target is
ever written: a sink that cannot be redirected is refused before anything
runs. With ``--records``, the source reads the scratch input the command
filled (``Fillable.scratch_input``), never the job's real input.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from eoskit.runtime.cli.errors import UsageError
from eoskit.runtime.job.components import Fillable, Redirectable, Replayable, ScratchInput, Source
from eoskit.runtime.job.jobfile import load_pipeline
from eoskit.runtime.job.pipeline import Pipeline


class ChaosRefusedError(UsageError):
    """The job cannot be run by ``eoskit chaos``: its sink cannot be
    redirected, its source cannot be replayed (or filled, for ``--records``),
    or its input is empty."""


#: The job file each run of ``eoskit chaos`` starts with ``eoskit run``:
#: ``{spec}`` is the path of the run's spec (JSON: the user's job file, the
#: pin, the scratch suffix, and the scratch input's suffix with ``--records``).
JOB_FILE = '''"""Written by eoskit chaos: the job {job!r} on its pinned input, into a scratch target."""
from eoskit.runtime.devtools.chaos.redirect import redirected

pipeline = redirected({spec!r})
'''


def check(pipeline: Pipeline) -> None:
    """Refuse, naming the cause, a job ``eoskit chaos`` cannot run."""
    if not isinstance(pipeline.sink, Redirectable):
        raise ChaosRefusedError(
            f"the sink {pipeline.sink.describe()} cannot be redirected to a scratch target, and "
            "eoskit chaos never writes to a job's real target (eoskit's PostgreSQL, MySQL, "
            "Kafka and files sinks can)")
    if not isinstance(pipeline.source, Replayable):
        raise ChaosRefusedError(
            f"the source {pipeline.source.describe()} cannot be pinned and replayed "
            "(eoskit-kafka can): the runs would not read the same input")


def scratch_input(source: Source, suffix: str) -> ScratchInput:
    """The scratch input ``suffix`` of ``source`` (``--records``); refused,
    naming the source, when it has none."""
    if not isinstance(source, Fillable):
        raise ChaosRefusedError(
            f"--records: the source {source.describe()} cannot read a scratch input filled with "
            "generated records (eoskit-kafka can), and eoskit chaos never writes to a job's "
            "real input")
    return source.scratch_input(suffix)


def redirect(pipeline: Pipeline, pin: dict, suffix: str, input_suffix: str | None = None) -> Pipeline:
    """``pipeline`` reading exactly ``pin`` (of the scratch input
    ``input_suffix``, when given) and writing into the scratch target ``suffix``."""
    check(pipeline)
    assert isinstance(pipeline.source, Replayable) and isinstance(pipeline.sink, Redirectable)
    source = pipeline.source
    if input_suffix is not None:
        source = scratch_input(source, input_suffix).source()
    assert isinstance(source, Replayable)
    redirected = copy.copy(pipeline)
    redirected.source = source.bounded(pin)
    redirected.sink = pipeline.sink.scratch(suffix).sink()
    return redirected


def write_spec(folder: Path, job: Path, pin: dict, suffix: str, input_suffix: str | None = None) -> Path:
    """The run's spec and job file in ``folder``; the job file's path."""
    spec = folder / "chaos-run.json"
    fields = {"job": str(job.resolve()), "pin": pin, "suffix": suffix}
    if input_suffix is not None:
        fields["input"] = input_suffix
    spec.write_text(json.dumps(fields))
    job_file = folder / "eoskit_chaos_run.py"
    job_file.write_text(JOB_FILE.format(job=str(job), spec=str(spec)))
    return job_file


def redirected(spec_path: str) -> Pipeline:
    """In the run's driver: the user's job, redirected as its spec says."""
    spec = json.loads(Path(spec_path).read_text())
    return redirect(load_pipeline(spec["job"]), spec["pin"], spec["suffix"], spec.get("input"))
