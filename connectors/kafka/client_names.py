"""The Kafka client settings other than security's, as Spark users write
them (the Java client's names), for librdkafka: renamed where librdkafka
has the setting under another name, refused by name with what to do
instead where it has none or where the other side's client owns it, and
otherwise asked of librdkafka itself (:func:`client_settings`). Runs
where the options are parsed (the driver, at ``load()`` / ``save()``),
called by :func:`eoskit.connectors.kafka.security.translate`.

That last question is asked of the installed librdkafka rather than of a
declared table, so that a newer confluent-kafka's new settings pass and
nothing librdkafka lacks does. Asking is cheap and never connects:
confluent-kafka sets a client's properties one by one, in order, before it
makes the client, and stops at the first one librdkafka refuses; the probe
gives the setting followed by a property that does not exist, so it always
fails at that property (the setting passed) or before it (refused, with
librdkafka's reason), and no client, thread or connection is ever made.
About 10 microseconds a setting. Which side a setting belongs to is
declared (:data:`LIBRDKAFKA_CONSUMER`, :data:`LIBRDKAFKA_PRODUCER`, from
librdkafka's CONFIGURATION.md): librdkafka only says so in a warning logged
when a client is made. ``tests/test_kafka_security.py`` checks both against
the installed librdkafka.

Values of secrets are never part of an error.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaException, Producer

from eoskit.connectors.kafka.client import SECRET_KEYS
from eoskit.core.options import OptionError

#: Java client settings librdkafka has no equivalent of, with what to do
#: instead (keys without the ``kafka.`` prefix, lower case).
JAVA_ONLY = {
    "ssl.protocol": "librdkafka negotiates the newest TLS version both sides speak; "
                    "remove the option",
    "ssl.enabled.protocols": "librdkafka negotiates the newest TLS version both sides speak; "
                             "remove the option",
    "ssl.provider": "librdkafka uses OpenSSL; remove the option",
    "ssl.keymanager.algorithm": "librdkafka uses OpenSSL; remove the option",
    "ssl.trustmanager.algorithm": "librdkafka uses OpenSSL; remove the option",
    "ssl.secure.random.implementation": "librdkafka uses OpenSSL's; remove the option",
    "ssl.engine.factory.class": "Java classes cannot run in librdkafka; configure the stores "
                                "with the ssl.truststore.* / ssl.keystore.* options",
    "security.providers": "Java security providers cannot run in librdkafka; remove the option",
    "sasl.login.class": "Java classes cannot run in librdkafka; use kafka.sasl.jaas.config with "
                        "PlainLoginModule or ScramLoginModule",
    "sasl.login.callback.handler.class": "Java callback handlers cannot run in librdkafka; use "
                                         "kafka.sasl.jaas.config with PlainLoginModule or "
                                         "ScramLoginModule",
    "sasl.client.callback.handler.class": "Java callback handlers cannot run in librdkafka; use "
                                          "kafka.sasl.jaas.config with PlainLoginModule or "
                                          "ScramLoginModule",
    "sasl.kerberos.kinit.cmd": "Kerberos (GSSAPI) is not supported by eoskit-kafka; use SCRAM "
                               "or PLAIN over SASL_SSL",
    "sasl.kerberos.min.time.before.relogin": "Kerberos (GSSAPI) is not supported by "
                                             "eoskit-kafka; use SCRAM or PLAIN over SASL_SSL",
    "sasl.kerberos.ticket.renew.jitter": "Kerberos (GSSAPI) is not supported by eoskit-kafka; "
                                         "use SCRAM or PLAIN over SASL_SSL",
    "sasl.kerberos.ticket.renew.window.factor": "Kerberos (GSSAPI) is not supported by "
                                                "eoskit-kafka; use SCRAM or PLAIN over SASL_SSL",
    "metric.reporters": "Java metrics reporters cannot run in librdkafka; remove the option "
                        "(eoskit run --metrics-port exports the job's metrics)",
    "auto.include.jmx.reporter": "librdkafka has no JMX; remove the option",
    "socket.connection.setup.timeout.max.ms": "librdkafka's connection setup timeout does not "
                                              "grow up to a maximum; remove the option (its one "
                                              "timeout is kafka.socket.connection.setup.timeout.ms)",
}
#: Whole families of Java-only settings, by prefix.
JAVA_ONLY_PREFIXES = {
    "sasl.login.": "the Java client's login refresh and retry settings have no librdkafka "
                   "equivalent; remove the option",
    "sasl.oauthbearer.": "OAUTHBEARER is not supported by eoskit-kafka; use SCRAM or PLAIN "
                         "over SASL_SSL",
    "metrics.": "the Java client's metrics settings have no librdkafka equivalent; remove "
                "the option",
}

#: Java consumer settings librdkafka has no equivalent of (or means
#: otherwise), refused by the source; the sink refuses them as consumer settings.
JAVA_CONSUMER_ONLY = {
    "default.api.timeout.ms": "it bounds the Java consumer's blocking calls, and librdkafka has "
                              "none of them; eoskit bounds its own waits (a task's reads: "
                              "kafkaConsumer.pollTimeoutMs); remove the option",
    "exclude.internal.topics": "subscribePattern never matches Kafka's internal topics (names "
                               "starting with __), as Java's default; remove the option",
    "max.poll.records": "librdkafka's max.poll.records is for share consumers only, and a "
                        "task reads its offset range in batches of its own; to bound the "
                        "records of a micro-batch or of a task, use maxOffsetsPerTrigger or "
                        "maxRecordsPerPartition, and remove the option",
    "share.acknowledgement.mode": "the source reads the partitions it assigns itself, never "
                                  "as a member of a share group; remove the option",
}
#: Java producer settings librdkafka has no equivalent of, refused by the
#: sink; the source refuses them as producer settings.
JAVA_PRODUCER_ONLY = {
    "buffer.memory": "librdkafka bounds the records waiting to be sent by their total size in "
                     "kilobytes, uncompressed (kafka.queue.buffering.max.kbytes), and count "
                     "(kafka.queue.buffering.max.messages); set those instead, or remove the "
                     "option",
    "max.block.ms": "librdkafka never blocks a send, and the sink bounds its own waits for the "
                    "broker (a transaction: kafka.transaction.timeout.ms); remove the option",
    "metadata.max.idle.ms": "librdkafka refreshes the metadata of the topics it writes every "
                            "kafka.topic.metadata.refresh.interval.ms; remove the option",
    "partitioner.class": "Java partitioners cannot run in librdkafka; the sink places keyed "
                         "rows as Java's default partitioner does (librdkafka's "
                         "murmur2_random, the default of kafka.partitioner) and rows with a "
                         "partition column where it says; remove the option",
    "partitioner.ignore.keys": "librdkafka's partitioner is chosen by name: "
                               "kafka.partitioner=random places records without regard to "
                               "their keys; use that, or remove the option",
    "partitioner.adaptive.partitioning.enable": "it tunes the Java partitioner for records "
                                                "without a key; librdkafka's equivalent is "
                                                "kafka.sticky.partitioning.linger.ms; remove "
                                                "the option",
    "partitioner.availability.timeout.ms": "it tunes the Java partitioner for records without "
                                           "a key; librdkafka's equivalent is "
                                           "kafka.sticky.partitioning.linger.ms; remove the "
                                           "option",
    "compression.gzip.level": "librdkafka has one level, kafka.compression.level, for the "
                              "codec of kafka.compression.type; use it instead",
    "compression.lz4.level": "librdkafka has one level, kafka.compression.level, for the "
                             "codec of kafka.compression.type; use it instead",
    "compression.zstd.level": "librdkafka has one level, kafka.compression.level, for the "
                              "codec of kafka.compression.type; use it instead",
}

#: Java client settings librdkafka has under another name, meaning the same:
#: translated (the Java name given with librdkafka's is refused: give one).
RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "max.request.size": "message.max.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
}
#: Renamed on one side only: the Java consumer's request.timeout.ms (how long
#: the client waits for an answer) is librdkafka's socket.timeout.ms; the
#: producer's is librdkafka's request.timeout.ms, passed as it is.
RENAMED_BY_SIDE = {"source": {"request.timeout.ms": "socket.timeout.ms"}, "sink": {}}
#: Java's "the operating system's default" socket buffer size is -1, librdkafka's 0.
_OS_DEFAULT = {"socket.send.buffer.bytes", "socket.receive.buffer.bytes"}

#: The Java consumer's assignors librdkafka has, by librdkafka's names.
ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}

#: librdkafka's consumer-only settings (C in its CONFIGURATION.md), aliases included.
LIBRDKAFKA_CONSUMER = frozenset({
    "auto.commit.enable", "auto.commit.interval.ms", "auto.offset.reset", "check.crcs",
    "consume.callback.max.messages", "coordinator.query.interval.ms", "enable.auto.commit",
    "enable.auto.offset.store", "enable.partition.eof", "fetch.error.backoff.ms",
    "fetch.max.bytes", "fetch.message.max.bytes", "fetch.min.bytes", "fetch.queue.backoff.ms",
    "fetch.wait.max.ms", "group.id", "group.instance.id", "group.protocol", "group.protocol.type",
    "group.remote.assignor", "heartbeat.interval.ms", "isolation.level",
    "max.partition.fetch.bytes", "max.poll.interval.ms", "max.poll.records",
    "offset.store.method", "offset.store.path", "offset.store.sync.interval.ms",
    "partition.assignment.strategy", "queued.max.messages.kbytes", "queued.min.messages",
    "session.timeout.ms", "share.acknowledgement.mode",
})
#: librdkafka's producer-only settings (P in its CONFIGURATION.md), aliases included.
LIBRDKAFKA_PRODUCER = frozenset({
    "acks", "batch.num.messages", "batch.size", "compression.codec", "compression.level",
    "compression.type", "delivery.report.only.error", "delivery.timeout.ms",
    "enable.gapless.guarantee", "enable.idempotence", "linger.ms", "message.send.max.retries",
    "message.timeout.ms", "partitioner", "produce.offset.report",
    "queue.buffering.backpressure.threshold", "queue.buffering.max.kbytes",
    "queue.buffering.max.messages", "queue.buffering.max.ms", "queuing.strategy",
    "request.required.acks", "request.timeout.ms", "retries", "sticky.partitioning.linger.ms",
    "transaction.timeout.ms", "transactional.id",
})
#: Which side's client a setting belongs to: librdkafka's, and the Java
#: clients' names that librdkafka lacks. Settings of both sides are absent.
SIDES = {
    **dict.fromkeys(LIBRDKAFKA_CONSUMER, "consumer"),
    **dict.fromkeys(JAVA_CONSUMER_ONLY, "consumer"),
    **dict.fromkeys(("key.deserializer", "value.deserializer", "fetch.max.wait.ms"), "consumer"),
    **dict.fromkeys(LIBRDKAFKA_PRODUCER, "producer"),
    **dict.fromkeys(JAVA_PRODUCER_ONLY, "producer"),
    **dict.fromkeys(("key.serializer", "value.serializer", "max.request.size"), "producer"),
}
#: The client each side makes, and what it does with the other side's settings.
SIDE_CLIENT = {
    "source": ("consumer", "it only reads, with a consumer and an admin client"),
    "sink": ("producer", "it writes with a producer, and reads nothing but its own progress "
                         "markers"),
}
#: Why a setting of the other side does not apply, where more can be said.
_OTHER_SIDE_WHY = {
    "group.id": "the sink commits its progress markers under consumer groups of its own, "
                "named from 'sinkId'; remove the option",
    "isolation.level": "it is a reader's choice, made by whoever reads the sink's topic "
                       "(the sink reads its own markers read_committed); remove the option",
    "key.deserializer": "the sink writes the key column as it is (string or binary); remove "
                        "the option",
    "value.deserializer": "the sink writes the value column as it is (string or binary); "
                          "remove the option",
    "key.serializer": "the source reads the key as binary (cast it, or from_json); remove the "
                      "option",
    "value.serializer": "the source reads the value as binary (cast it, or from_json); remove "
                        "the option",
}

#: Settings confluent-kafka takes as Python objects (callables, a dict, a
#: bool), which an option, a string, cannot give.
PYTHON_OBJECTS = frozenset({
    "logger", "error_cb", "throttle_cb", "stats_cb", "oauth_cb", "on_delivery", "on_commit",
    "default.topic.config", "delivery.report.only.error",
})
#: Settings librdkafka acts on as soon as they are set: never probed.
_NOT_PROBED = frozenset({"plugin.library.paths"})


def refuse(key: str, why: str) -> OptionError:
    """The error refusing ``kafka.<key>``, saying ``why``."""
    return OptionError(f"option 'kafka.{key}' is not supported by eoskit-kafka: {why}")



def client_settings(settings: Mapping[str, str], side: str) -> dict[str, str]:
    """The settings other than security's (lower-case names), renamed to
    librdkafka's, each checked for the side and asked of librdkafka."""
    client, does = SIDE_CLIENT[side]
    renamed = {**RENAMED, **RENAMED_BY_SIDE[side]}
    origin: dict[str, str] = {}
    for name in settings:
        target = renamed.get(name, name)
        if target in origin:
            java, ours = sorted((origin[target], name), key=lambda n: n == target)
            raise OptionError(
                f"options 'kafka.{java}' and 'kafka.{ours}' are the same setting (the Java "
                f"client's name and librdkafka's, {target}); give one")
        origin[target] = name
    out: dict[str, str] = {}
    for name, value in settings.items():
        if name not in RENAMED_BY_SIDE[side]:
            belongs = SIDES.get(name, client)
            if belongs != client:
                raise OptionError(
                    f"option 'kafka.{name}' is a {belongs} setting, which the eoskit-kafka "
                    f"{side} has no use for ({does}): {_OTHER_SIDE_WHY.get(name, 'remove the option')}")
        why = (JAVA_CONSUMER_ONLY if client == "consumer" else JAVA_PRODUCER_ONLY).get(name)
        if why is not None:
            raise refuse(name, why)
        if name in PYTHON_OBJECTS:
            raise refuse(name, "confluent-kafka takes a Python object (a callable, a dict or a "
                                "bool) for it, which an option, a string, cannot give; remove "
                                "the option")
        target = renamed.get(name, name)
        if target == "partition.assignment.strategy":
            value = _assignors(value)
        if target in _OS_DEFAULT and value.strip() == "-1":
            value = "0"
        if target not in _NOT_PROBED:
            refusal = librdkafka_refusal(target, value)
            if refusal == UNKNOWN:
                raise refuse(name, "it is not a setting of librdkafka, the Kafka client "
                                    "eoskit-kafka runs, nor a Java client setting it translates; "
                                    "check the spelling (librdkafka's settings are listed in its "
                                    "CONFIGURATION.md), or remove the option")
            if refusal is not None:
                as_named = "" if target == name else f" (librdkafka's {target})"
                reason = ("" if any(s in target for s in SECRET_KEYS)
                          else f": {refusal.rstrip('.')}")
                raise OptionError(f"option 'kafka.{name}'{as_named}: librdkafka does not take "
                                  f"its value{reason}")
        out[target] = value
    return out


