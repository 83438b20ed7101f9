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
  renamed; Java settings it has no equivalent of are refused with what to
  do instead; a setting of the other side (a consumer setting given to the
  sink, a producer setting given to the source) is refused; whatever is
  left is asked of librdkafka itself: is it a setting, and does it take the
  value (:mod:`eoskit.connectors.kafka.client_names`).

The trust and key stores are :mod:`eoskit.connectors.kafka.tls_stores`';
the JAAS line's syntax is :mod:`eoskit.connectors.kafka.jaas`'.

No password (the JAAS config's, the stores') ever appears in an error:
messages name options, never their values.
"""

from __future__ import annotations

from collections.abc import Mapping

from eoskit.connectors.kafka.client_names import (
    JAVA_ONLY, JAVA_ONLY_PREFIXES, SIDE_CLIENT, client_settings, refuse)
from eoskit.connectors.kafka.jaas import parse_jaas
from eoskit.connectors.kafka.tls_stores import keystore, truststore
from eoskit.core.options import Option, OptionError, parse_str

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



def translate(kafka: Mapping[str, str], side: str) -> dict[str, str]:
    """``kafka.*`` settings (prefix removed) of the ``side`` (``"source"`` or
    ``"sink"``) as librdkafka's configuration: the Java client's names
    translated, librdkafka's in lower case; raises :class:`OptionError`
    naming the option for anything librdkafka cannot do or the side has no
    use for. Values of secrets are never part of an error."""
    if side not in SIDE_CLIENT:
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

    _refuse_java_and_librdkafka_names(given)
    out = client_settings(
        {low: kafka[key] for low, key in given.items() if low not in _HANDLED}, side)
    _check_ciphers(get, given)

    protocol = get("security.protocol")
    if protocol is not None:
        protocol = protocol.strip().upper()
        if protocol not in PROTOCOLS:
            raise OptionError(f"option 'kafka.security.protocol' = {kafka[given['security.protocol']]!r}: "
                              f"expected one of {', '.join(PROTOCOLS)}")
        out["security.protocol"] = protocol
    tls = protocol in ("SSL", "SASL_SSL")
    _sasl(get, out, protocol)
    truststore(get, out, tls)
    keystore(get, out, tls)

    algorithm = get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        value = algorithm.strip().lower()
        if value not in ("", "https", "none"):
            raise OptionError(
                f"option 'kafka.ssl.endpoint.identification.algorithm' = {algorithm!r}: "
                "expected https (check the broker's host name) or empty (do not)")
        out["ssl.endpoint.identification.algorithm"] = value or "none"
    return out


def _refuse_java_and_librdkafka_names(given: Mapping[str, str]) -> None:
    """Refuses (lower-case name -> name as given) the Java-only settings and
    librdkafka's own spellings of what the security options translate to."""
    for low, key in given.items():
        if low in JAVA_ONLY:
            raise refuse(key, JAVA_ONLY[low])
        for prefix, why in JAVA_ONLY_PREFIXES.items():
            if low.startswith(prefix):
                raise refuse(key, why)
        if low in LIBRDKAFKA_NAMES:
            raise OptionError(
                f"option 'kafka.{key}' is librdkafka's name; eoskit-kafka takes Spark's Kafka "
                f"option names: use {LIBRDKAFKA_NAMES[low]}")


def _check_ciphers(get, given: Mapping[str, str]) -> None:  # noqa: ANN001
    """Refuses Java's cipher suite names (librdkafka takes OpenSSL's)."""
    ciphers = get("ssl.cipher.suites")
    if ciphers is not None and any(c.strip().upper().startswith(("TLS_", "SSL_"))
                                   for c in ciphers.split(",")):
        raise OptionError(
            f"option 'kafka.{given['ssl.cipher.suites']}' names Java cipher suites "
            f"({ciphers!r}); librdkafka takes OpenSSL's names, colon-separated, e.g. "
            "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384 (openssl ciphers -v "
            "lists them), or remove the option")


def _sasl(get, out: dict[str, str], protocol: str | None) -> None:  # noqa: ANN001
    """The SASL mechanism and the JAAS line's user and password into
    ``out``, checked against each other and the (upper-case) ``protocol``."""
    sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
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


_HANDLED = {o.name[len("kafka."):].lower() for o in OPTIONS}
