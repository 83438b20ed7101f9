"""Spark's Kafka security options, translated for librdkafka or refused by name at parse time."""

import pytest

from eoskit.connectors.kafka import client_names
from eoskit.connectors.kafka.client_names import (
    JAVA_CONSUMER_ONLY,
    JAVA_ONLY,
    JAVA_PRODUCER_ONLY,
    LIBRDKAFKA_CONSUMER,
    LIBRDKAFKA_PRODUCER,
    UNKNOWN,
    librdkafka_refusal,
)
from eoskit.connectors.kafka.jaas import parse_jaas
from eoskit.connectors.kafka.security import PLAIN_MODULE, SCRAM_MODULE
from eoskit.connectors.kafka.settings import KafkaSourceSettings
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.core.options import OptionError

SECRET = "Pa55-w0rd!sekret"
JAAS = f'{SCRAM_MODULE} required username="alice" password="{SECRET}";'
SASL_SSL = {
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "SCRAM-SHA-512",
    "kafka.sasl.jaas.config": JAAS,
    "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
    "kafka.ssl.truststore.type": "PEM",
}


def source(**options):
    return KafkaSourceSettings.parse({"kafka.bootstrap.servers": "b:9093", "subscribe": "t", **options})


def sink(**options):
    return KafkaSinkSettings.parse({"kafka.bootstrap.servers": "b:9093", "topic": "t", **options})


PARSERS = pytest.mark.parametrize("parse", [source, sink], ids=["source", "sink"])


@PARSERS
def test_sasl_ssl_with_spark_names_becomes_librdkafka_config(parse):
    kafka = parse(**SASL_SSL, **{"kafka.ssl.endpoint.identification.algorithm": ""}).kafka
    assert kafka == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }


@PARSERS
def test_secrets_never_in_repr(parse):
    settings = parse(**SASL_SSL)
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert "<redacted>" in repr(settings)


def test_plain_login_module_and_case_insensitive_names():
    kafka = source(**{"KAFKA.SECURITY.PROTOCOL": "sasl_plaintext", "kafka.SASL.mechanism": "plain",
                      "kafka.sasl.jaas.config": f"{PLAIN_MODULE} required\n  username='bob'\n"
                                                f"  password='x';"}).kafka
    assert kafka["security.protocol"] == "SASL_PLAINTEXT" and kafka["sasl.mechanism"] == "PLAIN"
    assert (kafka["sasl.username"], kafka["sasl.password"]) == ("bob", "x")


@pytest.mark.parametrize("text, expected", [
    # Java's StreamTokenizer: both quote characters, backslash escapes, octal, comments
    (f'{SCRAM_MODULE} required username="a\\"b" password="c\\\\d";', {"username": 'a"b', "password": "c\\d"}),
    (f"{SCRAM_MODULE} REQUIRED username='it\\'s' password='x\\ty';", {"username": "it's", "password": "x\ty"}),
    (f'{SCRAM_MODULE} required /* who */ username=alice // line\n password="\\101;=";',
     {"username": "alice", "password": "A;="}),
    (f'{SCRAM_MODULE} required username="u-1" password="p w" extra="1";',
     {"username": "u-1", "password": "p w", "extra": "1"}),
])
def test_jaas_values_are_read_as_java_reads_them(text, expected):
    module, options = parse_jaas(text)
    assert module == SCRAM_MODULE
    for key, value in expected.items():
        assert options[key] == value


@pytest.mark.parametrize("text, fragment", [
    (f'{SCRAM_MODULE} required username="u" password="{SECRET}"', "semicolon"),
    (f'{SCRAM_MODULE} username="u" password="{SECRET}";', "control flag"),
    (f'{SCRAM_MODULE} required username="u" password=;', "no value given for 'password'"),
    (f'{SCRAM_MODULE} required username="u" password=123;', "no value given for 'password'"),
    (f'{SCRAM_MODULE} required username="u" password="{SECRET}"; {PLAIN_MODULE} required;',
     "one login module entry, found 2"),
    ("", "one login module entry, found 0"),
])
def test_bad_jaas_is_refused_without_its_text(text, fragment):
    with pytest.raises(OptionError, match="kafka.sasl.jaas.config") as info:
        source(**{**SASL_SSL, "kafka.sasl.jaas.config": text})
    assert fragment in str(info.value)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("module", [
    "com.sun.security.auth.module.Krb5LoginModule",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
    "software.amazon.msk.auth.iam.IAMLoginModule",
])
@PARSERS
def test_other_login_modules_are_refused_naming_what_to_use(parse, module):
    with pytest.raises(OptionError) as info:
        parse(**{**SASL_SSL, "kafka.sasl.jaas.config": f'{module} required password="{SECRET}";'})
    text = str(info.value)
    assert "kafka.sasl.jaas.config" in text and module in text
    assert PLAIN_MODULE in text and SCRAM_MODULE in text and SECRET not in text


