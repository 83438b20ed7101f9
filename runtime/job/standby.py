"""A standby driver: the restart without the cold start (issue 33, item 3).

``eoskit run job.py --checkpoint-dir DIR --standby`` is started beside the
running job, as Flink keeps standby JobManagers. It pays the cold start
while the job runs, and takes over when the job's driver dies. Top to
bottom:

1. **Warm.** Its session starts, as any run's does, and runs the warm-up
   query (``eoskit.runtime.spark.warmup``) on a scratch checkpoint: the JVM
   loads and compiles a micro-batch's path, and in local mode the zygote
   starts and preloads PySpark, pyarrow and the connectors' client
   libraries. Nothing of the job is touched: no source, no sink, not its
   checkpoint.
2. **Watch the run record** (``eoskit/control/run.json`` beside the
   checkpoint, every ``POLL_S``), which the running job's heartbeat keeps
   live (``control.is_live``):
   - none yet: the job has not started; wait;
   - live: the job runs; wait;
   - gone after it was live: the job ended as it decided to (caught up,
     stopped, cancelled, or failed beyond its restart strategy), and its
     run released the record. The standby ends too, with nothing to do:
     it takes over from a dead driver, never against a decision;
   - there but not live: the driver died (on this host its pid is gone,
     at once; on another, its heartbeat is ``STALE_AFTER_S`` old). Take
     over.
3. **Take over.** The caller runs the job as ``eoskit run`` does. Its
   claim of the checkpoint is the fence: it refuses a live record, so two
   drivers never share the checkpoint (a second standby on the same
   checkpoint loses the claim to the first and ends naming it). The run
   starts from the checkpoint as any restart does: the sinks' start-up
   sweep settles the dead driver's transactions, the batch in flight is
   replayed.

One standby serves one failure: after taking over it is the running job,
and a new standby is started beside it, as a supervisor restarts a process.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, TextIO

from pyspark.sql import SparkSession

from eoskit.runtime.job.control import ControlDir, is_live
from eoskit.runtime.spark.warmup import warm_up

#: How often the run record is read while standing by: the most a takeover
#: waits after a driver on this host died (a small file read, locally or
#: one request to an object store).
POLL_S = 0.1


def stand_by(spark: SparkSession, control: ControlDir, name: str, out: TextIO | None = None,
             poll_s: float = POLL_S) -> bool:
    """Steps 1 and 2: warm ``spark``, then wait for the job's driver to die
    (True: take over) or its run to end (False). Its lines go to ``out``
    (default stderr, where ``eoskit run`` writes its progress)."""
    out = out or sys.stderr
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="eoskit-standby-") as scratch:
        warm_up(spark, os.path.join(scratch, "checkpoint"))
    _say(out, name, f"warm in {time.monotonic() - started:.1f} s; standing by for the run on "
                    f"{control.checkpoint}")
    return wait_for_turn(control, name, out, poll_s)


def wait_for_turn(control: ControlDir, name: str, out: TextIO, poll_s: float = POLL_S,
                  sleep: Callable[[float], Any] = time.sleep) -> bool:
    """Step 2: True when the run record is there but not live (its driver
    died), False when a record seen live is gone (the run ended)."""
    watched: dict[str, Any] | None = None
    while True:
        record = control.last_run()
        if record is None:
            if watched is not None:
                _say(out, name, f"the run of pid {watched.get('pid')} ended and released the "
                                "checkpoint: nothing to take over")
                return False
        elif is_live(record):
            if watched is None or _who(record) != _who(watched):
                _say(out, name, f"the run of pid {record.get('pid')} on {record.get('host')} is live")
            watched = record
        else:
            ago = time.time() - record.get("heartbeat", 0)
            _say(out, name, f"the run of pid {record.get('pid')} on {record.get('host')} is dead "
                            f"(heartbeat {ago:.1f} s ago): taking over")
            return True
        sleep(poll_s)


def _who(record: dict[str, Any]) -> tuple[Any, Any, Any]:
    return record.get("pid"), record.get("host"), record.get("started")


def _say(out: TextIO, name: str, line: str) -> None:
    out.write(f"[{name}] standby: {line}\n")
    out.flush()
