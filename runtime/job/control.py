"""The control plane of a running job, kept beside its checkpoint.

A job is identified by its checkpoint directory. ``eoskit run`` holds a run
record there (``eoskit/control/run.json``: pid, host, job, heartbeat) for as
long as it runs; commands that address a running job (``eoskit savepoint
trigger``, ``eoskit stop``) drop a request file under
``eoskit/control/requests/`` and wait for the job's answer under
``eoskit/control/answers/``. The run loop reads requests at its poll ticks
and acts on them at a batch boundary.

Files, not sockets: the checkpoint directory is the one thing a job and the
commands that address it both know, on any file system fsspec reaches.

- Two jobs on one checkpoint: the second finds a live run record (a
  heartbeat newer than ``STALE_AFTER_S``, and on this host a live pid) and is
  refused, naming the first.
- A command for a directory no job runs on finds no live run record and
  says so at once.
"""

from __future__ import annotations

import json
import os
import posixpath
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import fsspec

from eoskit.core.fs import fs_path
from eoskit.twophase.identity import RUN_RECORD, qualified_location
from eoskit.twophase.verdicts import Verdict

_RUN = posixpath.basename(RUN_RECORD)
_STATUS = "status.json"
HEARTBEAT_S = 2.0
STALE_AFTER_S = 15.0


class ControlError(RuntimeError):
    """A command cannot reach the job it names, or a second job would share a checkpoint."""

    #: eoskit.twophase.verdicts: a restart cannot fix it.
    verdict: ClassVar[Verdict] = Verdict.PERMANENT


@dataclass(frozen=True)
class Request:
    id: str
    kind: str  # "savepoint", "stop" or "cancel"
    target: str | None = None  # savepoint target