@pytest.mark.parametrize("options, fragment", [
    ({"kafka.security.protocol": "TLS"}, "expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({**SASL_SSL, "kafka.sasl.mechanism": "GSSAPI"}, "'kafka.sasl.mechanism' = 'GSSAPI' is not supported"),
    ({**SASL_SSL, "kafka.sasl.mechanism": "OAUTHBEARER"}, "expected one of PLAIN, SCRAM-SHA-256"),
    ({k: v for k, v in SASL_SSL.items() if k != "kafka.sasl.mechanism"}, "'kafka.sasl.mechanism' is required"),
    ({**SASL_SSL, "kafka.sasl.mechanism": "PLAIN"}, "does not go with ScramLoginModule"),
    ({**SASL_SSL, "kafka.security.protocol": "SSL"}, "needs kafka.security.protocol=SASL_SSL"),
    ({"kafka.security.protocol": "SASL_SSL"}, "needs kafka.sasl.mechanism and kafka.sasl.jaas.config"),
    ({**SASL_SSL, "kafka.sasl.jaas.config": f'{SCRAM_MODULE} required password="{SECRET}";'},
     "needs username"),
    # trust stores
    ({**SASL_SSL, "kafka.ssl.truststore.type": "JKS", "kafka.ssl.truststore.password": SECRET},
     "keytool -exportcert -rfc -keystore /etc/kafka/ca.pem"),
    ({k: v for k, v in SASL_SSL.items() if k != "kafka.ssl.truststore.type"}, "Java's default"),
    ({**SASL_SSL, "kafka.ssl.truststore.type": "JKS", "kafka.ssl.truststore.password": SECRET},
     "keytool -importkeystore -srckeystore /etc/kafka/ca.pem -destkeystore /etc/kafka/ca.pem.p12 "
     "-deststoretype PKCS12, and set kafka.ssl.truststore.location=/etc/kafka/ca.pem.p12 and "
     "kafka.ssl.truststore.type=PKCS12"),
    ({**SASL_SSL, "kafka.ssl.truststore.password": SECRET}, "does not apply to a PEM truststore"),
    ({"kafka.ssl.truststore.password": SECRET}, "without kafka.ssl.truststore.location"),
    ({"kafka.ssl.truststore.location": "/ca.pem", "kafka.ssl.truststore.type": "PEM"},
     "needs kafka.security.protocol=SSL or SASL_SSL"),
    ({**SASL_SSL, "kafka.ssl.truststore.type": "BKS"}, "expected PEM or PKCS12"),
    # key stores
    ({**SASL_SSL, "kafka.ssl.keystore.location": "/k.jks", "kafka.ssl.keystore.password": SECRET},
     "keytool -importkeystore -srckeystore /k.jks -destkeystore /k.jks.p12 -deststoretype PKCS12"),
    ({**SASL_SSL, "kafka.ssl.keystore.location": "/k.p12", "kafka.ssl.keystore.type": "PKCS12",
      "kafka.ssl.keystore.password": SECRET, "kafka.ssl.key.password": SECRET + "x"},
     "differs from kafka.ssl.keystore.password"),
    ({**SASL_SSL, "kafka.ssl.keystore.location": "/k.pem", "kafka.ssl.keystore.type": "PEM",
      "kafka.ssl.keystore.password": SECRET}, "does not apply to a PEM keystore"),
    ({**SASL_SSL, "kafka.ssl.keystore.key": SECRET, "kafka.ssl.keystore.type": "PEM"}, "go together"),
    ({**SASL_SSL, "kafka.ssl.keystore.password": SECRET}, "without kafka.ssl.keystore.location"),
    ({**SASL_SSL, "kafka.ssl.endpoint.identification.algorithm": "ldap"}, "expected https"),
    # librdkafka's own names would bypass all of this
    ({"kafka.sasl.username": "u"}, "use kafka.sasl.jaas.config"),
    ({"kafka.sasl.password": SECRET}, "use kafka.sasl.jaas.config"),
    ({"kafka.ssl.ca.location": "/ca.pem"}, "use kafka.ssl.truststore.location"),
    # Java-only settings
    ({**SASL_SSL, "kafka.ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, "OpenSSL's names"),
    ({**SASL_SSL, "kafka.sasl.login.refresh.window.factor": "0.8"}, "login refresh"),
    ({**SASL_SSL, "kafka.sasl.oauthbearer.token.endpoint.url": "https://x"}, "OAUTHBEARER"),
])
@PARSERS
def test_refusals_name_the_option_and_what_to_do(parse, options, fragment):
    with pytest.raises(OptionError) as info:
        parse(**options)
    text = str(info.value)
    assert fragment in text and "kafka." in text
    assert SECRET not in text


@pytest.mark.parametrize("name", sorted(JAVA_ONLY))
@PARSERS
def test_every_java_only_setting_is_refused_by_name(parse, name):
    with pytest.raises(OptionError, match=f"option 'kafka.{name}' is not supported by eoskit-kafka: .+"):
        parse(**{**SASL_SSL, f"kafka.{name}": "x"})


@PARSERS
def test_key_stores(parse):
    p12 = parse(**SASL_SSL, **{"kafka.ssl.keystore.location": "/k.p12", "kafka.ssl.keystore.type": "pkcs12",
                               "kafka.ssl.keystore.password": SECRET, "kafka.ssl.key.password": SECRET}).kafka
    assert p12["ssl.keystore.location"] == "/k.p12" and p12["ssl.keystore.password"] == SECRET
    assert "ssl.key.password" not in p12
    pem = parse(**SASL_SSL, **{"kafka.ssl.keystore.location": "/k.pem", "kafka.ssl.keystore.type": "PEM",
                               "kafka.ssl.key.password": SECRET}).kafka
    assert pem["ssl.certificate.location"] == pem["ssl.key.location"] == "/k.pem"
    assert pem["ssl.key.password"] == SECRET
    inline = parse(**SASL_SSL, **{"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.key": "KEY",
                                  "kafka.ssl.keystore.certificate.chain": "CHAIN"})
    assert (inline.kafka["ssl.key.pem"], inline.kafka["ssl.certificate.pem"]) == ("KEY", "CHAIN")
    assert "KEY" not in repr(inline)


@PARSERS
def test_inline_pem_truststore(parse):
    kafka = parse(**{**{k: v for k, v in SASL_SSL.items() if "location" not in k},
                     "kafka.ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----"}).kafka
    assert kafka["ssl.ca.pem"] == "-----BEGIN CERTIFICATE-----"


@PARSERS
def test_plaintext_and_other_kafka_settings_still_pass_through(parse):
    kafka = parse(**{"kafka.security.protocol": "PLAINTEXT", "kafka.client.id": "me"}).kafka
    assert kafka["security.protocol"] == "PLAINTEXT" and kafka["client.id"] == "me"
    ciphers = parse(**SASL_SSL, **{"kafka.ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"}).kafka
    assert ciphers["ssl.cipher.suites"] == "ECDHE-RSA-AES128-GCM-SHA256"


def test_security_options_are_declared_for_the_docs():
    from eoskit.connectors.kafka import settings, sink_settings

    for declared in (settings.OPTIONS, sink_settings.OPTIONS):
        rows = "\n".join(declared.docs())
        for name in ("kafka.security.protocol", "kafka.sasl.jaas.config", "kafka.ssl.truststore.location",
                     "kafka.ssl.keystore.location", "kafka.ssl.endpoint.identification.algorithm"):
            assert f"`{name}`" in rows


def test_cli_redaction_hides_a_jaas_password_that_reaches_an_error():
    from eoskit.runtime.cli.errors import redact

    text = f"failed with options {{'kafka.sasl.jaas.config': '{SCRAM_MODULE} required username=\"u\" " \
           f"password=\"{SECRET}\\\\\"x\";'}}"
    shown = redact(text)
    assert SECRET not in shown and 'password="***"' in shown and 'username="u"' in shown
    assert redact("password='a b' and password = \"c\"") == "password=\"***\" and password = \"***\""


def test_refused_credentials_end_a_job_instead_of_restarting_it():
    from eoskit.runtime.job.failures import classify

    # As Spark hands it over: the Python traceback as the text of a JVM error.
    failure = classify("[PYTHON_DATA_SOURCE_ERROR] Failed ...\nTraceback (most recent call last):\n"
                       '  File "client.py", line 207, in topics\n'
                       "eoskit.connectors.kafka.client.KafkaAuthenticationError: Kafka at "
                       "kafka.bootstrap.servers='b:1' refused the SASL credentials\n")
    assert failure.permanent and failure.message.startswith("Kafka at kafka.bootstrap.servers='b:1' refused")


# -- PKCS12 truststores -------------------------------------------------------------------

STORE_PASSWORD = "St0re-pa55!word"


def _ca(name: str):
    """A self-signed CA certificate, made here."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))


@pytest.fixture(scope="module")
def cas():
    return [_ca("eoskit test CA one"), _ca("eoskit test CA two")]


def _pem(cert) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    return cert.public_bytes(Encoding.PEM).decode()


def _truststore(path, cas, password=STORE_PASSWORD, java=True):
    """A PKCS12 truststore of ``cas``: as Java's keytool writes one (trusted
    certificate entries), or as OpenSSL does (CA certificates without a key)."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, NoEncryption, pkcs12

    encryption = BestAvailableEncryption(password.encode()) if password else NoEncryption()
    if java:
        data = pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(c, f"ca{i}".encode()) for i, c in enumerate(cas)], encryption)
    else:
        data = pkcs12.serialize_key_and_certificates(None, None, None, cas, encryption)
    path.write_bytes(data)
    return str(path)


