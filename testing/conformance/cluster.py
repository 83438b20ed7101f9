"""Faults and evidence that exist only on a Spark cluster, for the cluster
scenarios: an executor killed whole, and Spark's event log read back to see
where each task attempt ran.

An *executor* on a standalone cluster is a JVM (``CoarseGrainedExecutorBackend``)
started by a worker, with a Python daemon and its forked Python workers
beneath it (in process groups of their own). When a node loses an executor
(the OOM killer, a crash, a preempted container) all of them go:
:func:`kill_executor` finds the executor JVM above a Python worker and
SIGKILLs it and everything below it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil

#: A cluster job's Spark settings: executors start in a JVM of their own,
#: which the quick compiler starts sooner; one attempt per task more than a
#: local test run allows.
CLUSTER_CONF = {
    "spark.executor.memory": "768m",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.task.maxFailures": "4",
}


def cluster_env(master: str, **conf: str) -> dict[str, str]:
    """The environment of a conformance job on the cluster at ``master``
    (``run_scenario``'s ``env``), with ``conf`` over ``CLUSTER_CONF``."""
    return {"EOSKIT_TEST_MASTER": master, "EOSKIT_TEST_SPARK_CONF": json.dumps({**CLUSTER_CONF, **conf})}


EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executor_of(pid: int) -> int:
    """The executor JVM that ``pid`` (a Python worker) runs under."""
    try:
        lineage = [psutil.Process(pid), *psutil.Process(pid).parents()]
    except psutil.NoSuchProcess:
        lineage = []
    for process in lineage:
        try:
            if EXECUTOR_MAIN in " ".join(process.cmdline()):
                return process.pid
        except psutil.Error:
            continue
    raise LookupError(f"process {pid} does not run under a Spark executor ({EXECUTOR_MAIN}): "
                      "is the job on a cluster?")


def kill_executor(pid: int) -> list[int]:
    """SIGKILL the executor running ``pid``: its JVM first, then every
    process beneath it. The pids killed, the JVM's first."""
    jvm = psutil.Process(executor_of(pid))
    doomed = [jvm, *jvm.children(recursive=True)]
    for victim in doomed:
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            pass
    return [victim.pid for victim in doomed]


@dataclass(frozen=True)
class TaskAttempt:
    stage: int
    index: int
    attempt: int
    executor: str
    failed: bool
    reason: str


@dataclass(frozen=True)
class EventLog:
    """What Spark's event log (``spark.eventLog.enabled``, uncompressed:
    ``spark.eventLog.compress=false``) says of an application: every finished task attempt, and each executor's worker (the
    address of the worker web UI serving its logs)."""

    tasks: tuple[TaskAttempt, ...]
    workers: dict[str, str]

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> "EventLog":
        tasks, workers = [], {}
        # Spark 4 writes each application's log as a folder of rolling
        # files, beside Hadoop's hidden .crc files.
        for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
            if path.name.startswith("."):
                continue
            for line in path.read_text().splitlines():
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                if event.get("Event") == "SparkListenerTaskEnd":
                    info = event["Task Info"]
                    reason = event.get("Task End Reason", {}).get("Reason", "")
                    tasks.append(TaskAttempt(event["Stage ID"], info["Index"], info["Attempt"],
                                             info["Executor ID"], bool(info.get("Failed")), reason))
                elif event.get("Event") == "SparkListenerExecutorAdded":
                    urls = event["Executor Info"].get("Log Urls") or {}
                    address = next((urlsplit(u).netloc for u in urls.values()), "")
                    workers[event["Executor ID"]] = address or event["Executor Info"].get("Host", "")
        return cls(tuple(tasks), workers)

    def retried_elsewhere(self) -> list[tuple[TaskAttempt, TaskAttempt]]:
        """(failed attempt, successful attempt) pairs of one task that ran on
        executors of different workers."""
        succeeded = {(t.stage, t.index): t for t in self.tasks if not t.failed}
        pairs = []
        for failed in (t for t in self.tasks if t.failed):
            done = succeeded.get((failed.stage, failed.index))
            if done and self.workers.get(done.executor) != self.workers.get(failed.executor):
                pairs.append((failed, done))
        return pairs
