"""Failures classified once (issue 22, step 4), in one vocabulary (issue 32,
step 3b): one module per service sorts its client library's errors
(``eoskit.connectors.failures``); every other error's verdict is its class's
(``eoskit.twophase.verdicts.verdict_of``); the sinks' retries, the CLI's exit
code and the runtime's restart decision all read those verdicts."""

from __future__ import annotations

import psycopg
import pymysql
import pytest
import sqlalchemy.exc
from confluent_kafka import KafkaError, KafkaException

from eoskit.connectors.failures import lost, service_failure
from eoskit.connectors.kafka.client import BrokerUnreachableError, KafkaAuthenticationError
from eoskit.connectors.mysql.failures import lost as mysql_lost
from eoskit.connectors.postgres.failures import lost as postgres_lost
from eoskit.runtime.cli.errors import FAILED, UNREACHABLE, USAGE, VERDICT_CODES, describe
from eoskit.runtime.job.failures import classify
from eoskit.twophase.verdicts import Verdict, first_line, verdict_of

LOST, REFUSED = Verdict.LOST, Verdict.REFUSED


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
    failure = service_failure(exc)
    assert (failure.verdict if failure else None) is kind
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
    ("eoskit.twophase.contract.ServiceUnavailableError", False),  # a SinkError that says LOST
    ("eoskit.connectors.sql.reconnect.ConnectionLostError", False),
    ("eoskit.twophase.coordinator.OrphanedTransactionsError", True),
    ("eoskit.twophase.coordinator.LostPreparedTransactionError", False),  # a CoordinatorError that says RECOVERABLE
    ("eoskit.connectors.kafka.client.KafkaAuthenticationError", True),
    ("eoskit.connectors.kafka.client.BrokerUnreachableError", False),
    ("eoskit.core.options.OptionError", True),  # eoskit's bad input: a ValueError
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
    from eoskit.core.options import OptionError

    class Retryable(OptionError):
        verdict = Verdict.RECOVERABLE

    assert verdict_of(OptionError) is verdict_of(OptionError("x")) is Verdict.BAD_INPUT
    assert verdict_of(Retryable) is Verdict.RECOVERABLE
    assert verdict_of(ValueError) is Verdict.RECOVERABLE  # a user's UDF: not eoskit's bad input


@pytest.mark.parametrize("error_class, verdict", [
    ("eoskit.twophase.contract.SinkError", Verdict.PERMANENT),
    ("eoskit.twophase.contract.ServiceUnavailableError", Verdict.LOST),
    ("eoskit.twophase.coordinator.CoordinatorError", Verdict.PERMANENT),
    ("eoskit.twophase.coordinator.LostPreparedTransactionError", Verdict.RECOVERABLE),
    ("eoskit.connectors.kafka.client.KafkaAuthenticationError", Verdict.REFUSED),
    ("eoskit.connectors.kafka.client.BrokerUnreachableError", Verdict.LOST),  # a ConnectionError
    ("eoskit.connectors.kafka.reader.DataLossError", Verdict.PERMANENT),
    ("eoskit.connectors.plugins.PluginError", Verdict.BAD_INPUT),
    ("eoskit.runtime.job.control.ControlError", Verdict.PERMANENT),
    ("eoskit.runtime.cli.errors.UsageError", Verdict.BAD_INPUT),  # an eoskit ValueError
    ("eoskit.core.options.OptionError", Verdict.BAD_INPUT),
])
def test_each_error_class_has_one_verdict_that_restarts_and_exit_codes_read(error_class, verdict):
    from eoskit.runtime.job.failures import error_class as lookup

    found = lookup(error_class)
    assert found is not None and verdict_of(found) is verdict
    failure = classify(traceback_of(error_class, "what went wrong"))
    assert failure.verdict is verdict and failure.permanent is not verdict.restartable


def test_the_verdicts_and_what_each_one_does():
    restartable = {v for v in Verdict if v.restartable}
    assert restartable == {Verdict.LOST, Verdict.RECOVERABLE}
    assert {v for v in Verdict if v.about_a_service} == {Verdict.LOST, Verdict.REFUSED}
    assert VERDICT_CODES == {Verdict.LOST: UNREACHABLE, Verdict.REFUSED: UNREACHABLE, Verdict.BAD_INPUT: USAGE,
                             Verdict.PERMANENT: FAILED, Verdict.RECOVERABLE: FAILED}
    # Nobody classified it: restartable, and a failed job.
    assert verdict_of(KeyError) is Verdict.RECOVERABLE and verdict_of(ConnectionRefusedError) is Verdict.LOST


def test_a_pipeline_failure_takes_its_exit_code_from_its_cause_s_verdict():
    from eoskit.runtime.job.pipeline import PipelineError

    def code(cause_type):
        return describe(PipelineError("pipeline p failed: x", cause_type)).code

    assert code("eoskit.connectors.plugins.PluginError") == USAGE
    assert code("eoskit.connectors.kafka.client.KafkaAuthenticationError") == UNREACHABLE
    assert code("eoskit.twophase.coordinator.LostPreparedTransactionError") == FAILED
    assert code("ConnectionRefusedError") == FAILED  # only eoskit's own causes count
    assert code("eoskit.no_such_module.Error") == FAILED


@pytest.mark.parametrize("given, line", [
    ("first\nsecond", "first"),
    ("\n  \n  indented first  \nsecond", "indented first"),
    ("", ""),
    (KeyError(), "KeyError"),  # an error with no message is named by its type
    (ValueError("  bad value \n DETAIL: more"), "bad value"),
])
def test_one_first_line_helper(given, line):
    assert first_line(given) == line
