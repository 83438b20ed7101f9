"""A Spark standalone cluster on this machine: one master and a few workers.

eoskit promises that a job runs unchanged on a cluster, where executors are
other processes (on other nodes, in other working directories, with their
own Python) than the driver. This harness starts such a cluster from the
installed PySpark's own ``spark-class`` (``deploy.master.Master`` and
``deploy.worker.Worker``), the way ``sbin/start-master.sh`` would, but:

- on loopback and on free ports, so that it runs beside other checkouts;
- small: each worker offers ``cores`` cores and ``memory`` to executors, and
  the daemons themselves run in 256 MB;
- everything under one folder outside the venv (the workers' work
  directories, where executors run and archives are unpacked, default
  ``SPARK_HOME/work`` inside site-packages otherwise), with the pids and
  start times in ``cluster.json``, so that ``down`` from a later process
  stops exactly what ``up`` started;
- optionally with workers whose own Python (``python3`` on their PATH) is a
  bare virtualenv without eoskit, as on nodes nobody installed eoskit on.

``down`` stops the workers (which kill their executors), then the master,
then anything still running in a worker's work directory (executors' Python
workers run in process groups of their own); the work directories are kept
for a look at executor logs until the next ``up`` starts a cluster anew.
See docs/dev-services.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.request
import venv
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from .endpoints import HOST
from .errors import MissingBinaryError, ServiceStartError
from .ports import pick_free_port
from .processes import ENDED, ProcessRef, is_alive, start_process, stop_process, tail
from .state import locked

DEFAULT_ROOT = ".eoskit/cluster"
STATE_FILE = "cluster.json"
#: The variable ``eoskit.runtime.spark.session.get_session`` takes the master from.
ENV_MASTER = "EOSKIT_SPARK_MASTER"
#: Heap of the master and worker daemons (not of executors).
DAEMON_MEMORY = "256m"
#: Long-lived but small daemons: the quick compiler and the serial collector.
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# Loopback requests must never go through an HTTP(S)_PROXY from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class NodeState:
    """One daemon: its RPC and web UI ports, pid and start time."""

    name: str
    port: int
    webui_port: int
    pid: int | None = None
    start_time: int | None = None

    @property
    def ref(self) -> ProcessRef | None:
        return None if self.pid is None else ProcessRef(self.pid, self.start_time)

    def alive(self) -> bool:
        ref = self.ref
        return ref is not None and is_alive(ref)


@dataclass
class ClusterState:
    master: NodeState | None = None
    workers: list[NodeState] = field(default_factory=list)
    #: The workers' own Python when it is a bare virtualenv (else None).
    worker_python: str | None = None

    def nodes(self) -> list[NodeState]:
        return ([self.master] if self.master else []) + self.workers


def spark_home() -> Path:
    """The installed PySpark's Spark distribution (``bin/spark-class``, ``jars/``)."""
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError as exc:
        raise MissingBinaryError("the Spark cluster needs PySpark: pip install pyspark") from exc
    home = Path(_find_spark_home())
    if not (home / "bin" / "spark-class").is_file():
        raise MissingBinaryError(f"{home}/bin/spark-class not found: a PySpark installation "
                                 "with its Spark distribution (pip install pyspark) is needed")
    return home


def master_info(webui_port: int, timeout: float = 3.0) -> dict:
    """The master's own view of the cluster (its web UI's ``/json``)."""
    with _DIRECT.open(f"http://{HOST}:{webui_port}/json/", timeout=timeout) as response:
        return json.loads(response.read())