def _pkcs12(location, password=STORE_PASSWORD):
    options = {**SASL_SSL, "kafka.ssl.truststore.type": "PKCS12", "kafka.ssl.truststore.location": location}
    if password is not None:
        options["kafka.ssl.truststore.password"] = password
    return options


@pytest.mark.parametrize("java", [True, False], ids=["keytool", "openssl"])
@PARSERS
def test_a_pkcs12_truststore_is_read_and_given_to_librdkafka_as_pem(parse, java, cas, tmp_path):
    location = _truststore(tmp_path / "trust.p12", cas, java=java)
    settings = parse(**_pkcs12(location))
    kafka = settings.kafka
    assert sorted(c.strip() for c in kafka["ssl.ca.pem"].split("-----END CERTIFICATE-----") if c.strip()) == \
        sorted(_pem(c).split("-----END CERTIFICATE-----")[0].strip() for c in cas)
    assert not {"ssl.ca.location", "ssl.truststore.location", "ssl.truststore.type",
                "ssl.truststore.password"} & set(kafka)
    assert STORE_PASSWORD not in repr(settings) and STORE_PASSWORD not in str(kafka)


@PARSERS
def test_a_pkcs12_truststore_without_a_password_is_read_when_its_certificates_are_not_encrypted(
        parse, cas, tmp_path):
    location = _truststore(tmp_path / "open.p12", cas[:1], password=None, java=False)
    assert parse(**_pkcs12(location, password=None)).kafka["ssl.ca.pem"] == _pem(cas[0])


