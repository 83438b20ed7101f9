"""Which errors of a service a retry or a restart can fix: asked in one place.

A failure's meaning is one of the verdicts of ``eoskit.twophase.verdicts``.
Two of them are about a service rather than the work, and only the
service's own connector can tell them from its client library's errors:

- ``Verdict.LOST``: the service is gone for now. The connection was refused,
  reset or closed, the server ended the session while restarting, no broker
  is up. A new connection, a retry or a restart of the query may succeed.
- ``Verdict.REFUSED``: the service answered and refused who we are:
  credentials, access rights, a TLS handshake. The same options are refused
  again, so nothing retries or restarts for it.
- anything else (``None``): not about the service being there. A statement
  the server refused, a lock timeout, a bad record: the caller decides.

Each service eoskit talks to has one module, ``connectors/<name>/failures.py``,
whose ``classify`` sorts its client library's errors so. Who asks, and what
they do with the answer:

- the SQL sinks' reconnecting calls (``connectors/sql/sink.py``) try again
  on ``LOST`` only (``lost``), and raise ``ConnectionLostError`` when it lasts;
- the CLI (``runtime/cli/errors.py``) exits 3, "a service cannot be
  reached", on either, with the service's own one-line message;
- the runtime's restart strategy (``runtime/job/failures.py``) sees what a
  task raised only as a type name and a line of text, so it asks the
  error's class (``verdict_of``), and the sinks raise eoskit's own errors
  from these verdicts (``ServiceUnavailableError``, ``LOST``, for a lost
  service; ``KafkaAuthenticationError``, ``REFUSED``, for refused credentials).

eoskit's own errors answer for themselves (``verdict_of``: a declared
``verdict`` class attribute, and any ``ConnectionError`` is ``LOST``). A
client library's errors are sorted by the module a connector's
``Plugin.failures`` names for that library's top-level package, imported
only for an error of that library, so that asking costs nothing to a
process that never loaded it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from eoskit.connectors.plugins import PluginError, plugins
from eoskit.twophase.verdicts import Verdict, first_line, verdict_of


@dataclass(frozen=True)
class ServiceFailure:
    #: ``Verdict.LOST`` or ``Verdict.REFUSED``.
    verdict: Verdict
    #: The service's own words, one line (the client library's message).
    message: str


#: ``classify(exc) -> ServiceFailure | None`` of one client library.
Classifier = Callable[[BaseException], "ServiceFailure | None"]


def _library(exc_type: type) -> set[str]:
    """The top-level modules of ``exc_type`` and its bases
    (``psycopg.errors.AdminShutdown``: psycopg; confluent-kafka's
    ``KafkaException`` lives in ``cimpl``)."""
    return {cls.__module__.split(".", 1)[0] for cls in exc_type.__mro__}


def _classifiers(libraries: set[str]) -> list[Classifier]:
    try:
        installed = plugins()
    except PluginError:  # reported where the plug-in is used; here, nothing is known
        return []
    found: list[Classifier] = []
    for plugin in installed:
        for library, target in plugin.failures.items():
            if library in libraries:
                module, _, name = target.partition(":")
                classifier = getattr(importlib.import_module(module), name)
                if classifier not in found:
                    found.append(classifier)
    return found


def _unwrap(exc: BaseException) -> BaseException:
    """SQLAlchemy wraps the driver's error (``DBAPIError.orig``)."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException) and type(exc).__module__.startswith("sqlalchemy"):
        return orig
    return exc


def service_failure(exc: BaseException) -> ServiceFailure | None:
    """Whether ``exc`` says a service is gone for now (``LOST``) or refused
    us (``REFUSED``), with its one line; None for anything else."""
    exc = _unwrap(exc)
    verdict = verdict_of(exc)
    if verdict.about_a_service:
        return ServiceFailure(verdict, first_line(exc))
    for classifier in _classifiers(_library(type(exc))):
        failure = classifier(exc)
        if failure is not None:
            return failure
    return None


def lost(exc: BaseException) -> bool:
    """Is ``exc`` a service gone for now (a retry on a new connection may succeed)?"""
    failure = service_failure(exc)
    return failure is not None and failure.verdict is Verdict.LOST