def _assignors(value: str) -> str:
    """Java's assignor classes as librdkafka's names; librdkafka's pass."""
    names = []
    for item in (v.strip() for v in value.split(",")):
        if item in ASSIGNORS:
            names.append(ASSIGNORS[item])
        elif item in ASSIGNORS.values():
            names.append(item)
        else:
            raise OptionError(
                "option 'kafka.partition.assignment.strategy' names an assignor librdkafka does "
                "not have (librdkafka's: range, roundrobin, cooperative-sticky; Java's "
                "RangeAssignor, RoundRobinAssignor and CooperativeStickyAssignor are translated "
                "to them, other Java classes cannot run in librdkafka); the source assigns "
                "partitions itself and never joins a rebalance, so the option has no effect: "
                "remove it")
    return ",".join(names)


#: :func:`librdkafka_refusal` of a name librdkafka does not have.
UNKNOWN = "unknown"
#: A property librdkafka cannot have (a dot-separated name ending in "!"):
#: every probe fails at it, if not before.
_SENTINEL = "eoskit.probe.end!"


def librdkafka_refusal(name: str, value: str) -> str | None:
    """None if librdkafka takes the setting ``name`` = ``value``;
    :data:`UNKNOWN` if it has no such setting; otherwise its reason for
    refusing the value (which may quote the value).

    confluent-kafka sets the properties of a client in order and stops at
    the first one librdkafka refuses, before making the client: given the
    setting, then :data:`_SENTINEL`, it always stops, and no client (no
    thread, no connection) is ever made."""
    try:
        Producer({name: value, _SENTINEL: ""})
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        text = (error.str() if hasattr(error, "str") else str(exc)).strip()
    except (TypeError, ValueError, AttributeError) as exc:
        # confluent-kafka's own checks of the settings it takes as Python objects
        return str(exc) or type(exc).__name__
    else:  # pragma: no cover - the sentinel makes every probe fail
        return None
    if f'"{_SENTINEL}"' in text:
        return None
    if text == f'No such configuration property: "{name}"':
        return UNKNOWN
    return text
