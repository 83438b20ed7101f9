"""Connection endpoints of the dev services and their environment form.

Everything that talks to Kafka, PostgreSQL or MySQL in tests and examples
takes these three strings, so they are kept in one frozen value that can be
rendered as (and read back from) environment variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The dev services are throw-away and loopback-only, so fixed, well-known
# credentials are fine and keep URLs predictable for users and tests.
USER = "eoskit"
PASSWORD = "eoskit"
DATABASE = "eoskit"
HOST = "127.0.0.1"

ENV_KAFKA = "EOSKIT_KAFKA_BOOTSTRAP"
ENV_POSTGRES = "EOSKIT_POSTGRES_URL"
ENV_MYSQL = "EOSKIT_MYSQL_URL"
ENV_NAMES = (ENV_KAFKA, ENV_POSTGRES, ENV_MYSQL)


@dataclass(frozen=True)
class ServiceEndpoints:
    """Where the three services listen.

    ``postgres_url`` and ``mysql_url`` are SQLAlchemy URLs (they carry the
    password, so never put them in error messages or logs).
    """

    kafka_bootstrap: str
    postgres_url: str
    mysql_url: str

    def as_env(self) -> dict[str, str]:
        """The variables that the pytest plugin and examples read."""
        return {
            ENV_KAFKA: self.kafka_bootstrap,
            ENV_POSTGRES: self.postgres_url,
            ENV_MYSQL: self.mysql_url,
        }


def postgres_url(host: str, port: int) -> str:
    """SQLAlchemy URL for the eoskit database on a PostgreSQL server."""
    return f"postgresql+psycopg://{USER}:{PASSWORD}@{host}:{port}/{DATABASE}"


def mysql_url(host: str, port: int) -> str:
    """SQLAlchemy URL for the eoskit database on a MySQL/MariaDB server."""
    return f"mysql+pymysql://{USER}:{PASSWORD}@{host}:{port}/{DATABASE}"


def make_endpoints(kafka_port: int, postgres_port: int, mysql_port: int, host: str = HOST) -> ServiceEndpoints:
    """Endpoints for services that all listen on ``host``."""
    return ServiceEndpoints(
        kafka_bootstrap=f"{host}:{kafka_port}",
        postgres_url=postgres_url(host, postgres_port),
        mysql_url=mysql_url(host, mysql_port),
    )


def shell_quote(value: str) -> str:
    """Single-quote ``value`` for POSIX shells, always, so output looks uniform."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def render_env(endpoints: ServiceEndpoints) -> str:
    """``export NAME='value'`` lines, for ``eval "$(eoskit dev env)"``."""
    return "".join(f"export {name}={shell_quote(value)}\n" for name, value in endpoints.as_env().items())


def endpoints_from_env(environ: Mapping[str, str]) -> ServiceEndpoints | None:
    """Endpoints given by the environment, or None unless all three are set.

    A partial set is treated as unset: mixing user-provided and locally
    started services would be surprising.
    """
    values = [environ.get(name, "").strip() for name in ENV_NAMES]
    if not all(values):
        return None
    return ServiceEndpoints(*values)
