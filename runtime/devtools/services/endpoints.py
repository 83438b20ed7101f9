"""Connection endpoints of the dev services and their environment form.

Everything that talks to Kafka, PostgreSQL, MySQL or S3 in tests and examples
takes these strings, so they are kept in one frozen value that can be
rendered as (and read back from) environment variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
#: The local broker's SASL_SSL listener (SCRAM-SHA-512 over TLS), its CA
#: (a PEM file) and its SCRAM user; optional, all four together.
ENV_KAFKA_SECURE = "EOSKIT_KAFKA_SECURE_BOOTSTRAP"
ENV_KAFKA_CA = "EOSKIT_KAFKA_CA_LOCATION"
ENV_KAFKA_USER = "EOSKIT_KAFKA_SASL_USERNAME"
ENV_KAFKA_PASSWORD = "EOSKIT_KAFKA_SASL_PASSWORD"
SECURE_ENV_NAMES = (ENV_KAFKA_SECURE, ENV_KAFKA_CA, ENV_KAFKA_USER, ENV_KAFKA_PASSWORD)
#: The SCRAM user of the dev broker's secure listener. The password is long
#: and unlike anything else, so that tests can check it never shows up.
KAFKA_SASL_USER = "eoskit"
KAFKA_SASL_PASSWORD = "eoskit-kafka-scram-secret"
KAFKA_SASL_MECHANISM = "SCRAM-SHA-512"
#: Required together; EOSKIT_S3_ENDPOINT is optional (it came later).
ENV_NAMES = (ENV_KAFKA, ENV_POSTGRES, ENV_MYSQL)


@dataclass(frozen=True)
class ServiceEndpoints:
    """Where the services listen.

    ``postgres_url`` and ``mysql_url`` are SQLAlchemy URLs (they carry the
    password, so never put them in error messages or logs). ``s3_endpoint``
    is an ``http://host:port`` URL, or None when the endpoints come from an
    environment that names no S3 server. A field is None, too, for a
    service left out of a partial set (``LocalServices(only=...)``,
    ``eoskit dev up --only``); the whole set has the first three.
    """

    kafka_bootstrap: str | None = None
    postgres_url: str | None = None
    mysql_url: str | None = None
    s3_endpoint: str | None = None
    #: The broker's SASL_SSL listener (``host:port``), the PEM file of the CA
    #: that signed its certificate, and its SCRAM-SHA-512 user; None when not
    #: offered (Docker, or an environment that names none).
    kafka_secure_bootstrap: str | None = None
    kafka_ca_location: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = field(default=None, repr=False)

    def kafka_secure_options(self) -> dict[str, str] | None:
        """The ``kafka.*`` options, in Spark's names, of a client of the
        secure listener; None when there is none."""
        if self.kafka_secure_bootstrap is None:
            return None
        user = (self.kafka_sasl_username or "").replace("\\", "\\\\").replace('"', '\\"')
        password = (self.kafka_sasl_password or "").replace("\\", "\\\\").replace('"', '\\"')
        return {
            "kafka.bootstrap.servers": self.kafka_secure_bootstrap,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": KAFKA_SASL_MECHANISM,
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                      f'required username="{user}" password="{password}";',
            "kafka.ssl.truststore.location": self.kafka_ca_location or "",
            "kafka.ssl.truststore.type": "PEM",
        }

    def as_env(self) -> dict[str, str]:
        """The variables that the pytest plugin and examples read: those of
        the services in the set (a partial set names only its own)."""
        named = ((ENV_KAFKA, self.kafka_bootstrap), (ENV_POSTGRES, self.postgres_url),
                 (ENV_MYSQL, self.mysql_url), (ENV_S3, self.s3_endpoint))
        env = {name: value for name, value in named if value is not None}
        secure = (self.kafka_secure_bootstrap, self.kafka_ca_location, self.kafka_sasl_username,
                  self.kafka_sasl_password)
        if all(v is not None for v in secure):
            env.update(zip(SECURE_ENV_NAMES, secure))  # type: ignore[arg-type]
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
    kafka_port: int, postgres_port: int, mysql_port: int, host: str = HOST, *, s3_port: int | None = None,
    kafka_secure_port: int | None = None, kafka_ca_location: str | None = None,
) -> ServiceEndpoints:
    """Endpoints for services that all listen on ``host``."""
    secure = kafka_secure_port is not None and kafka_ca_location is not None
    return ServiceEndpoints(
        kafka_bootstrap=f"{host}:{kafka_port}",
        postgres_url=postgres_url(host, postgres_port),
        mysql_url=mysql_url(host, mysql_port),
        s3_endpoint=None if s3_port is None else s3_endpoint_url(host, s3_port),
        kafka_secure_bootstrap=f"{host}:{kafka_secure_port}" if secure else None,
        kafka_ca_location=kafka_ca_location if secure else None,
        kafka_sasl_username=KAFKA_SASL_USER if secure else None,
        kafka_sasl_password=KAFKA_SASL_PASSWORD if secure else None,
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
    secure = [environ.get(name, "").strip() for name in SECURE_ENV_NAMES]
    if not all(secure):
        secure = [None] * len(SECURE_ENV_NAMES)  # type: ignore[list-item]
    return ServiceEndpoints(*values, s3_endpoint=s3, kafka_secure_bootstrap=secure[0],
                            kafka_ca_location=secure[1], kafka_sasl_username=secure[2],
                            kafka_sasl_password=secure[3])