@pytest.mark.parametrize("case, fragment", [
    ("wrong password", "is a PKCS12 truststore that kafka.ssl.truststore.password does not open"),
    ("no password", "whose certificates need a password: give kafka.ssl.truststore.password"),
    ("not PKCS12", "is not a PKCS12 file"),
    ("PEM", "is PEM text, not PKCS12: set kafka.ssl.truststore.type=PEM"),
    ("JKS", "is a JKS truststore, not PKCS12"),
    ("missing", "cannot read the truststore"),
])
@PARSERS
def test_a_pkcs12_truststore_that_cannot_be_read_is_refused_naming_the_option(
        parse, case, fragment, cas, tmp_path):
    location = _truststore(tmp_path / "trust.p12", cas)
    password = STORE_PASSWORD
    if case == "wrong password":
        password = SECRET
    elif case == "no password":
        password = None
    elif case == "not PKCS12":
        (tmp_path / "trust.p12").write_bytes(b"\x30\x03\x02\x01\x07 and then not DER at all")
    elif case == "PEM":
        (tmp_path / "trust.p12").write_text(_pem(cas[0]))
    elif case == "JKS":
        (tmp_path / "trust.p12").write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + bytes(40))
    elif case == "missing":
        location = str(tmp_path / "absent.p12")
    with pytest.raises(OptionError) as info:
        parse(**_pkcs12(location, password))
    text = str(info.value)
    assert text.startswith(f"option 'kafka.ssl.truststore.location' = {location!r}")
    assert fragment in text
    assert SECRET not in text and STORE_PASSWORD not in text


