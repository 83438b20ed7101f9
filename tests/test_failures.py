"""Failures classified once (issue 22, step 4): one module per service sorts
its client library's errors (``eoskit.connectors.failures``); the sinks'
retries, the CLI's exit code and the runtime's restart verdict all ask it
or the error class's own ``transient``."""

from __future__ import annotations

import psycopg
import pymysql
import pytest
import sqlalchemy.exc
from confluent_kafka import KafkaError, KafkaException

from eoskit.connectors.failures import Kind, lost, service_failure
from eoskit.connectors.kafka.client import BrokerUnreachableError, KafkaAuthenticationError
from eoskit.connectors.mysql.failures import lost as mysql_lost
from eoskit.connectors.postgres.failures import lost as postgres_lost
from eoskit.runtime.cli_errors import FAILED, UNREACHABLE, describe
from eoskit.runtime.failures import classify, transient

LOST, REFUSED = Kind.LOST, Kind.REFUSED


@pytest.mark.parametrize("exc, kind", [
    # PostgreSQL: no SQLSTATE while connecting, class 08, a session the server ended
    (psycopg.OperationalError("connection failed: Connection refused"), LOST),
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), LOST),
    (psycopg.errors.CannotConnectNow("the database system is starting up"), LOST),
    (psycopg.errors.ConnectionFailure("connection failure"), LOST),
    # ... and the session's own time limits, which the sink sets (sessionIdleTimeout)
    (psycopg.errors.IdleInTransactionSessionTimeout("terminating connection due to idle-in-transaction "
                                                    "timeout"), LOST),
    (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), None),
    (psycopg.errors.UndefinedObject("prepared transaction does not exist"), None),
    (psycopg.errors.InvalidPassword("password authentication failed for user \"u\""), REFUSED),
    (psycopg.errors.LockNotAvailable("lock timeout"), None),
    (psycopg.errors.UndefinedTable("relation \"t\" does not exist"), None),
    # MySQL / MariaDB: by error number
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'"), LOST),
    (pymysql.err.OperationalError(1927, "Connection was killed"), LOST),
    (pymysql.err.OperationalError(2006, "MySQL server has gone away"), LOST),
    (pymysql.err.OperationalError(1397, "XAER_NOTA: Unknown XID"), None),
    (pymysql.err.InterfaceError(0, ""), LOST),
    (pymysql.err.OperationalError(1045, "Access denied for user 'u'@'localhost'"), REFUSED),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), None),
    (pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), None),
    # Kafka: by the KafkaError a KafkaException carries
    (KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")), LOST),
    (KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused")), LOST),
    (KafkaException(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "bad password")), REFUSED),
    (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed")), None),
    # eoskit's own and Python's
    (BrokerUnreachableError("cannot reach Kafka at kafka.bootstrap.servers='b:1'"), LOST),
    (KafkaAuthenticationError("Kafka refused the SASL credentials"), REFUSED),
    (ConnectionRefusedError(111, "Connection refused"), LOST),
    (KeyError("x"), None),
])
def test_each_service_sorts_its_errors_once(exc, kind):
    verdict = service_failure(exc)
    assert (verdict.kind if verdict else None) is kind
    assert lost(exc) is (kind is LOST)
    # What the SQL sinks' reconnecting calls retry: their service's own verdict.
    assert postgres_lost(exc) is (kind is LOST and isinstance(exc, psycopg.Error))
    assert mysql_lost(exc) is (kind is LOST and isinstance(exc, pymysql.MySQLError))


def test_the_verdict_keeps_the_service_s_own_line():
    verdict = service_failure(pymysql.err.OperationalError(1045, "Access denied for user 'u'@'h'\nmore"))
    assert verdict is not None and verdict.message == "Access denied for user 'u'@'h'"
    verdict = service_failure(KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")))
    assert verdict is not None and verdict.message == "1/1 brokers are down"


def test_sqlalchemy_s_wrapper_is_looked_through():
    wrapped = sqlalchemy.exc.OperationalError("SELECT 1", {}, pymysql.err.OperationalError(2013, "Lost connection"))
    assert service_failure(wrapped) is not None and lost(wrapped)


@pytest.mark.parametrize("exc, code", [
    (pymysql.err.OperationalError(1045, "Access denied for user 'u'@'localhost'"), UNREACHABLE),
    (KafkaException(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "bad password")), UNREACHABLE),
    (KafkaAuthenticationError("Kafka refused the SASL credentials"), UNREACHABLE),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), FAILED),
    (psycopg.errors.LockNotAvailable("lock timeout"), FAILED),
])
def test_the_cli_exits_3_for_a_service_gone_or_refusing_and_1_for_its_answers(exc, code):
    assert describe(exc).code == code


def traceback_of(qualified: str, message: str) -> str:
    """What the runtime gets of a task's error: the traceback as text."""
    return f'Traceback (most recent call last):\n  File "x.py", line 1, in write\n{qualified}: {message}\n'


@pytest.mark.parametrize("qualified, permanent", [
    ("eoskit.twophase.contract.SinkError", True),
    ("eoskit.twophase.contract.ServiceUnavailableError", False),  # a SinkError that says transient
    ("eoskit.connectors.sql.reconnect.ConnectionLostError", False),
    ("eoskit.twophase.coordinator.OrphanedTransactionsError", True),
    ("eoskit.twophase.coordinator.LostPreparedTransactionError", False),  # a CoordinatorError that says transient
    ("eoskit.connectors.kafka.client.KafkaAuthenticationError", True),
    ("eoskit.connectors.kafka.client.BrokerUnreachableError", False),
    ("eoskit.twophase.options.OptionError", True),  # eoskit's bad input: a ValueError
    ("eoskit.connectors.kafka.java_regex.JavaRegexError", True),
    ("eoskit.connectors.kafka.reader.DataLossError", True),  # the same offsets are still gone
    ("eoskit.no_such_module.SinkError", False),  # unknown: to the restart strategy
    ("ValueError", False),  # a user's UDF
    ("psycopg.OperationalError", False),
])
def test_a_restart_is_tried_unless_the_error_class_says_it_cannot_help(qualified, permanent):
    failure = classify(traceback_of(qualified, "what went wrong"))
    assert failure.permanent is permanent, qualified
    assert failure.type == qualified


def test_eoskit_value_errors_are_bad_input_unless_they_say_otherwise():
    from eoskit.twophase.options import OptionError

    class Retryable(OptionError):
        transient = True

    assert not transient(OptionError) and transient(Retryable) and transient(ValueError)
