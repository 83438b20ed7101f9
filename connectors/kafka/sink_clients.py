"""The Kafka clients a sink task uses on an executor: producers, the
marker group's consumer, an admin client, and the checks of the topics a
task writes to; the steps that use them are ``sink_writer.py``'s.

A transactional producer is new for each task attempt and owned by it
(its ``init_transactions`` fences every older producer of its id); marker
consumers, admin clients and at-least-once producers are cached per
Python worker and reused across batches. Every call that can block on
the broker is bounded (:func:`bounded`, or the call's own timeout).
Raising :class:`ServiceUnavailableError` means the broker could not be
reached (Spark retries the task); :class:`SinkError`, that it answered no.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from eoskit.connectors.kafka import sink_markers
from eoskit.connectors.kafka.client import admin_config
from eoskit.connectors.kafka.sink_settings import BATCH_HEADER_BYTES, KafkaSinkSettings
from eoskit.connectors.sink_options import DEAD_LETTER_TOPIC
from eoskit.twophase.contract import ServiceUnavailableError, SinkError

#: librdkafka's own log lines (every refused connection) stay out of Spark's
#: output; failures surface as errors that name the broker.
_QUIET = logging.getLogger("eoskit.connectors.kafka.sink.client")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

_producers: dict[str, Producer] = {}
_consumers: dict[str, Consumer] = {}
_admins: dict[str, AdminClient] = {}


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


def producer(settings: KafkaSinkSettings, transactional_id: str | None) -> Producer:
    """A producer, initialised. With a transactional id: a new one, owned by
    the caller and never cached (its ``init_transactions`` fences every older
    producer of the id). Without: this process's idempotent producer, cached."""
    config: dict[str, Any] = {**settings.producer_config(), "enable.idempotence": True,
                              "logger": _QUIET}
    if transactional_id is None:
        key = _key({k: v for k, v in config.items() if k != "logger"})
        cached = _producers.get(key)
        if cached is None:
            cached = _producers[key] = Producer(config)
        return cached
    config["transactional.id"] = transactional_id
    made = Producer(config)
    try:
        bounded(lambda: made.init_transactions(settings.call_timeout),
                 f"starting the Kafka transactions of {transactional_id}", settings.call_timeout)
    except KafkaException as exc:
        close_producer(made)
        raise ServiceUnavailableError(
            f"cannot start the Kafka transactions of {transactional_id} at "
            f"kafka.bootstrap.servers={settings.bootstrap_servers!r}: {error_text(exc)}"
        ) from None
    return made


def drop_producer(made: Producer) -> None:
    """Forget this process's cached idempotent producer ``made`` (broken) and close it."""
    for key, cached in list(_producers.items()):
        if cached is made:
            del _producers[key]
    close_producer(made)


def close_producer(made: Producer) -> None:
    """Drop whatever ``made`` still holds, without waiting on the broker."""
    try:
        made.purge()
        made.flush(0)
    except Exception:  # noqa: BLE001 - closing a broken producer
        pass