class SparkCluster:
    """Start, stop and inspect the standalone cluster of one folder (from any
    process: the state file ties ``up``, ``status`` and ``down`` together)."""

    def __init__(self, root: str | os.PathLike[str] = DEFAULT_ROOT, workers: int = 2,
                 cores: int = 1, memory: str = "1g", bare_worker_python: bool = False,
                 timeout: float = 90.0) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"a cluster needs at least one worker with one core "
                             f"(workers={workers}, cores={cores})")
        self.root = Path(root).absolute()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.bare_worker_python = bare_worker_python
        self.timeout = timeout

    # -- public API -------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    def master_url(self) -> str | None:
        """``spark://127.0.0.1:PORT`` while the master runs, else None."""
        state = self._load()
        if state.master is None or not state.master.alive():
            return None
        return f"spark://{HOST}:{state.master.port}"

    def up(self) -> str:
        """Start the cluster unless this folder's is already running (with
        every worker registered); the master URL."""
        home = spark_home()
        with locked(self.root):
            state = self._load()
            if self._healthy(state):
                return f"spark://{HOST}:{state.master.port}"  # type: ignore[union-attr]
            self._stop_all(state)  # a half-running cluster is started anew
            state = ClusterState()
            try:
                self._start(home, state)
            except BaseException:
                self._stop_all(state)
                raise
        return f"spark://{HOST}:{state.master.port}"  # type: ignore[union-attr]

    def down(self) -> None:
        """Stop every process of this folder's cluster (work dirs are kept)."""
        if not self.state_path.is_file():
            return
        with locked(self.root):
            self._stop_all(self._load())

    def status(self) -> dict[str, str]:
        """Node name -> ``"running on ... (pid N)"`` or ``"stopped"``."""
        state = self._load()
        if state.master is None:
            return {"master": "stopped"}
        out = {}
        for node in state.nodes():
            url = (f"spark://{HOST}:{node.port}" if node is state.master else f"{HOST}:{node.port}")
            out[node.name] = (f"running on {url}, web UI http://{HOST}:{node.webui_port} "
                              f"(pid {node.pid})" if node.alive() else "stopped")
        return out

    def master_ui(self) -> str | None:
        """The running master's web UI (``eoskit list --cluster``), or None."""
        state = self._load()
        master = state.master
        return f"http://{HOST}:{master.webui_port}" if master is not None and master.alive() else None

    def pids(self) -> dict[str, int]:
        """Pids of the running daemons (each the leader of its process group)."""
        return {n.name: n.pid for n in self._load().nodes() if n.pid is not None and n.alive()}

    def work_dirs(self) -> list[Path]:
        """Where each worker runs its executors (one subfolder per application)."""
        return [self.root / f"worker-{i}" / "work" for i in range(1, self.workers + 1)]

    def leftover_processes(self) -> list[int]:
        """Live processes running in a worker's work directory: executors and
        their Python workers. None once ``down`` returned."""
        roots = [str(d) + os.sep for d in self._all_work_dirs()]
        found = []
        for process in psutil.process_iter(["cwd", "status"]):
            cwd, status = process.info["cwd"], process.info["status"]
            if process.pid == os.getpid() or cwd is None or status in ENDED:
                continue
            if any((cwd + os.sep).startswith(root) for root in roots):
                found.append(process.pid)
        return sorted(found)

    # -- internals --------------------------------------------------------

    def _load(self) -> ClusterState:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return ClusterState()
        master = data.get("master")
        return ClusterState(
            master=NodeState(**master) if master else None,
            workers=[NodeState(**w) for w in data.get("workers", [])],
            worker_python=data.get("worker_python"),
        )

    def _save(self, state: ClusterState) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        data = {"master": asdict(state.master) if state.master else None,
                "workers": [asdict(w) for w in state.workers],
                "worker_python": state.worker_python}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.state_path)

    def _healthy(self, state: ClusterState) -> bool:
        if state.master is None or not all(n.alive() for n in state.nodes()):
            return False
        if len(state.workers) != self.workers:
            return False
        try:
            return master_info(state.master.webui_port).get("aliveworkers") == self.workers
        except OSError:
            return False

    def _env(self, home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        # Nothing of the caller's own Spark setup leaks in (a master, a conf dir).
        for name in ("SPARK_CONF_DIR", "SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "MASTER",
                     "PYSPARK_SUBMIT_ARGS", "SPARK_ENV_LOADED"):
            env.pop(name, None)
        env.update({
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
            "SPARK_LOG_DIR": str(self.root / "logs"),
        })
        env.update(extra or {})
        return env

    def _start(self, home: Path, state: ClusterState) -> None:
        spark_class = str(home / "bin" / "spark-class")
        taken: set[int] = set()

        def port() -> int:
            chosen = pick_free_port(exclude=taken)
            taken.add(chosen)
            return chosen

        master = NodeState("master", port(), port())
        state.master = master
        self._launch(master, [spark_class, "org.apache.spark.deploy.master.Master",
                              "--host", HOST, "--port", str(master.port),
                              "--webui-port", str(master.webui_port)], self._env(home), state)
        self._wait(lambda: master_info(master.webui_port).get("status") == "ALIVE",
                   master, "the master did not come up")
        url = f"spark://{HOST}:{master.port}"
        worker_env: dict[str, str] = {}
        if self.bare_worker_python:
            python = self._bare_python()
            state.worker_python = str(python)
            worker_env = {"PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
                          "PYSPARK_PYTHON": str(python)}
        for index, work in enumerate(self.work_dirs(), start=1):
            worker = NodeState(f"worker-{index}", port(), port())
            local = work.parent / "local"
            # A new cluster starts with empty work dirs: the last one's
            # executor folders (logs, unpacked archives of hundreds of MB)
            # stay until then, for a look after a failed run.
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(local, ignore_errors=True)
            work.mkdir(parents=True, exist_ok=True)
            local.mkdir(parents=True, exist_ok=True)
            state.workers.append(worker)
            env = self._env(home, {**worker_env, "SPARK_LOCAL_DIRS": str(local)})
            self._launch(worker, [spark_class, "org.apache.spark.deploy.worker.Worker",
                                  "--host", HOST, "--port", str(worker.port),
                                  "--webui-port", str(worker.webui_port),
                                  "--cores", str(self.cores), "--memory", self.memory,
                                  "--work-dir", str(work), url], env, state)
        self._wait(lambda: master_info(master.webui_port).get("aliveworkers") == self.workers,
                   state.workers[-1], f"{self.workers} worker(s) did not register with the master",
                   state)

    def _launch(self, node: NodeState, argv: list[str], env: dict[str, str],
                state: ClusterState) -> None:
        log = self._log(node)
        try:
            ref = start_process(argv, log, env=env, cwd=self.root)
        except OSError as exc:
            raise ServiceStartError(f"spark {node.name}: could not start {argv[0]}: {exc}") from exc
        node.pid, node.start_time = ref.pid, ref.start_time
        self._save(state)  # recorded at once, so `down` finds it even if we crash

    def _log(self, node: NodeState) -> Path:
        return self.root / "logs" / f"{node.name}.log"

    def _wait(self, ready, node: NodeState, what: str, state: ClusterState | None = None) -> None:
        deadline = time.monotonic() + self.timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            for candidate in (state.nodes() if state else [node]):
                if not candidate.alive():
                    raise ServiceStartError(
                        f"spark {candidate.name} exited while starting; log: "
                        f"{self._log(candidate)}\n{tail(self._log(candidate))}")
            try:
                if ready():
                    return
            except (OSError, ValueError) as exc:
                last = exc
            time.sleep(0.2)
        raise ServiceStartError(f"spark cluster in {self.root}: {what} within {self.timeout:.0f} s "
                                f"(last error: {last}); log: {self._log(node)}\n{tail(self._log(node))}")

    def _bare_python(self) -> Path:
        """A virtualenv with nothing installed: a node's own Python."""
        target = self.root / "bare-python"
        python = target / "bin" / "python3"
        if not python.exists():
            # venv builds from the base interpreter: the caller's packages stay out.
            venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(target)
        return python

    def _all_work_dirs(self) -> list[Path]:
        return sorted(self.root.glob("worker-*/work"))

    def _stop_all(self, state: ClusterState) -> None:
        # Workers first: a worker stopping kills its executors.
        for node in reversed(state.nodes()):
            ref = node.ref
            if ref is not None:
                stop_process(ref, sig=signal.SIGTERM, timeout=15.0)
            node.pid = node.start_time = None
        for pid in self.leftover_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.leftover_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        if state.master is not None or state.workers:
            self._save(state)