# -- every other Java client setting ------------------------------------------------------

VALUE = "V4lue-never-shown"


@pytest.mark.parametrize("parse, option, value, name, expected", [
    (source, "fetch.max.wait.ms", "250", "fetch.wait.max.ms", "250"),
    (source, "send.buffer.bytes", "-1", "socket.send.buffer.bytes", "0"),  # Java's OS default is -1, librdkafka's 0
    (sink, "send.buffer.bytes", "131072", "socket.send.buffer.bytes", "131072"),
    (source, "receive.buffer.bytes", "65536", "socket.receive.buffer.bytes", "65536"),
    (sink, "receive.buffer.bytes", "-1", "socket.receive.buffer.bytes", "0"),
    (sink, "max.request.size", "2000000", "message.max.bytes", "2000000"),
    # the Java consumer's request timeout is librdkafka's socket.timeout.ms; the producer's is its own
    (source, "request.timeout.ms", "20000", "socket.timeout.ms", "20000"),
    (sink, "request.timeout.ms", "20000", "request.timeout.ms", "20000"),
    (source, "partition.assignment.strategy",
     "org.apache.kafka.clients.consumer.RangeAssignor, org.apache.kafka.clients.consumer.RoundRobinAssignor",
     "partition.assignment.strategy", "range,roundrobin"),
    (source, "partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
     "partition.assignment.strategy", "cooperative-sticky"),
], ids=lambda v: getattr(v, "__name__", None))
def test_java_settings_librdkafka_has_under_another_name_are_translated(parse, option, value, name, expected):
    kafka = parse(**{f"kafka.{option}": value}).kafka
    assert kafka[name] == expected
    assert name == option or option not in kafka


@pytest.mark.parametrize("parse, java, librdkafka", [
    (source, "fetch.max.wait.ms", "fetch.wait.max.ms"),
    (sink, "max.request.size", "message.max.bytes"),
    (source, "request.timeout.ms", "socket.timeout.ms"),
])
def test_a_java_name_given_with_librdkafka_s_is_refused(parse, java, librdkafka):
    with pytest.raises(OptionError, match=f"options 'kafka.{java}' and 'kafka.{librdkafka}' are the same "
                                          f"setting .*; give one"):
        parse(**{f"kafka.{java}": "100", f"kafka.{librdkafka}": "200"})


@pytest.mark.parametrize("parse, name", [
    *((source, n) for n in sorted(JAVA_CONSUMER_ONLY)),
    *((sink, n) for n in sorted(JAVA_PRODUCER_ONLY)),
], ids=lambda v: getattr(v, "__name__", v))
def test_every_java_only_setting_of_a_side_is_refused_by_name(parse, name):
    with pytest.raises(OptionError) as info:
        parse(**{f"kafka.{name}": VALUE})
    text = str(info.value)
    assert text.startswith(f"option 'kafka.{name}' is not supported by eoskit-kafka: ")
    assert VALUE not in text


@pytest.mark.parametrize("option, fragment", [
    # as observed in the issue: each used to reach librdkafka, and fail in a task or be ignored
    ("metric.reporters", "remove the option"),
    ("metrics.sample.window.ms", "metrics settings have no librdkafka equivalent"),
    ("metrics.recording.level", "metrics settings have no librdkafka equivalent"),
    ("default.api.timeout.ms", "kafkaConsumer.pollTimeoutMs"),
    ("exclude.internal.topics", "never matches Kafka's internal topics"),
    ("partition.assignment.strategy", "names an assignor librdkafka does not have"),
    ("max.poll.records", "maxOffsetsPerTrigger or maxRecordsPerPartition"),
    ("auto.include.jmx.reporter", "no JMX"),
    ("socket.connection.setup.timeout.max.ms", "kafka.socket.connection.setup.timeout.ms"),
    ("fetch.max.wait.msec", "check the spelling"),
])
def test_java_settings_the_source_cannot_use_are_refused_at_parse_time(option, fragment):
    value = "org.apache.kafka.clients.consumer.StickyAssignor" if option == "partition.assignment.strategy" \
        else VALUE
    with pytest.raises(OptionError) as info:
        source(**{f"kafka.{option}": value})
    text = str(info.value)
    assert f"option 'kafka.{option}'" in text and fragment in text
    assert value not in text


