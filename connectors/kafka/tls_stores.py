"""The trust and key stores of Spark's Kafka TLS options
(``kafka.ssl.truststore.*``, ``kafka.ssl.keystore.*``, ``kafka.ssl.key.password``)
as librdkafka's settings: PEM files and text passed on, a PKCS12
truststore read here (with the ``cryptography`` package) and handed over
as PEM, a PKCS12 keystore passed by location, JKS refused with the
command that converts it. Runs where the options are parsed (the
driver), called by :func:`eoskit.connectors.kafka.security.translate`;
raising :class:`OptionError` refuses the options. Passwords are never
part of an error."""

from __future__ import annotations

from eoskit.core.options import OptionError


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


def truststore(get, out: dict[str, str], tls: bool) -> None:  # noqa: ANN001
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


def keystore(get, out: dict[str, str], tls: bool) -> None:  # noqa: ANN001
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
