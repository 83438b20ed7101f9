"""Spark's Kafka security options, translated for librdkafka or refused by name at parse time."""

import pytest

from eoskit.connectors.kafka.security import JAVA_ONLY, PLAIN_MODULE, SCRAM_MODULE, parse_jaas
from eoskit.connectors.kafka.settings import KafkaSourceSettings
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.twophase.options import OptionError

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
    ({**SASL_SSL, "kafka.ssl.truststore.type": "PKCS12", "kafka.ssl.truststore.password": SECRET},
     "openssl pkcs12 -in /etc/kafka/ca.pem -nokeys -out ca.pem"),
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
    from eoskit.runtime.cli_errors import redact

    text = f"failed with options {{'kafka.sasl.jaas.config': '{SCRAM_MODULE} required username=\"u\" " \
           f"password=\"{SECRET}\\\\\"x\";'}}"
    shown = redact(text)
    assert SECRET not in shown and 'password="***"' in shown and 'username="u"' in shown
    assert redact("password='a b' and password = \"c\"") == "password=\"***\" and password = \"***\""


def test_refused_credentials_end_a_job_instead_of_restarting_it():
    from eoskit.runtime.failures import classify

    # As Spark hands it over: the Python traceback as the text of a JVM error.
    failure = classify("[PYTHON_DATA_SOURCE_ERROR] Failed ...\nTraceback (most recent call last):\n"
                       '  File "client.py", line 207, in topics\n'
                       "eoskit.connectors.kafka.client.KafkaAuthenticationError: Kafka at "
                       "kafka.bootstrap.servers='b:1' refused the SASL credentials\n")
    assert failure.permanent and failure.message.startswith("Kafka at kafka.bootstrap.servers='b:1' refused")