@pytest.mark.parametrize("option, fragment", [
    ("buffer.memory", "kafka.queue.buffering.max.kbytes"),
    ("max.block.ms", "remove the option"),
    ("partitioner.class", "murmur2_random"),
    ("compression.zstd.level", "kafka.compression.level"),
    ("metric.reporters", "remove the option"),
    ("linger.msec", "check the spelling"),
])
def test_java_settings_the_sink_cannot_use_are_refused_at_parse_time(option, fragment):
    with pytest.raises(OptionError) as info:
        sink(**{f"kafka.{option}": VALUE})
    text = str(info.value)
    assert f"option 'kafka.{option}'" in text and fragment in text
    assert VALUE not in text


@pytest.mark.parametrize("name", sorted(LIBRDKAFKA_CONSUMER | {"key.deserializer", "value.deserializer",
                                                               "fetch.max.wait.ms", *JAVA_CONSUMER_ONLY}))
def test_consumer_settings_are_refused_by_the_sink(name):
    with pytest.raises(OptionError) as info:
        sink(**{f"kafka.{name}": VALUE})
    text = str(info.value)
    assert text.startswith(f"option 'kafka.{name}' is a consumer setting, which the eoskit-kafka sink has "
                           "no use for")
    assert VALUE not in text


@pytest.mark.parametrize("name", sorted(LIBRDKAFKA_PRODUCER - {"request.timeout.ms"}
                                        | {"key.serializer", "value.serializer", "max.request.size",
                                           *JAVA_PRODUCER_ONLY}))
def test_producer_settings_are_refused_by_the_source(name):
    with pytest.raises(OptionError) as info:
        source(**{f"kafka.{name}": VALUE})
    text = str(info.value)
    assert text.startswith(f"option 'kafka.{name}' is a producer setting, which the eoskit-kafka source has "
                           "no use for")
    assert VALUE not in text


