"""MariaDB (MySQL protocol) for local development: a private mariadbd.

The system MariaDB is left alone: ``mariadb-install-db`` creates a data dir
in the folder and ``mariadbd --no-defaults`` runs it with its own socket, pid
file and port, so /etc/mysql settings cannot interfere.

The ``eoskit`` user gets ALL privileges (tests create and drop databases and
use XA). Root keeps password-less access only through the private unix
socket, which is how the user is created; root's TCP accounts are dropped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import ClassVar

from .base import LaunchSpec, LocalService, find_program, is_root
from .endpoints import DATABASE, PASSWORD, USER
from .errors import MissingBinaryError, ServiceStartError
from .processes import run_logged, tail
from .state import ServiceState

_INSTALL_HINT = "install the Debian package `mariadb-server` (apt-get install mariadb-server)"
# sun_path holds 108 bytes; keep a margin.
MAX_SOCKET_PATH = 100


def socket_path(service_dir: Path) -> Path:
    """The server's unix socket: in the folder unless that path is too long."""
    preferred = service_dir / "mariadb.sock"
    if len(str(preferred.resolve())) <= MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(str(service_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"eoskit-mariadb-{digest}.sock"


def _server() -> str:
    found = find_program(["mariadbd", "mysqld"])
    if not found:
        raise MissingBinaryError(f"mariadb: server program mariadbd not found; {_INSTALL_HINT}")
    return found


def _install_db() -> str:
    found = find_program(["mariadb-install-db", "mysql_install_db"])
    if not found:
        raise MissingBinaryError(f"mariadb: mariadb-install-db not found; {_INSTALL_HINT}")
    return found


def _user_args() -> list[str]:
    # As root, mariadbd insists on an explicit --user. Running as root (not
    # mysql) keeps the data dir usable wherever the folder is.
    return ["--user=root"] if is_root() else []


class MariaDBService(LocalService):
    """A private mariadbd with user/password/database ``eoskit``."""

    name: ClassVar[str] = "mariadb"

    def check_installed(self) -> None:
        _server()
        _install_db()

    def _data_dir(self) -> Path:
        return self.dir / "data"

    def _socket(self, state: ServiceState) -> Path:
        if "socket" not in state.extra:
            state.extra["socket"] = str(socket_path(self.dir))
        return Path(state.extra["socket"])

    def prepare(self, state: ServiceState) -> None:
        data = self._data_dir()
        if (data / "mysql").is_dir():
            return
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            _install_db(),
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *_user_args(),
        ]
        code = run_logged(argv, self.log_path, cwd=self.dir)
        if code != 0:
            # A half-initialised data dir would make every later start fail.
            shutil.rmtree(data, ignore_errors=True)
            raise ServiceStartError(
                f"mariadb: mariadb-install-db failed (exit {code}); log: {self.log_path}\n{tail(self.log_path)}"
            )

    def launch(self, state: ServiceState) -> LaunchSpec:
        sock = self._socket(state)
        sock.unlink(missing_ok=True)  # stale socket of a killed server
        argv = [
            _server(),
            "--no-defaults",  # must come first
            f"--datadir={self._data_dir()}",
            f"--socket={sock}",
            f"--pid-file={self.dir / 'mariadb.pid'}",
            f"--port={state.port}",
            f"--bind-address={self.address}",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--max-connections=200",
            "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=2",
            *_user_args(),
        ]
        return LaunchSpec(argv=argv, env=dict(os.environ), cwd=self.dir)

    def probe(self, state: ServiceState) -> None:
        import pymysql

        pymysql.connect(unix_socket=str(self._socket(state)), user="root", connect_timeout=3).close()

    def bootstrap(self, state: ServiceState) -> None:
        import pymysql

        root = pymysql.connect(unix_socket=str(self._socket(state)), user="root", autocommit=True)
        try:
            with root.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
                for host in ("%", "localhost"):
                    account = (USER, host)
                    cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (*account, PASSWORD))
                    cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@%s", account)
                    try:
                        # MySQL 8 needs this for XA RECOVER; servers without it
                        # (MariaDB: covered by ALL) reject the name, which is fine.
                        cur.execute("GRANT XA_RECOVER_ADMIN ON *.* TO %s@%s", account)
                    except pymysql.MySQLError:
                        pass
                # Password-less root over TCP would be open to every local user.
                cur.execute("SELECT Host FROM mysql.user WHERE User = 'root' AND Host <> 'localhost'")
                for (host,) in cur.fetchall():
                    cur.execute("DROP USER 'root'@%s", (host,))
                cur.execute("FLUSH PRIVILEGES")
        finally:
            root.close()
        pymysql.connect(host=self.address, port=state.port, user=USER, password=PASSWORD, database=DATABASE).close()
