"""Which confluent-kafka errors mean the brokers are gone for now, or
refused us (``eoskit.connectors.failures``).

eoskit's own Kafka errors say it themselves: ``BrokerUnreachableError`` is a
``ConnectionError`` (gone), ``KafkaAuthenticationError`` declares
``verdict = Verdict.REFUSED``.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from eoskit.connectors.failures import ServiceFailure
from eoskit.twophase.verdicts import Verdict, first_line

#: No broker answers: a broken connection, every broker down, a name that
#: does not resolve.
LOST = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE})
#: The brokers refused the credentials, or the TLS handshake failed.
REFUSED = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED})


def classify(exc: BaseException) -> ServiceFailure | None:
    """By the ``KafkaError`` a ``KafkaException`` carries; None for others."""
    if not isinstance(exc, KafkaException) or not exc.args or not isinstance(exc.args[0], KafkaError):
        return None
    error = exc.args[0]
    verdict = Verdict.LOST if error.code() in LOST else Verdict.REFUSED if error.code() in REFUSED else None
    return None if verdict is None else ServiceFailure(verdict, first_line(error.str()))
