"""The source's Kafka clients: quiet about failed connections, clear in their errors."""

import socket

import pytest

from eoskit.connectors.kafka.client import (
    BrokerUnreachableError,
    ClientLog,
    KafkaMetadata,
    admin_config,
    consumer_config,
)


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_broker_is_one_clear_error_not_hundreds_of_log_lines(capfd):
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(BrokerUnreachableError) as err:
        KafkaMetadata({"bootstrap.servers": address}, timeout_s=2).topics()
    text = str(err.value)
    assert f"kafka.bootstrap.servers={address!r}" in text
    assert "Connection refused" in text  # librdkafka's reason, kept from its log
    out, errors = capfd.readouterr()
    assert "rdkafka" not in errors and "FAIL" not in errors, errors[:2000]


def test_client_log_keeps_the_last_error_for_messages():
    log = ClientLog()
    assert log.reason() == ""
    log.log(20, "%s [%s] %s", "CONNECT", "c#consumer-1", "[thrd:x]: x: connecting")
    log.log(40, "%s [%s] %s", "FAIL", "c#consumer-1", "[thrd:x]: x:1/bootstrap: Connect failed: refused")
    assert log.reason() == "; last client error: x:1/bootstrap: Connect failed: refused"


def test_clients_name_the_source_unless_told_otherwise():
    assert consumer_config({"bootstrap.servers": "b"})["client.id"] == "eoskit-kafka-source"
    assert admin_config({"bootstrap.servers": "b"})["client.id"] == "eoskit-kafka-source"
    assert admin_config({"bootstrap.servers": "b", "client.id": "mine"})["client.id"] == "mine"
    log = ClientLog()
    assert consumer_config({"bootstrap.servers": "b"}, log)["logger"] is log


def test_the_reading_consumer_does_not_let_the_broker_hold_its_fetches():
    """A task's new assignment waits for the fetch the broker holds past the
    last one's range: 500 ms a task at librdkafka's default."""
    assert consumer_config({"bootstrap.servers": "b"})["fetch.wait.max.ms"] <= 20
    assert consumer_config({"bootstrap.servers": "b", "fetch.wait.max.ms": "200"})[
        "fetch.wait.max.ms"] == "200"


def test_the_reading_consumer_does_not_back_off_a_second_after_a_full_queue():
    config = consumer_config({"bootstrap.servers": "b"})
    assert config["fetch.queue.backoff.ms"] <= 20
    assert config["queued.min.messages"] <= 100_000  # librdkafka's default: no more prefetch
