"""Local services for development and tests: Kafka, PostgreSQL, MariaDB/MySQL, S3.

:class:`LocalServices` runs them as plain processes under one folder (no
Docker needed); :class:`DockerServices` runs them as containers. Both hand
out a :class:`ServiceEndpoints`. See docs/dev-services.md.
"""

from __future__ import annotations

from typing import Any

from .docker import DockerServices
from .endpoints import ServiceEndpoints
from .errors import DevServicesError, MissingBinaryError, ServiceStartError
from .local import LocalServices



def register_cli(subparsers: Any) -> None:
    """Add ``eoskit dev ...`` to a CLI (see :mod:`.cli`).

    Imported lazily so that ``python -m eoskit.runtime.devtools.services.cli`` does not
    find its module already imported by the package.
    """
    from .cli import register_cli as _register  # not at the top: runpy (python -m ...services.cli) warns of a module imported before it runs

    _register(subparsers)


__all__ = [
    "DevServicesError",
    "DockerServices",
    "LocalServices",
    "MissingBinaryError",
    "ServiceEndpoints",
    "ServiceStartError",
    "register_cli",
]
