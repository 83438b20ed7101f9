"""Kafka security settings as Spark users write them, translated for librdkafka.

A Spark job configures its Kafka clients with the Java client's property
names (``kafka.security.protocol``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location``, ...). The eoskit-kafka source and sink
take the same names and translate them, when the options are parsed (at
``load()`` / ``save()``), into librdkafka's; what librdkafka cannot do is
refused there, by name, with what to do instead. Nothing Java-only reaches
librdkafka to fail later, in a task.

No password (the JAAS config's, the stores') ever appears in an error:
messages name options, never their values.
"""

from __future__ import annotations

from collections.abc import Mapping

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
    "ssl.ca.location. JKS and PKCS12 truststores are refused with the command that "
    "converts them to PEM.")
TRUSTSTORE_TYPE = Option(
    "kafka.ssl.truststore.type", parse_str, None,
    "PEM (JKS, Java's default, and PKCS12 are refused: librdkafka reads neither).")
TRUSTSTORE_CERTIFICATES = Option(
    "kafka.ssl.truststore.certificates", parse_str, None,
    "With ssl.truststore.type=PEM: the CA certificates themselves (PEM text), "
    "librdkafka's ssl.ca.pem.")
TRUSTSTORE_PASSWORD = Option(
    "kafka.ssl.truststore.password", parse_str, None,
    "Refused: a PEM truststore has no password (as in Java), and JKS or PKCS12 "
    "truststores are refused. Never printed.", secret=True)
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
}
#: Whole families of Java-only settings, by prefix.
JAVA_ONLY_PREFIXES = {
    "sasl.login.": "the Java client's login refresh and retry settings have no librdkafka "
                   "equivalent; remove the option",
    "sasl.oauthbearer.": "OAUTHBEARER is not supported by eoskit-kafka; use SCRAM or PLAIN "
                         "over SASL_SSL",
}

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


def translate(kafka: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` settings (prefix removed) with the Java client's security
    names translated to librdkafka's; raises :class:`OptionError` naming the
    option for anything librdkafka cannot do. Values of secrets are never
    part of an error."""
    given = {k.lower(): k for k in kafka}
    out = {k: v for k, v in kafka.items() if k.lower() not in _HANDLED}

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
            "librdkafka cannot read; convert it to PEM: keytool -exportcert -rfc -keystore "
            f"{location} -alias <alias> -file ca.pem (or keytool -importkeystore to PKCS12, "
            "then openssl pkcs12 -nokeys), and set kafka.ssl.truststore.location=ca.pem "
            "and kafka.ssl.truststore.type=PEM")
    if kind == "PKCS12":
        raise OptionError(
            f"option 'kafka.ssl.truststore.location' = {location!r} is a PKCS12 truststore, "
            "which librdkafka cannot read; convert it to PEM: openssl pkcs12 -in "
            f"{location} -nokeys -out ca.pem, and set kafka.ssl.truststore.location=ca.pem "
            "and kafka.ssl.truststore.type=PEM (and drop kafka.ssl.truststore.password)")
    if get("ssl.truststore.password") is not None:
        raise OptionError("option 'kafka.ssl.truststore.password' does not apply to a PEM "
                          "truststore, which has no password (Java refuses one too); remove it")
    if location is not None:
        out["ssl.ca.location"] = location
    else:
        out["ssl.ca.pem"] = certificates


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
