"""Connection endpoints of the dev services and their environment form.

Everything that talks to Kafka, PostgreSQL, MySQL or S3 in tests and examples
takes these strings, so they are kept in one frozen value that can be
rendered as (and read back from) environment variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import DevServicesError

# The dev services are throw-away and loopback-only, so fixed, well-known
# credentials are fine and keep URLs predictable for users and tests.
USER = "eoskit"
PASSWORD = "eoskit"
DATABASE = "eoskit"
HOST = "127.0.0.1"
# moto accepts any S3 credentials; clients still need some to sign requests.
# They are passed explicitly (s3_storage_options), never exported as AWS_*
# variables, which would replace a developer's real AWS credentials.
S3_KEY = "testing"
S3_SECRET = "testing"

ENV_KAFKA = "EOSKIT_KAFKA_BOOTSTRAP"
ENV_POSTGRES = "EOSKIT_POSTGRES_URL"
ENV_MYSQL = "EOSKIT_MYSQL_URL"
ENV_S3 = "EOSKIT_S3_ENDPOINT"
#: Required together; EOSKIT_S3_ENDPOINT is optional (it came later).
ENV_NAMES = (ENV_KAFKA, ENV_POSTGRES, ENV_MYSQL)


@dataclass(frozen=True)
class ServiceEndpoints:
    """Where the services listen.

    ``postgres_url`` and ``mysql_url`` are SQLAlchemy URLs (they carry the
    password, so never put them in error messages or logs). ``s3_endpoint``
    is an ``http://host:port`` URL, or None when the endpoints come from an
    environment that names no S3 server.
    """

    kafka_bootstrap: str
    postgres_url: str
    mysql_url: str
    s3_endpoint: str | None = None

    def as_env(self) -> dict[str, str]:
        """The variables that the pytest plugin and examples read."""
        env = {
            ENV_KAFKA: self.kafka_bootstrap,
            ENV_POSTGRES: self.postgres_url,
            ENV_MYSQL: self.mysql_url,
        }
        if self.s3_endpoint is not None:
            env[ENV_S3] = self.s3_endpoint
        return env


def postgres_url(host: str, port: int) -> str:
    """SQLAlchemy URL for the eoskit database on a PostgreSQL server."""
    return f"postgresql+psycopg://{USER}:{PASSWORD}@{host}:{port}/{DATABASE}"


def mysql_url(host: str, port: int) -> str:
    """SQLAlchemy URL for the eoskit database on a MySQL/MariaDB server."""
    return f"mysql+pymysql://{USER}:{PASSWORD}@{host}:{port}/{DATABASE}"


def s3_endpoint_url(host: str, port: int) -> str:
    """Endpoint URL of an S3-compatible server (plain HTTP: loopback dev servers only)."""
    return f"http://{host}:{port}"


def s3_storage_options(endpoint: str) -> dict[str, Any]:
    """fsspec ``storage_options`` for s3fs against ``endpoint``: ``fsspec.filesystem("s3", **options)``.

    No region: s3fs would send it as the new bucket's location constraint,
    which S3 (and moto) reject for us-east-1, their default.
    """
    return {"key": S3_KEY, "secret": S3_SECRET, "client_kwargs": {"endpoint_url": endpoint}}


def make_endpoints(
    kafka_port: int, postgres_port: int, mysql_port: int, host: str = HOST, *, s3_port: int | None = None
) -> ServiceEndpoints:
    """Endpoints for services that all listen on ``host``."""
    return ServiceEndpoints(
        kafka_bootstrap=f"{host}:{kafka_port}",
        postgres_url=postgres_url(host, postgres_port),
        mysql_url=mysql_url(host, mysql_port),
        s3_endpoint=None if s3_port is None else s3_endpoint_url(host, s3_port),
    )


def shell_quote(value: str) -> str:
    """Single-quote ``value`` for POSIX shells, always, so output looks uniform."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def render_env(endpoints: ServiceEndpoints) -> str:
    """``export NAME='value'`` lines, for ``eval "$(eoskit dev env)"``."""
    return "".join(f"export {name}={shell_quote(value)}\n" for name, value in endpoints.as_env().items())


def endpoints_from_env(environ: Mapping[str, str]) -> ServiceEndpoints | None:
    """Endpoints given by the environment, or None unless all of ENV_NAMES are set.

    A partial set is treated as unset: mixing user-provided and locally
    started services would be surprising. ``EOSKIT_S3_ENDPOINT`` is optional,
    so environments set up before the S3 service keep working for everything
    else; what needs S3 then says that this variable is missing.
    """
    values = [environ.get(name, "").strip() for name in ENV_NAMES]
    if not all(values):
        return None
    s3 = environ.get(ENV_S3, "").strip() or None
    if s3 is not None and not s3.startswith(("http://", "https://")):
        # The value itself is not shown: a URL may carry credentials.
        raise DevServicesError(f"{ENV_S3} must be an http:// or https:// URL, such as http://127.0.0.1:5000")
    return ServiceEndpoints(*values, s3_endpoint=s3)
