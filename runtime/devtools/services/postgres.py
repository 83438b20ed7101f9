"""PostgreSQL for local development: initdb into the folder, run postgres.

Two-phase commit needs ``max_prepared_transactions`` > 0, which stock
installs leave at 0; a private cluster lets us set it (and fsync off for
speed) without touching any system database.

PostgreSQL refuses to run as root, so as root the cluster is owned and run by
the ``postgres`` system user. That user must be able to reach the data dir:
if the folder sits under a directory it cannot traverse (``/root``, pytest's
0700 ``/tmp/pytest-of-root``), the data dir goes to a per-folder directory in
the system temp dir instead, recorded in the state file.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import signal
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from .base import LaunchSpec, LocalService, is_root
from .endpoints import DATABASE, HOST, PASSWORD, USER
from .errors import DevServicesError, MissingBinaryError, ServiceStartError
from .processes import run_logged, tail
from .state import ServiceState

RUN_AS = "postgres"
SETTINGS = {
    "listen_addresses": HOST,
    "unix_socket_directories": "",  # TCP only: no socket path length or permission issues
    "max_prepared_transactions": "64",
    "max_connections": "200",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


def _version_key(path: Path) -> tuple[int, ...]:
    """Sort key for /usr/lib/postgresql/<version>/bin (numeric, not lexical)."""
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.name)) or (0,)


def candidate_bindirs(pg_config_bindir: str | None, versioned: Iterable[Path]) -> list[Path]:
    """Where to look for initdb/postgres, best first.

    ``pg_config`` may come from a newer libpq-dev than the server, so the
    Debian versioned dirs (highest version first) are tried as well.
    """
    found: list[Path] = []
    if pg_config_bindir:
        found.append(Path(pg_config_bindir))
    found.extend(sorted(versioned, key=_version_key, reverse=True))
    return found


def find_bindir() -> Path:
    """Directory holding both ``initdb`` and ``postgres``."""
    override = os.environ.get("EOSKIT_PG_BINDIR")
    candidates: list[Path] = [Path(override)] if override else []
    pg_config_dir = None
    try:
        pg_config_dir = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    candidates += candidate_bindirs(pg_config_dir, Path("/usr/lib/postgresql").glob("*/bin"))
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise MissingBinaryError(
        "postgres: PostgreSQL server programs (initdb, postgres) not found; "
        "install the Debian package `postgresql` (apt-get install postgresql), "
        "or set EOSKIT_PG_BINDIR to their directory"
    )


def fallback_data_dir(root: Path) -> Path:
    """Per-folder data dir in the temp dir, for when ``postgres`` cannot reach ``root``."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"eoskit-postgres-{digest}"


class PostgresService(LocalService):
    """A private PostgreSQL cluster with user/password/database ``eoskit``."""

    name: ClassVar[str] = "postgres"
    stop_signal: ClassVar[int] = signal.SIGINT  # "fast" shutdown: do not wait for clients

    def check_installed(self) -> None:
        find_bindir()
        if is_root():
            try:
                pwd.getpwnam(RUN_AS)
            except KeyError:
                raise MissingBinaryError(
                    "postgres: PostgreSQL cannot run as root and there is no `postgres` system user; "
                    "install the Debian package `postgresql` (it creates the user) or run as a normal user"
                ) from None

    def _run_as(self) -> str | None:
        return RUN_AS if is_root() else None

    def _data_dir(self, state: ServiceState) -> Path:
        if "data_dir" not in state.extra:
            self.dir.mkdir(parents=True, exist_ok=True)
            data = self.dir / "data"
            if is_root() and not self._reachable_by_run_as(self.dir):
                data = fallback_data_dir(self.root)
            state.extra["data_dir"] = str(data)
        return Path(state.extra["data_dir"])

    def _reachable_by_run_as(self, directory: Path) -> bool:
        """Can the postgres user traverse every directory down to ``directory``?"""
        try:
            return (
                subprocess.run(
                    ["test", "-x", str(directory)],
                    user=RUN_AS,
                    group=pwd.getpwnam(RUN_AS).pw_gid,
                    extra_groups=[],
                    check=False,
                    timeout=10,
                ).returncode
                == 0
            )
        except (OSError, subprocess.SubprocessError):
            return False

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        if is_root():
            home = pwd.getpwnam(RUN_AS).pw_dir
            env.update(HOME=home, USER=RUN_AS, LOGNAME=RUN_AS)
        env["LC_ALL"] = "C.UTF-8"
        return env

    def prepare(self, state: ServiceState) -> None:
        data = self._data_dir(state)
        if (data / "PG_VERSION").is_file():
            return
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
        if is_root():
            entry = pwd.getpwnam(RUN_AS)
            if data.stat().st_uid not in (0, entry.pw_uid):
                raise DevServicesError(f"postgres: data dir {data} belongs to another user; remove it and retry")
            os.chown(data, entry.pw_uid, entry.pw_gid)
        # The password goes through a short-lived file that only the cluster
        # owner can read, never through argv (visible in ps) or the log.
        pwfile = data.parent / f".{data.name}.pw"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(PASSWORD + "\n")
        try:
            if is_root():
                os.chown(pwfile, pwd.getpwnam(RUN_AS).pw_uid, -1)
            argv = [
                str(find_bindir() / "initdb"),
                "-D",
                str(data),
                "-U",
                USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=peer",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ]
            code = run_logged(argv, self.log_path, env=self._env(), cwd=data, user=self._run_as())
        finally:
            pwfile.unlink(missing_ok=True)
        if code != 0:
            raise ServiceStartError(
                f"postgres: initdb failed (exit {code}); log: {self.log_path}\n{tail(self.log_path)}"
            )

    def launch(self, state: ServiceState) -> LaunchSpec:
        data = self._data_dir(state)
        if self.address != HOST:
            self._allow_samenet(data)
        argv = [str(find_bindir() / "postgres"), "-D", str(data), "-c", f"port={state.port}"]
        for key, value in {**SETTINGS, "listen_addresses": self.address}.items():
            argv += ["-c", f"{key}={value}"]
        return LaunchSpec(argv=argv, env=self._env(), user=self._run_as(), cwd=data)

    @staticmethod
    def _allow_samenet(data: Path) -> None:
        """On a network lab's host, clients come from the lab's subnet, which
        initdb's ``pg_hba.conf`` (loopback only) does not admit: add it
        (``samenet``: the subnets the server's own addresses are on)."""
        hba = data / "pg_hba.conf"
        line = "host all all samenet scram-sha-256"
        if line not in hba.read_text():
            with open(hba, "a") as handle:
                handle.write(f"# a network lab's host (eoskit dev)\n{line}\n")

    def _connect(self, state: ServiceState, dbname: str):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(
            host=self.address, port=state.port, user=USER, password=PASSWORD, dbname=dbname, connect_timeout=3, autocommit=True
        )

    def probe(self, state: ServiceState) -> None:
        with self._connect(state, "postgres") as conn:
            conn.execute("SELECT 1")

    def bootstrap(self, state: ServiceState) -> None:
        with self._connect(state, "postgres") as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
        with self._connect(state, DATABASE) as conn:
            conn.execute("SELECT 1")