def test_what_each_side_owns_keeps_its_own_message():
    # the source's and the sink's own refusals come first, with what to use instead
    with pytest.raises(OptionError, match="not supported by the eoskit-kafka source; use startingOffsets"):
        source(**{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(OptionError, match="not supported by the eoskit-kafka sink: the sink makes one per"):
        sink(**{"kafka.transactional.id": "t"})
    # what the sink cannot use from the source's side says why
    with pytest.raises(OptionError, match="progress markers under consumer groups of its own"):
        sink(**{"kafka.group.id": "g"})
    assert source(**{"kafka.group.id": "mine", "kafka.isolation.level": "read_uncommitted"}).kafka["group.id"] == "mine"


@pytest.mark.parametrize("parse, option, value, fragment", [
    (sink, "linger.ms", "99999999", 'is outside allowed range 0..900000'),
    (sink, "compression.type", "brotli", 'Invalid value "brotli"'),
    (source, "fetch.max.wait.ms", "soon", "(librdkafka's fetch.wait.max.ms): librdkafka does not take its value"),
    (source, "session.timeout.ms", "0", "outside allowed range"),
    (source, "send.buffer.bytes", "-5", "(librdkafka's socket.send.buffer.bytes)"),
])
def test_values_librdkafka_refuses_are_refused_at_parse_time(parse, option, value, fragment):
    with pytest.raises(OptionError) as info:
        parse(**{f"kafka.{option}": value})
    text = str(info.value)
    assert text.startswith(f"option 'kafka.{option}'") and "librdkafka does not take its value" in text
    assert fragment in text


@pytest.mark.parametrize("name", ["logger", "error_cb", "stats_cb", "on_delivery", "default.topic.config"])
@PARSERS
def test_settings_confluent_kafka_takes_as_python_objects_are_refused(parse, name):
    with pytest.raises(OptionError, match=f"option 'kafka.{name}' is not supported by eoskit-kafka: "
                                          "confluent-kafka takes a Python object"):
        parse(**{f"kafka.{name}": "x"})


def test_librdkafka_settings_pass_in_lower_case_as_librdkafka_spells_them():
    kafka = source(**{"kafka.Session.Timeout.MS": "10000", "kafka.socket.keepalive.enable": "true",
                      "kafka.client.dns.lookup": "use_all_dns_ips"}).kafka
    assert (kafka["session.timeout.ms"], kafka["socket.keepalive.enable"]) == ("10000", "true")
    assert kafka["client.dns.lookup"] == "use_all_dns_ips" and "Session.Timeout.MS" not in kafka
    kafka = sink(**{"kafka.LINGER.MS": "20", "kafka.queue.buffering.max.kbytes": "1024", "kafka.acks": "all"}).kafka
    assert (kafka["linger.ms"], kafka["queue.buffering.max.kbytes"], kafka["acks"]) == ("20", "1024", "all")


def test_a_setting_given_twice_is_refused():
    with pytest.raises(OptionError, match="option 'kafka.linger.ms' is given twice"):
        sink(**{"kafka.linger.ms": "1", "kafka.LINGER.ms": "2"})


def test_librdkafka_is_asked_without_making_a_client(monkeypatch):
    """The probe's last property does not exist, so confluent-kafka stops
    before it makes a client: none is ever made (no thread, no connection)."""
    made = []

    class Spy(client_names.Producer):
        def __init__(self, config):
            super().__init__(config)
            made.append(self)

    monkeypatch.setattr(client_names, "Producer", Spy)
    assert librdkafka_refusal("linger.ms", "5") is None
    assert librdkafka_refusal("bootstrap.servers", "127.0.0.1:1") is None
    assert librdkafka_refusal("buffer.memory", "1") == UNKNOWN
    assert "queue.buffering.max.ms" in librdkafka_refusal("linger.ms", "abc")
    sink(**{"kafka.linger.ms": "20", "kafka.max.request.size": "2000000", "kafka.retries": "5"})
    source(**{"kafka.fetch.max.wait.ms": "20", "kafka.session.timeout.ms": "10000"})
    assert made == []


def _client_warns_ignoring(kind: str, name: str) -> bool:
    """Whether librdkafka, making a ``kind`` client (no bootstrap.servers: it
    never connects) with ``name`` set, warns that it ignores the setting."""
    import logging

    from confluent_kafka import Consumer, Producer

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    lines = Lines()
    logger = logging.getLogger(f"eoskit.test.librdkafka.{kind}.{name}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    for value in ("1", "true", "none", "range", "earliest", "read_committed", "classic", "implicit", "fifo",
                  "murmur2_random", "consumer", "uniform", "broker", "all", "52428800", True):
        config = {name: value, "logger": logger}
        try:
            client = Producer(config) if kind == "producer" else Consumer({**config, "group.id": "g"})
        except Exception:  # noqa: BLE001 - a value this setting does not take: try the next
            continue
        if kind == "producer":
            client.flush(0)
        else:
            client.close()
        return any(f"is a {'consumer' if kind == 'producer' else 'producer'} property and will be "
                   "ignored" in line for line in lines.lines)
    raise AssertionError(f"no value tried makes a {kind} with {name}")


@pytest.mark.parametrize("name", sorted(LIBRDKAFKA_CONSUMER))
def test_declared_consumer_settings_are_librdkafka_s(name):
    assert librdkafka_refusal(name, "1") != UNKNOWN
    assert _client_warns_ignoring("producer", name)


@pytest.mark.parametrize("name", sorted(LIBRDKAFKA_PRODUCER))
def test_declared_producer_settings_are_librdkafka_s(name):
    assert librdkafka_refusal(name, "1") != UNKNOWN
    assert _client_warns_ignoring("consumer", name)


def test_librdkafka_s_reason_is_left_out_for_a_secret_setting(monkeypatch):
    # librdkafka's reason for refusing a value may quote the value
    monkeypatch.setattr(client_names, "librdkafka_refusal",
                        lambda name, value: None if name == "bootstrap.servers" else f'Invalid value "{value}"')
    with pytest.raises(OptionError) as info:
        sink(**{"kafka.some.plugin.password": SECRET})
    assert str(info.value) == "option 'kafka.some.plugin.password': librdkafka does not take its value"
    with pytest.raises(OptionError, match='librdkafka does not take its value: Invalid value "9"'):
        sink(**{"kafka.linger.ms": "9"})
