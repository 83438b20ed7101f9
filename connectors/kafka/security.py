"""Kafka client settings as Spark users write them, translated for librdkafka.

A Spark job configures its Kafka clients with the Java client's property
names under ``kafka.`` (``kafka.security.protocol``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location``, ``kafka.fetch.max.wait.ms``, ...). The
eoskit-kafka source and sink take the same names and translate them, when
the options are parsed (at ``load()`` / ``save()``), into librdkafka's; what
librdkafka cannot do is refused there, by name, with what to do instead.
Nothing Java-only reaches librdkafka to fail later, in a task, or to be
ignored.

Every ``kafka.*`` setting goes through :func:`translate`:

- the security settings (:data:`OPTIONS`) are translated as a whole (JAAS
  line, trust and key stores: a PKCS12 truststore is read here, with the
  ``cryptography`` package, and handed to librdkafka as PEM);
- Java settings librdkafka has under another name with the same meaning are
  renamed (:data:`RENAMED`); Java settings it has no equivalent of are
  refused with what to do instead (:data:`JAVA_ONLY`, :data:`JAVA_ONLY_PREFIXES`,
  and per side :data:`JAVA_CONSUMER_ONLY`, :data:`JAVA_PRODUCER_ONLY`);
- a setting of the other side (a consumer setting given to the sink, a
  producer setting given to the source) is refused (:data:`SIDES`);
- whatever is left is asked of librdkafka itself: is it a setting, and does
  it take the value (:func:`librdkafka_refusal`).

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

No password (the JAAS config's, the stores') ever appears in an error:
messages name options, never their values.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaException, Producer

from eoskit.connectors.kafka.client import SECRET_KEYS
from eoskit.twophase.options import Option, OptionError, parse_str

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
LOGIN_MODULES = {PLAIN_MODULE: ("PLAIN",), SCRAM_MODULE: ("SCRAM-SHA-256", "SCRAM-SHA-512")}

# -- the declarations (listed in the option tables of the docs) ---------------

SECURITY_PROTOCOL = Option(
    "kafka.security.protocol", parse_str, None,
    "PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL; passed to librdkafka.")
SASL_MECHANISM = Option(
    "kafka.sasl.mechanism", parse_str, None,
    "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (GSSAPI and OAUTHBEARER are refused); "
    "required with a SASL protocol.")
SASL_JAAS_CONFIG = Option(
    "kafka.sasl.jaas.config", parse_str, None,
    "Java's JAAS line for PlainLoginModule or ScramLoginModule (`... required "
    'username="..." password="...";`), read as Java reads it and turned into '
    "librdkafka's sasl.username / sasl.password; other login modules are refused. "
    "Never printed.", secret=True)
TRUSTSTORE_LOCATION = Option(
    "kafka.ssl.truststore.location", parse_str, None,
    "CA certificates to trust; with ssl.truststore.type=PEM it becomes librdkafka's "
    "ssl.ca.location; a PKCS12 truststore is read when the options are parsed (on the "
    "driver) and its certificates become librdkafka's ssl.ca.pem. JKS truststores are "
    "refused with the keytool command that converts them.")
TRUSTSTORE_TYPE = Option(
    "kafka.ssl.truststore.type", parse_str, None,
    "PEM or PKCS12 (JKS, Java's default, is refused: neither librdkafka nor eoskit reads it).")
TRUSTSTORE_CERTIFICATES = Option(
    "kafka.ssl.truststore.certificates", parse_str, None,
    "With ssl.truststore.type=PEM: the CA certificates themselves (PEM text), "
    "librdkafka's ssl.ca.pem.")
TRUSTSTORE_PASSWORD = Option(
    "kafka.ssl.truststore.password", parse_str, None,
    "The password of a PKCS12 truststore; refused with a PEM truststore, which has none "
    "(as in Java). Never printed.", secret=True)
KEYSTORE_LOCATION = Option(
    "kafka.ssl.keystore.location", parse_str, None,
    "The client's key and certificate, for SSL client authentication: PKCS12 -> "
    "librdkafka's ssl.keystore.location; PEM (key and chain in one file) -> "
    "ssl.certificate.location and ssl.key.location; JKS refused with the keytool "
    "command that converts it.")
KEYSTORE_TYPE = Option(
    "kafka.ssl.keystore.type", parse_str, None,
    "PKCS12 or PEM (JKS, Java's default, is refused).")
KEYSTORE_PASSWORD = Option(
    "kafka.ssl.keystore.password", parse_str, None,
    "A PKCS12 keystore's password -> librdkafka's ssl.keystore.password. Never printed.",
    secret=True)
KEYSTORE_KEY = Option(
    "kafka.ssl.keystore.key", parse_str, None,
    "With ssl.keystore.type=PEM: the private key (PEM text) -> librdkafka's "
    "ssl.key.pem. Never printed.", secret=True)
KEYSTORE_CHAIN = Option(
    "kafka.ssl.keystore.certificate.chain", parse_str, None,
    "With ssl.keystore.type=PEM: the client certificate (PEM text) -> librdkafka's "
    "ssl.certificate.pem.")
KEY_PASSWORD = Option(
    "kafka.ssl.key.password", parse_str, None,
    "The password of an encrypted PEM key (librdkafka's ssl.key.password); with a "
    "PKCS12 keystore, only if equal to ssl.keystore.password. Never printed.", secret=True)
ENDPOINT_IDENTIFICATION = Option(
    "kafka.ssl.endpoint.identification.algorithm", parse_str, None,
    "https (the default) checks the broker's host name against its certificate; "
    "empty turns that off (librdkafka's none).")

OPTIONS = (
    SECURITY_PROTOCOL, SASL_MECHANISM, SASL_JAAS_CONFIG, TRUSTSTORE_TYPE, TRUSTSTORE_LOCATION,
    TRUSTSTORE_CERTIFICATES, TRUSTSTORE_PASSWORD, KEYSTORE_TYPE, KEYSTORE_LOCATION,
    KEYSTORE_PASSWORD, KEYSTORE_KEY, KEYSTORE_CHAIN, KEY_PASSWORD, ENDPOINT_IDENTIFICATION,
)

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
_SIDE_CLIENT = {
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

#: librdkafka's own spellings of what the Java names above translate to:
#: given directly, they would bypass the checks (and may clash with the
#: translation), so they are refused in favour of the Spark names.
LIBRDKAFKA_NAMES = {
    "sasl.mechanisms": "kafka.sasl.mechanism",
    "sasl.username": "kafka.sasl.jaas.config",
    "sasl.password": "kafka.sasl.jaas.config",
    "ssl.ca.location": "kafka.ssl.truststore.location with kafka.ssl.truststore.type=PEM",
    "ssl.ca.pem": "kafka.ssl.truststore.certificates with kafka.ssl.truststore.type=PEM",
    "ssl.certificate.location": "kafka.ssl.keystore.location with kafka.ssl.keystore.type=PEM",
    "ssl.key.location": "kafka.ssl.keystore.location with kafka.ssl.keystore.type=PEM",
    "ssl.certificate.pem": "kafka.ssl.keystore.certificate.chain with kafka.ssl.keystore.type=PEM",
    "ssl.key.pem": "kafka.ssl.keystore.key with kafka.ssl.keystore.type=PEM",
}


def _refuse(key: str, why: str) -> OptionError:
    return OptionError(f"option 'kafka.{key}' is not supported by eoskit-kafka: {why}")


def translate(kafka: Mapping[str, str], side: str) -> dict[str, str]:
    """``kafka.*`` settings (prefix removed) of the ``side`` (``"source"`` or
    ``"sink"``) as librdkafka's configuration: the Java client's names
    translated, librdkafka's in lower case; raises :class:`OptionError`
    naming the option for anything librdkafka cannot do or the side has no
    use for. Values of secrets are never part of an error."""
    if side not in _SIDE_CLIENT:
        raise ValueError(f"side must be 'source' or 'sink', not {side!r}")
    given: dict[str, str] = {}
    for key in kafka:
        low = key.lower()
        if low in given:
            raise OptionError(f"option 'kafka.{low}' is given twice ('kafka.{given[low]}' and "
                              f"'kafka.{key}'); give it once")
        given[low] = key

    def get(name: str) -> str | None:
        key = given.get(name)
        return None if key is None else kafka[key]

    for low, key in given.items():
        if low in JAVA_ONLY:
            raise _refuse(key, JAVA_ONLY[low])
        for prefix, why in JAVA_ONLY_PREFIXES.items():
            if low.startswith(prefix):
                raise _refuse(key, why)
        if low in LIBRDKAFKA_NAMES:
            raise OptionError(
                f"option 'kafka.{key}' is librdkafka's name; eoskit-kafka takes Spark's Kafka "
                f"option names: use {LIBRDKAFKA_NAMES[low]}")
    out = _client_settings(
        {low: kafka[key] for low, key in given.items() if low not in _HANDLED}, side)

    ciphers = get("ssl.cipher.suites")
    if ciphers is not None and any(c.strip().upper().startswith(("TLS_", "SSL_"))
                                   for c in ciphers.split(",")):
        raise OptionError(
            f"option 'kafka.{given['ssl.cipher.suites']}' names Java cipher suites "
            f"({ciphers!r}); librdkafka takes OpenSSL's names, colon-separated, e.g. "
            "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384 (openssl ciphers -v "
            "lists them), or remove the option")

    protocol = get("security.protocol")
    if protocol is not None:
        protocol = protocol.strip().upper()
        if protocol not in PROTOCOLS:
            raise OptionError(f"option 'kafka.security.protocol' = {kafka[given['security.protocol']]!r}: "
                              f"expected one of {', '.join(PROTOCOLS)}")
        out["security.protocol"] = protocol
    sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    tls = protocol in ("SSL", "SASL_SSL")

    mechanism = get("sasl.mechanism")
    if mechanism is not None:
        mechanism = mechanism.strip().upper()
        if mechanism not in MECHANISMS:
            raise OptionError(
                f"option 'kafka.sasl.mechanism' = {mechanism!r} is not supported by eoskit-kafka "
                f"(librdkafka cannot run the Java login modules and callback handlers it needs); "
                f"expected one of {', '.join(MECHANISMS)}")
        out["sasl.mechanism"] = mechanism

    jaas = get("sasl.jaas.config")
    if jaas is not None:
        module, options = parse_jaas(jaas)
        if module not in LOGIN_MODULES:
            raise OptionError(
                f"option 'kafka.sasl.jaas.config' names the login module {module} that "
                "eoskit-kafka cannot use (librdkafka runs no Java login modules: Kerberos "
                "GSSAPI, OAUTHBEARER and cloud IAM modules are not supported); use "
                f"{PLAIN_MODULE} or {SCRAM_MODULE} with a SASL/PLAIN or SCRAM user")
        missing = [k for k in ("username", "password") if k not in options]
        if missing:
            raise OptionError(f"option 'kafka.sasl.jaas.config': {module} needs "
                              f"{' and '.join(missing)}=\"...\"")
        if mechanism is None:
            raise OptionError(
                "option 'kafka.sasl.mechanism' is required with kafka.sasl.jaas.config (the "
                f"Java client's default, GSSAPI, is not supported): set it to one of "
                f"{' or '.join(LOGIN_MODULES[module])} for {module.rsplit('.', 1)[1]}")
        if mechanism not in LOGIN_MODULES[module]:
            raise OptionError(
                f"option 'kafka.sasl.mechanism' = {mechanism} does not go with "
                f"{module.rsplit('.', 1)[1]} in kafka.sasl.jaas.config: use "
                f"{' or '.join(LOGIN_MODULES[module])}")
        if not sasl:
            raise OptionError(
                "option 'kafka.sasl.jaas.config' needs kafka.security.protocol=SASL_SSL "
                "(or SASL_PLAINTEXT); without it the credentials would never be sent")
        out["sasl.username"] = options["username"]
        out["sasl.password"] = options["password"]
    elif sasl:
        raise OptionError(
            f"option 'kafka.security.protocol' = {protocol} needs kafka.sasl.mechanism and "
            "kafka.sasl.jaas.config (PlainLoginModule or ScramLoginModule with username and "
            "password)")

    _truststore(get, out, tls)
    _keystore(get, out, tls)

    algorithm = get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        value = algorithm.strip().lower()
        if value not in ("", "https", "none"):
            raise OptionError(
                f"option 'kafka.ssl.endpoint.identification.algorithm' = {algorithm!r}: "
                "expected https (check the broker's host name) or empty (do not)")
        out["ssl.endpoint.identification.algorithm"] = value or "none"
    return out


_HANDLED = {o.name[len("kafka."):].lower() for o in OPTIONS}


def _client_settings(settings: Mapping[str, str], side: str) -> dict[str, str]:
    """The settings other than security's (lower-case names), renamed to
    librdkafka's, each checked for the side and asked of librdkafka."""
    client, does = _SIDE_CLIENT[side]
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
            raise _refuse(name, why)
        if name in PYTHON_OBJECTS:
            raise _refuse(name, "confluent-kafka takes a Python object (a callable, a dict or a "
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
                raise _refuse(name, "it is not a setting of librdkafka, the Kafka client "
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


def _store_type(get, name: str) -> str:  # noqa: ANN001
    kind = get(f"ssl.{name}.type")
    if kind is None:
        # Java's default store type, which a Java store file given without a type is.
        return "JKS"
    kind = kind.strip().upper()
    if kind not in ("JKS", "PKCS12", "PEM"):
        raise OptionError(f"option 'kafka.ssl.{name}.type' = {kind!r}: expected PEM or PKCS12 "
                          "(JKS is refused: librdkafka cannot read it)")
    return kind


def _needs_tls(name: str, tls: bool) -> None:
    if not tls:
        raise OptionError(f"option 'kafka.{name}' needs kafka.security.protocol=SSL or SASL_SSL; "
                          "without it no TLS connection is made and the option would be ignored")


def _truststore(get, out: dict[str, str], tls: bool) -> None:  # noqa: ANN001
    location = get("ssl.truststore.location")
    certificates = get("ssl.truststore.certificates")
    if location is None and certificates is None:
        for name in ("ssl.truststore.type", "ssl.truststore.password"):
            if get(name) is not None:
                raise OptionError(f"option 'kafka.{name}' is given without "
                                  "kafka.ssl.truststore.location")
        return
    what = "ssl.truststore.location" if location is not None else "ssl.truststore.certificates"
    _needs_tls(what, tls)
    kind = _store_type(get, "truststore")
    if certificates is not None and kind != "PEM":
        raise OptionError("option 'kafka.ssl.truststore.certificates' needs "
                          "kafka.ssl.truststore.type=PEM")
    if location is not None and certificates is not None:
        raise OptionError("options 'kafka.ssl.truststore.location' and "
                          "'kafka.ssl.truststore.certificates' are given together; give one")
    if kind == "JKS":
        raise OptionError(
            f"option 'kafka.ssl.truststore.location' = {location!r} is a JKS truststore "
            "(kafka.ssl.truststore.type is JKS, or not given: Java's default), which "
            "neither librdkafka nor eoskit-kafka can read; convert it to PKCS12: keytool "
            f"-importkeystore -srckeystore {location} -destkeystore {location}.p12 "
            f"-deststoretype PKCS12, and set kafka.ssl.truststore.location={location}.p12 and "
            "kafka.ssl.truststore.type=PKCS12 (with kafka.ssl.truststore.password); or to PEM: "
            f"keytool -exportcert -rfc -keystore {location} -alias <alias> -file ca.pem, and "
            "set kafka.ssl.truststore.location=ca.pem and kafka.ssl.truststore.type=PEM")
    if kind == "PKCS12":
        out["ssl.ca.pem"] = _pkcs12_certificates(location, get("ssl.truststore.password"))
        return
    if get("ssl.truststore.password") is not None:
        raise OptionError("option 'kafka.ssl.truststore.password' does not apply to a PEM "
                          "truststore, which has no password (Java refuses one too); remove it")
    if location is not None:
        out["ssl.ca.location"] = location
    else:
        out["ssl.ca.pem"] = certificates


def _pkcs12_certificates(location: str, password: str | None) -> str:
    """The certificates of a PKCS12 truststore as PEM text, for librdkafka's
    ``ssl.ca.pem``: read when the options are parsed, on the driver, so the
    file need not be on the executors. Every certificate counts, as for
    Java's trust manager: trusted-certificate entries and those of key
    entries. The password is never part of an error."""
    where = f"option 'kafka.ssl.truststore.location' = {location!r}"
    try:
        from cryptography.hazmat.primitives.serialization import Encoding, pkcs12
    except ImportError:
        raise OptionError(
            f"{where} is a PKCS12 truststore, which eoskit-kafka reads with the cryptography "
            "package, not installed: pip install 'eoskit[kafka]', or convert the truststore to "
            f"PEM: openssl pkcs12 -in {location} -nokeys -out ca.pem, and set "
            "kafka.ssl.truststore.location=ca.pem and kafka.ssl.truststore.type=PEM") from None
    try:
        with open(location, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise OptionError(f"{where}: cannot read the truststore: "
                          f"{exc.strerror or type(exc).__name__}") from None
    try:
        store = pkcs12.load_pkcs12(data, None if password is None else password.encode())
    except Exception:  # noqa: BLE001 - cryptography's ValueError, or OpenSSL's own errors
        if data.lstrip().startswith(b"-----BEGIN"):
            raise OptionError(f"{where} is PEM text, not PKCS12: set "
                              "kafka.ssl.truststore.type=PEM (and drop "
                              "kafka.ssl.truststore.password)") from None
        if data.startswith(b"\xfe\xed\xfe\xed"):
            raise OptionError(
                f"{where} is a JKS truststore, not PKCS12 (kafka.ssl.truststore.type), which "
                "neither librdkafka nor eoskit-kafka can read; convert it: keytool "
                f"-importkeystore -srckeystore {location} -destkeystore {location}.p12 "
                f"-deststoretype PKCS12, and set kafka.ssl.truststore.location={location}.p12"
            ) from None
        if not _looks_like_pkcs12(data):
            raise OptionError(f"{where} is not a PKCS12 file (kafka.ssl.truststore.type is "
                              "PKCS12); give a PKCS12 truststore, or the type the file "
                              "is") from None
        if password is None:
            raise OptionError(f"{where} is a PKCS12 truststore whose certificates need a "
                              "password: give kafka.ssl.truststore.password") from None
        raise OptionError(
            f"{where} is a PKCS12 truststore that kafka.ssl.truststore.password does not open: "
            "the password is wrong, or the file is damaged") from None
    found = ([store.cert] if store.cert is not None else []) + list(store.additional_certs)
    if not found:
        raise OptionError(f"{where} is a PKCS12 truststore without certificates (or with "
                          "only encrypted ones, and no kafka.ssl.truststore.password); "
                          "add the CA certificates that signed the brokers' certificates")
    pem: list[str] = []
    for entry in found:
        text = entry.certificate.public_bytes(Encoding.PEM).decode("ascii")
        if text not in pem:
            pem.append(text)
    return "".join(pem)


def _looks_like_pkcs12(data: bytes) -> bool:
    """Whether ``data`` begins as a PKCS12 PFX does: a DER SEQUENCE whose
    first element is the INTEGER 3 (its version)."""
    if len(data) < 2 or data[0] != 0x30:
        return False
    size = data[1]
    start = 2 + (size & 0x7F if size & 0x80 else 0)
    return data[start:start + 3] == b"\x02\x01\x03"


def _keystore(get, out: dict[str, str], tls: bool) -> None:  # noqa: ANN001
    location = get("ssl.keystore.location")
    key, chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    password, key_password = get("ssl.keystore.password"), get("ssl.key.password")
    if location is None and key is None and chain is None:
        for name, value in (("ssl.keystore.type", get("ssl.keystore.type")),
                            ("ssl.keystore.password", password), ("ssl.key.password", key_password)):
            if value is not None:
                raise OptionError(f"option 'kafka.{name}' is given without "
                                  "kafka.ssl.keystore.location (or kafka.ssl.keystore.key)")
        return
    _needs_tls("ssl.keystore.location" if location is not None else "ssl.keystore.key", tls)
    kind = _store_type(get, "keystore")
    if kind == "JKS":
        where = location if location is not None else "X"
        raise OptionError(
            f"option 'kafka.ssl.keystore.location' = {where!r} is a JKS keystore "
            "(kafka.ssl.keystore.type is JKS, or not given: Java's default), which librdkafka "
            f"cannot read; convert it: keytool -importkeystore -srckeystore {where} "
            f"-destkeystore {where}.p12 -deststoretype PKCS12, and set "
            f"kafka.ssl.keystore.location={where}.p12 and kafka.ssl.keystore.type=PKCS12")
    if kind == "PKCS12":
        if key is not None or chain is not None:
            raise OptionError("options 'kafka.ssl.keystore.key' and "
                              "'kafka.ssl.keystore.certificate.chain' need "
                              "kafka.ssl.keystore.type=PEM")
        if key_password is not None and key_password != password:
            raise OptionError(
                "option 'kafka.ssl.key.password' differs from kafka.ssl.keystore.password, and "
                "librdkafka opens a PKCS12 keystore's key with the store's password; give the "
                "key the store's password (keytool -keypasswd) and drop kafka.ssl.key.password")
        out["ssl.keystore.location"] = location
        if password is not None:
            out["ssl.keystore.password"] = password
        return
    # PEM
    if password is not None:
        raise OptionError("option 'kafka.ssl.keystore.password' does not apply to a PEM keystore "
                          "(Java refuses it too); an encrypted key's password is "
                          "kafka.ssl.key.password")
    if location is not None:
        if key is not None or chain is not None:
            raise OptionError("option 'kafka.ssl.keystore.location' and the inline "
                              "kafka.ssl.keystore.key / certificate.chain are given together; "
                              "give one")
        # One PEM file holds the key and the chain; OpenSSL picks each out of it.
        out["ssl.certificate.location"] = location
        out["ssl.key.location"] = location
    else:
        if key is None or chain is None:
            raise OptionError("options 'kafka.ssl.keystore.key' and "
                              "'kafka.ssl.keystore.certificate.chain' go together; give both")
        out["ssl.key.pem"] = key
        out["ssl.certificate.pem"] = chain
    if key_password is not None:
        out["ssl.key.password"] = key_password


# -- Java's JAAS configuration syntax ---------------------------------------


class _Tokens:
    """The tokens of ``java.io.StreamTokenizer`` as Kafka's ``JaasConfig``
    sets it up: words (letters, digits, ``. - _ $``), numbers, quoted strings
    in ``"`` or ``'`` with Java's escapes, ``//`` and ``/* */`` comments, and
    every other character on its own."""

    WORD, NUMBER, EOF = "word", "number", "eof"

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def _alpha(self, c: str) -> bool:
        return c.isascii() and c.isalpha() or c in "_$" or ord(c) >= 160

    def _digit(self, c: str) -> bool:
        return c in "0123456789.-"

    def next(self) -> tuple[str, str | None]:
        """(kind, text): kind is WORD, NUMBER, EOF, a quote character for a
        quoted string, or the ordinary character itself (text None)."""
        text, n = self.text, len(self.text)
        while True:
            while self.pos < n and ord(text[self.pos]) <= 32:
                self.pos += 1
            if self.pos >= n:
                return self.EOF, None
            c = text[self.pos]
            if c == "/":
                if text.startswith("/*", self.pos):
                    end = text.find("*/", self.pos + 2)
                    self.pos = n if end < 0 else end + 2
                    continue
                # "//", and a lone "/" (the tokenizer's default comment character)
                end = min((i for i in (text.find("\n", self.pos), text.find("\r", self.pos)) if i >= 0),
                          default=n)
                self.pos = end
                continue
            break
        start = self.pos
        if self._digit(c):
            if c == "-" and not (self.pos + 1 < n and text[self.pos + 1] in "0123456789."):
                self.pos += 1
                return "-", None
            self.pos += 1
            while self.pos < n and text[self.pos] in "0123456789.":
                self.pos += 1
            return self.NUMBER, None  # Java keeps a number's value, not its text
        if self._alpha(c):
            while self.pos < n and (self._alpha(text[self.pos]) or self._digit(text[self.pos])):
                self.pos += 1
            return self.WORD, text[start:self.pos]
        if c in "\"'":
            return c, self._quoted(c)
        self.pos += 1
        return c, None

    _ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}

    def _quoted(self, quote: str) -> str:
        text, n = self.text, len(self.text)
        self.pos += 1
        out: list[str] = []
        while self.pos < n and text[self.pos] not in (quote, "\n", "\r"):
            c = text[self.pos]
            self.pos += 1
            if c == "\\" and self.pos < n:
                c = text[self.pos]
                self.pos += 1
                if c in "01234567":
                    digits = c
                    limit = 3 if c <= "3" else 2
                    while len(digits) < limit and self.pos < n and text[self.pos] in "01234567":
                        digits += text[self.pos]
                        self.pos += 1
                    c = chr(int(digits, 8))
                else:
                    c = self._ESCAPES.get(c, c)
            out.append(c)
        if self.pos < n and text[self.pos] == quote:
            self.pos += 1
        return "".join(out)


_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """The login module and options of a ``sasl.jaas.config`` value, parsed
    as Kafka's ``JaasConfig`` does; exactly one entry, as the Java client
    requires. Errors never quote the text (it holds a password)."""
    where = "option 'kafka.sasl.jaas.config'"
    tokens = _Tokens(text)
    entries: list[tuple[str, dict[str, str]]] = []
    kind, value = tokens.next()
    while kind != _Tokens.EOF:
        if value is None:
            raise OptionError(f"{where}: expected a login module class name at character "
                              f"{tokens.pos}")
        module = value
        kind, flag = tokens.next()
        if kind == _Tokens.EOF:
            raise OptionError(f"{where}: the login module's control flag (required) is missing")
        if flag is None or flag.upper() not in _FLAGS:
            raise OptionError(f"{where}: the control flag after {module} must be required, "
                              "requisite, sufficient or optional")
        options: dict[str, str] = {}
        kind, key = tokens.next()
        while kind not in (_Tokens.EOF, ";"):
            if key is None:
                raise OptionError(f"{where}: expected an option name at character {tokens.pos}")
            eq, _ = tokens.next()
            kind, value = tokens.next() if eq == "=" else (eq, None)
            if eq != "=" or kind == _Tokens.EOF or value is None:
                raise OptionError(f"{where}: no value given for {key!r} (values are quoted: "
                                  f'{key}="...")')
            options[key] = value
            kind, key = tokens.next()
        if kind != ";":
            raise OptionError(f"{where}: the entry does not end with a semicolon (;)")
        entries.append((module, options))
        kind, value = tokens.next()
    if len(entries) != 1:
        raise OptionError(f"{where}: expected one login module entry, found {len(entries)}")
    return entries[0]