def fatal(exc: BaseException) -> bool:
    """A producer error no call can recover from: the producer is fenced,
    or its transaction state is lost; aborting it would only wait."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(error, KafkaError) and (error.fatal() or error.code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH))


def marker_consumer(settings: KafkaSinkSettings, group: str) -> Consumer:
    """A consumer of the task's marker group: it reads the marker and gives
    the group metadata for ``send_offsets_to_transaction``. Never subscribes."""
    config = {k: v for k, v in settings.kafka.items() if not k.startswith(("linger.", "batch.",
              "compression.", "acks", "partitioner", "transaction", "message.timeout",
              "queue.buffering", "retries", "delivery."))}
    config.update({"group.id": group, "enable.auto.commit": False,
                   "isolation.level": "read_committed", "logger": _QUIET})
    key = _key({k: v for k, v in config.items() if k != "logger"})
    cached = _consumers.get(key)
    if cached is None:
        cached = _consumers[key] = Consumer(config)
    return cached


#: Group coordinator errors that pass: the coordinator moved or is loading
#: (as when the broker creates ``__consumer_offsets`` at its first group).
_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def read_marker(settings: KafkaSinkSettings, group: str) -> sink_markers.CommittedMarker | None:
    consumer = marker_consumer(settings, group)
    deadline = time.monotonic() + settings.call_timeout
    while True:
        try:
            [committed] = consumer.committed([TopicPartition(settings.marker_topic, 0)],
                                             max(0.1, deadline - time.monotonic()))
            break
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if (isinstance(error, KafkaError) and error.code() in _COORDINATOR_MOVING
                    and time.monotonic() < deadline):
                time.sleep(0.2)
                continue
            raise ServiceUnavailableError(f"cannot read the progress marker of group {group!r} on "
                                     f"{settings.marker_topic}-0 at kafka.bootstrap.servers="
                                     f"{settings.bootstrap_servers!r}: {error_text(exc)}") from None
    if committed.error is not None:
        raise SinkError(f"cannot read the progress marker of group {group!r}: "
                        f"{committed.error.str()}")
    return sink_markers.decode(committed.offset)


class Topics:
    """Topics and partition counts a task writes to, checked once per topic
    before its first record: a missing topic or partition is named at once
    instead of waiting out the producer's delivery timeout."""

    def __init__(self, settings: KafkaSinkSettings, made: Producer) -> None:
        self.settings = settings
        self.producer = made
        self.partitions: dict[str, int] = {}
        self.limits: dict[str, int] = {}

    def check(self, topic: str) -> int:
        known = self.partitions.get(topic)
        if known is not None:
            return known
        try:
            metadata = self.producer.list_topics(topic, timeout=self.settings.call_timeout)
        except KafkaException as exc:
            raise ServiceUnavailableError(f"cannot reach Kafka at kafka.bootstrap.servers="
                            f"{self.settings.bootstrap_servers!r}: {error_text(exc)}") from None
        found = metadata.topics.get(topic)
        missing = found is None or (found.error is not None and found.error.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC))
        if missing or (found.error is None and not found.partitions):
            raise SinkError(missing_topic_message(topic))
        if found.error is not None:
            # A broker that did not answer in time, a leader being elected:
            # not a missing topic, and a retry may find it (a slow link gave
            # a timed-out metadata answer here).
            raise ServiceUnavailableError(
                f"cannot read topic {topic!r}'s partitions at kafka.bootstrap.servers="
                f"{self.settings.bootstrap_servers!r}: {found.error.str()}")
        self.partitions[topic] = len(found.partitions)
        return self.partitions[topic]

    def max_record_bytes(self, topic: str) -> int:
        """The largest record (key, value, headers and framing) the producer
        sends to ``topic`` and the broker takes: the producer's
        ``message.max.bytes``, or the topic's ``max.message.bytes`` less a
        batch header if that is smaller."""
        if topic not in self.limits:
            limit = self.settings.max_message_bytes
            found = topic_max_message_bytes(self.settings, [topic]).get(topic)
            if found is not None:
                limit = min(limit, found - BATCH_HEADER_BYTES)
            self.limits[topic] = limit
        return self.limits[topic]


def _admin(settings: KafkaSinkSettings) -> AdminClient:
    config = {**admin_config(settings.kafka), "logger": _QUIET}
    key = _key({k: v for k, v in config.items() if k != "logger"})
    if key not in _admins:
        _admins[key] = AdminClient(config)
    return _admins[key]


def topic_max_message_bytes(settings: KafkaSinkSettings, topics: list[str]) -> dict[str, int | None]:
    """Each topic's ``max.message.bytes`` (DescribeConfigs); None where the
    broker reports none (it then applies its own default, which the
    producer's limit stays under unless raised)."""
    futures = _admin(settings).describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics], request_timeout=settings.call_timeout)
    found: dict[str, int | None] = {}
    for resource, future in futures.items():
        try:
            configs = future.result(settings.call_timeout)
        except KafkaException as exc:
            raise SinkError(
                f"cannot read the configuration of topic {resource.name!r} (DescribeConfigs) at "
                f"kafka.bootstrap.servers={settings.bootstrap_servers!r}: {error_text(exc)}; "
                f"with '{DEAD_LETTER_TOPIC.name}' set, the sink reads each topic's "
                "max.message.bytes to set aside records the broker would refuse") from None
        entry = configs.get("max.message.bytes")
        found[resource.name] = int(entry.value) if entry is not None and entry.value else None
    return found


def missing_topic_message(topic: str) -> str:
    return (f"topic {topic!r} does not exist: create it first (the eoskit-kafka sink does not "
            "rely on automatic topic creation, which gives a topic the broker's default "
            "partitions and settings)")



def bounded(call: Any, what: str, call_timeout: float) -> None:
    """``call()``, given at most ``call_timeout`` (the call's own timeout) and
    30 s more. librdkafka's transactional
    calls can block past their own timeout while the broker's connections are
    cut (librdkafka issue 5456); Spark never times a task out, so the batch
    would stall for good. On timeout the task fails; its retry's new producer
    fences this one, whose thread is abandoned."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.append(exc)

    thread = threading.Thread(target=run, name=f"eoskit-kafka: {what}", daemon=True)
    thread.start()
    timeout = call_timeout + 30
    thread.join(timeout)
    if not outcome:
        raise ServiceUnavailableError(f"{what} did not finish within {timeout:.0f} s (the broker "
                                 "did not answer); the task fails, and its retry fences this "
                                 "producer")
    if outcome[0] is not None:
        raise outcome[0]