class ControlDir:
    """``<checkpoint>/eoskit/control``."""

    def __init__(self, checkpoint: str, storage_options: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """``storage_options``: fsspec options per protocol (``{"s3": {...}}``),
        as ``--storage-option`` gives them; without, fsspec's configuration."""
        self.checkpoint = qualified_location(checkpoint)
        self.root = fs_path(self.checkpoint).rstrip("/") + "/" + posixpath.dirname(RUN_RECORD)
        options = dict((storage_options or {}).get(fsspec.utils.get_protocol(self.root), {}))
        self.fs, self.path = fsspec.core.url_to_fs(self.root, **options)

    def _file(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def _write(self, name: str, payload: dict[str, Any]) -> None:
        target = self._file(name)
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        temporary = f"{target}.{uuid.uuid4().hex}.tmp"
        self.fs.pipe_file(temporary, json.dumps(payload, sort_keys=True).encode())
        self.fs.mv(temporary, target)

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.fs.cat_file(self._file(name)))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _remove(self, name: str) -> None:
        try:
            self.fs.rm_file(self._file(name))
        except FileNotFoundError:
            pass

    # -- the run record ----------------------------------------------------

    def live_run(self) -> dict[str, Any] | None:
        """The run record of a job running now, or None."""
        record = self._read(_RUN)
        return record if record is not None and is_live(record) else None

    def claim(self, job: str, app: dict[str, Any] | None = None) -> "RunRecord":
        """Become the job running on this checkpoint, or refuse naming the other."""
        other = self.live_run()
        if other is not None and other.get("pid") != os.getpid():
            raise ControlError(
                f"checkpoint {self.checkpoint} is in use by job {other.get('job')!r} (pid "
                f"{other.get('pid')} on {other.get('host')}, heartbeat "
                f"{time.time() - other.get('heartbeat', 0):.0f} s ago): two jobs must not share a "
                "checkpoint directory; stop it first (eoskit stop --checkpoint-dir ...)")
        record = RunRecord(self, job, app)
        record.beat()
        return record

    # -- the run's status (listeners.CheckpointStatus) ---------------------

    def write_status(self, state: dict[str, Any]) -> None:
        self._write(_STATUS, state)

    def status(self) -> dict[str, Any] | None:
        """The last status a run wrote here, or None."""
        return self._read(_STATUS)

    def last_run(self) -> dict[str, Any] | None:
        """The run record, live or not (a run that was killed leaves it)."""
        return self._read(_RUN)

    # -- requests and answers ---------------------------------------------

    def send(self, kind: str, target: str | None = None) -> Request:
        if self.live_run() is None:
            raise ControlError(f"no job is running on checkpoint {self.checkpoint} (no live "
                               "run record under eoskit/control)")
        request = Request(uuid.uuid4().hex[:12], kind, target)
        self._write(f"requests/{request.id}.json",
                    {"id": request.id, "kind": kind, "target": target, "at": time.time()})
        return request

    def pending(self) -> list[Request]:
        try:
            names = sorted(self.fs.ls(self._file("requests"), detail=False))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if not name.endswith(".json"):
                continue
            record = self._read(f"requests/{posixpath.basename(name)}")
            if record is not None:
                found.append(Request(record["id"], record["kind"], record.get("target")))
        return found

    def answer(self, request: Request, **payload: Any) -> None:
        self._write(f"answers/{request.id}.json", {"id": request.id, **payload})
        self._remove(f"requests/{request.id}.json")

    def wait_answer(self, request: Request, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self._read(f"answers/{request.id}.json")
            if answer is not None:
                self._remove(f"answers/{request.id}.json")
                return answer
            if self.live_run() is None:
                raise ControlError(f"the job on {self.checkpoint} ended before answering")
            time.sleep(0.2)
        raise ControlError(f"the job on {self.checkpoint} did not answer within {timeout:.0f} s")


class RunRecord:
    """This process's claim on a checkpoint, refreshed by ``beat``."""

    def __init__(self, control: ControlDir, job: str, app: dict[str, Any] | None = None) -> None:
        self.control = control
        self.job = job
        #: The Spark application: its id and master (``eoskit list --cluster``).
        self.app = app
        self.started = time.time()
        self._last = 0.0

    def beat(self, force: bool = True) -> None:
        now = time.time()
        if force or now - self._last >= HEARTBEAT_S:
            self.control._write(_RUN, {"pid": os.getpid(), "host": socket.gethostname(),
                                             "job": self.job, "started": self.started,
                                             "heartbeat": now, "app": self.app})
            self._last = now

    def release(self) -> None:
        self.control._remove(_RUN)


def is_live(record: Mapping[str, Any]) -> bool:
    """Whether a run record is a job running now: a heartbeat newer than
    ``STALE_AFTER_S``, and on this host a live pid."""
    if time.time() - record.get("heartbeat", 0) > STALE_AFTER_S:
        return False
    return record.get("host") != socket.gethostname() or _pid_alive(record.get("pid", -1))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


class LocalRuns:
    """The jobs ``eoskit run`` runs on this machine, for ``eoskit list``: one
    small file per run (``<pid>.json``: its checkpoint, job, start) under
    ``~/.cache/eoskit/runs``, removed when the run ends; a run killed
    without its cleanup leaves one, which is dropped once its pid is gone."""

    def __init__(self, root: str | None = None) -> None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.root = root or os.environ.get("EOSKIT_RUNS_DIR") or os.path.join(base, "eoskit", "runs")

    def add(self, checkpoint: str, job: str, app: dict[str, Any] | None = None) -> str | None:
        """Register this process's run; None where the folder cannot be
        written (a read-only home): the run goes on, unlisted."""
        path = os.path.join(self.root, f"{os.getpid()}.json")
        temporary = f"{path}.tmp"
        try:
            os.makedirs(self.root, exist_ok=True)
            with open(temporary, "w") as handle:
                json.dump({"pid": os.getpid(), "checkpoint": checkpoint, "job": job,
                           "started": time.time(), "app": app}, handle)
            os.replace(temporary, path)
        except OSError:
            return None
        return path

    @staticmethod
    def remove(path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def running(self) -> list[dict[str, Any]]:
        """The runs whose process is alive, oldest first; the others' files removed."""
        found = []
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(self.root, name)
            try:
                with open(path) as handle:
                    run = json.load(handle)
            except (OSError, json.JSONDecodeError):
                continue
            if _pid_alive(int(run.get("pid", -1))):
                found.append(run)
            else:
                self.remove(path)
        return sorted(found, key=lambda r: r.get("started", 0))

