"""The MySQL sink's SQL literals and URL checks, without a server.

The literals must be the driver's own (PyMySQL's ``escape_string``, byte
for byte) and must end exactly where they end when the server reads them
as utf8mb4 with backslash escapes; a small model of the server's string
scanner shows both that and, read as GBK, the multibyte bypass the pinned
character set closes. The URL's query keys are an allow-list.
"""

from __future__ import annotations

import decimal
import random
import re

import pyarrow as pa
import pymysql
import pytest
from pymysql.converters import escape_item, escape_string
from sqlalchemy.engine import make_url

from eoskit.connectors.mysql import connection, literals
from eoskit.core.options import OptionError
from eoskit.twophase.contract import SinkError

#: Characters whose UTF-8 bytes end in a lead byte of a multibyte
#: character set, so that read in it they pair with a following backslash:
#: U+7E17 (E7 B8 97) in GBK, SJIS and CP932; U+5861 (E5 A1 A1) in BIG5.
GBK_SJIS_BAIT, BIG5_BAIT = "\u7e17", "\u5861"

HOSTILE = [
    "", "'", "''", "\\", "\\'", "'\\", "\\\\'", "\x00", "a\x00b", "\x1a", "\n", "\r", '"',
    "'; DROP TABLE t; -- ", "') , (666, 0x70776e6564)#", "\\'),(666,1)#",
    GBK_SJIS_BAIT + "'),(666, 0x70776e6564)#", BIG5_BAIT + "'),(666, 0x70776e6564)#",
    GBK_SJIS_BAIT + "\\", GBK_SJIS_BAIT * 3 + "'", "\u00bf'", "\u00bf\\'", "\uff07", "\u2019",
    "\u5f00\\", "\u8868'", "\u529f\\", "\u8a31'", "\ufffd'", "\U0001f600'\\\x00",
    "%_\\%\\_", "\t\b", "--", "#", "/*", "*/", "`", "$$",
]


def quoted(values: list[str | None]) -> list[str | None]:
    return literals.literals(pa.array(values, pa.string()), "s").to_pylist()


def driver(value: str) -> str:
    return escape_item(value, "utf8mb4")


def test_hostile_strings_are_escaped_byte_for_byte_as_pymysql_escapes_them():
    assert quoted(HOSTILE) == [driver(v) for v in HOSTILE]
    assert quoted(HOSTILE) == ["'" + escape_string(v) + "'" for v in HOSTILE]


def test_every_code_point_is_escaped_as_pymysql_escapes_it():
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    expected = ["'" + escape_string(c) + "'" for c in chars]
    assert quoted(chars) == expected


def test_random_strings_of_hostile_pieces_are_escaped_as_pymysql_escapes_them():
    rng = random.Random(7)
    pieces = ["'", "\\", "\x00", "\x1a", '"', "\n", "\r", GBK_SJIS_BAIT, BIG5_BAIT, "a", " ",
              "\u00e9", "\U0001f600", "#", "--", ")", "(", ","]
    values = ["".join(rng.choice(pieces) for _ in range(rng.randrange(12))) for _ in range(20_000)]
    values += ["".join(chr(rng.choice([rng.randrange(0x80), rng.randrange(0x80, 0xD800),
                                       rng.randrange(0xE000, 0x110000)]))
                       for _ in range(rng.randrange(20))) for _ in range(20_000)]
    assert quoted(values) == [driver(v) for v in values]


def test_nulls_sliced_and_other_string_layouts():
    values = ["a'", None, "\\", GBK_SJIS_BAIT + "'", None]
    expected = [None if v is None else driver(v) for v in values]
    expected = ["NULL" if v is None else v for v in expected]
    for array in (pa.array(values, pa.string()), pa.array(values, pa.large_string()),
                  pa.array(values, pa.string_view()),
                  pa.array(values, pa.string()).dictionary_encode()):
        assert literals.literals(array, "s").to_pylist() == expected
    sliced = pa.array(["x"] + values, pa.string()).slice(1)
    assert literals.literals(sliced, "s").to_pylist() == expected
    chunked = pa.chunked_array([values[:2], values[2:]], pa.string())
    assert literals.literals(chunked, "s").to_pylist() == expected


def utf8_with(raw: list[bytes | None]) -> pa.Array:
    """A string array holding exactly these bytes, unchecked, as Spark's
    CAST(binary AS STRING) hands them over."""
    return pa.array(raw, pa.binary()).view(pa.string())


def test_text_that_is_not_utf8_is_refused_naming_column_and_row():
    # C3 then a quote: a broken two-byte sequence; lone continuation bytes;
    # a GBK-encoded bait; a surrogate's encoding.
    for bad in (b"\xc3'", b"\xbf'", "\u7e17'".encode("gbk"), b"\xed\xa0\x80", b"\xff"):
        column = utf8_with([b"fine", None, bad])
        with pytest.raises(SinkError) as err:
            literals.literals(column, "comment")
        assert "'comment'" in str(err.value) and "row 2" in str(err.value)
        assert "UTF-8" in str(err.value)


def test_invalid_bytes_under_a_null_are_not_data():
    validity = pa.array([True, False]).buffers()[1]
    offsets = pa.array([0, 1, 3], pa.int32()).buffers()[1]
    column = pa.Array.from_buffers(pa.string(), 2, [validity, offsets, pa.py_buffer(b"a\xff'")])
    assert literals.literals(column, "s").to_pylist() == ["'a'", "NULL"]


# --------------------------------------------------- the server's string scanner

def _utf8mb4_char(data: bytes, i: int) -> int:
    """Length of a valid UTF-8 multi-byte character at i, else 0 (MySQL's
    my_ismbchar for utf8mb4: an invalid sequence is a single byte)."""
    lead = data[i]
    size = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    if size:
        try:
            data[i:i + size].decode("utf-8")
            return size
        except UnicodeDecodeError:
            return 0
    return 0


def _gbk_char(data: bytes, i: int) -> int:
    """MySQL's my_ismbchar for gbk: a lead 0x81-0xFE and a trail
    0x40-0x7E or 0x80-0xFE make one character."""
    if i + 1 < len(data) and 0x81 <= data[i] <= 0xFE and (
            0x40 <= data[i + 1] <= 0x7E or 0x80 <= data[i + 1] <= 0xFE):
        return 2
    return 0


_UNESCAPE = {ord("0"): b"\x00", ord("n"): b"\n", ord("r"): b"\r", ord("Z"): b"\x1a",
             ord("t"): b"\t", ord("b"): b"\b", ord("%"): b"\\%", ord("_"): b"\\_"}


def scan_literal(data: bytes, start: int, mbchar=_utf8mb4_char) -> tuple[bytes, int]:
    """The value of the quoted literal at ``start`` and the index just past
    its closing quote, read as the server's lexer reads a string with
    backslash escapes on (sql_lex.cc, get_text)."""
    assert data[start:start + 1] == b"'"
    out, i = bytearray(), start + 1
    while i < len(data):
        size = mbchar(data, i)
        if size:
            out += data[i:i + size]
            i += size
        elif data[i] == 0x5C and i + 1 < len(data):
            size = mbchar(data, i + 1)
            if size:  # a backslash before a multibyte character is dropped
                out += data[i + 1:i + 1 + size]
                i += 1 + size
                continue
            out += _UNESCAPE.get(data[i + 1], bytes([data[i + 1]]))
            i += 2
        elif data[i] == 0x27:
            if data[i + 1:i + 2] == b"'":
                out += b"'"
                i += 2
            else:
                return bytes(out), i + 1
        else:
            out.append(data[i])
            i += 1
    raise AssertionError("the literal never ends")


def statement_of(values: list[str]) -> bytes:
    batch = pa.record_batch({"id": pa.array(range(len(values)), pa.int64()),
                             "s": pa.array(values, pa.string())})
    (statement, count), = literals.statements(b"INSERT INTO t (id, s) VALUES ",
                                              literals.value_rows(batch), b"", 1 << 30)
    assert count == len(values)
    return statement


def rows_read_by_the_server(statement: bytes, mbchar=_utf8mb4_char) -> list[tuple[int, bytes]]:
    """(id, value) rows of ``INSERT ... VALUES (id,'..'),...`` as the
    scanner reads them; AssertionError where the text is not that shape."""
    i = statement.index(b"VALUES ") + len(b"VALUES ")
    rows = []
    while True:
        number = re.match(rb"\((\d+),", statement[i:])
        assert number, f"not a row at {statement[i:i + 40]!r}"
        value, i = scan_literal(statement, i + number.end(), mbchar)
        rows.append((int(number.group(1)), value))
        assert statement[i:i + 1] == b")", f"the literal ended early, before {statement[i:i + 40]!r}"
        i += 1
        if i == len(statement):
            return rows
        assert statement[i:i + 1] == b",", f"extra SQL after a literal: {statement[i:i + 40]!r}"
        i += 1


def test_each_literal_reads_back_as_its_value_and_ends_where_it_should():
    rng = random.Random(3)
    values = HOSTILE + ["".join(rng.choice(HOSTILE) for _ in range(4)) for _ in range(2_000)]
    rows = rows_read_by_the_server(statement_of(values))
    assert rows == [(i, v.encode()) for i, v in enumerate(values)]


def test_read_as_gbk_the_same_statement_runs_a_values_own_sql():
    """The model is not vacuous: read as GBK (what ``?charset=gbk`` did),
    the bait's last byte takes the escaping backslash and the quote ends
    the literal, so the rest of the value is SQL."""
    value = GBK_SJIS_BAIT + "'),(666, 0x70776e6564)#"
    statement = statement_of([value])
    assert rows_read_by_the_server(statement) == [(0, value.encode())]
    start = statement.index(b"'")
    _, end = scan_literal(statement, start, _gbk_char)
    assert statement[end:] == b"),(666, 0x70776e6564)#')"
    with pytest.raises(AssertionError):
        rows_read_by_the_server(statement, _gbk_char)


# ------------------------------------------------------------- other literals

def test_binary_values_are_hex_literals_in_every_layout():
    rng = random.Random(5)
    values = [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(3_000)]
    values += [b"", b"'", b"\\", b"\x00", "\u7e17'".encode("gbk"), bytes(range(256))]
    values = [None if i % 17 == 0 else v for i, v in enumerate(values)]
    expected = ["NULL" if v is None else "X'" + v.hex() + "'" for v in values]
    for kind in (pa.binary(), pa.large_binary(), pa.binary_view()):
        array = pa.array(values, kind)
        assert literals.literals(array, "b").to_pylist() == expected
        assert literals.literals(array.slice(7, 100), "b").to_pylist() == expected[7:107]
    fixed = [None if i % 5 == 0 else bytes([i % 256, 0x27, 0x5C]) for i in range(300)]
    array = pa.array(fixed, pa.binary(3))
    expected_fixed = ["NULL" if v is None else "X'" + v.hex() + "'" for v in fixed]
    assert literals.literals(array, "f").to_pylist() == expected_fixed
    assert literals.literals(array.slice(3, 50), "f").to_pylist() == expected_fixed[3:53]
    assert literals.literals(pa.array([], pa.binary()), "e").to_pylist() == []
    assert literals.literals(pa.array([b"", None, b""], pa.binary()), "e").to_pylist() == [
        "X''", "NULL", "X''"]


def test_numbers_are_plain_number_text():
    rng = random.Random(9)
    ints = [0, 1, -1, 2**63 - 1, -2**63] + [rng.randrange(-2**63, 2**63) for _ in range(1000)]
    floats = [0.0, -0.0, 5e-324, 1.7976931348623157e308, -1e-300, 0.1] + [
        rng.uniform(-1e300, 1e300) for _ in range(1000)]
    decimals = [decimal.Decimal("-12345678901234567890.123456"), decimal.Decimal("0.000001")]
    number = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
    for array in (pa.array(ints, pa.int64()), pa.array(floats, pa.float64()),
                  pa.array(decimals, pa.decimal128(38, 6))):
        for text in literals.literals(array, "n").to_pylist():
            assert number.fullmatch(text), text
    assert [float(t) for t in literals.literals(pa.array(floats), "n").to_pylist()] == floats
    assert [int(t) for t in literals.literals(pa.array(ints), "n").to_pylist()] == ints


# ------------------------------------------------------------------ URL keys

PASSWORD = "pw-Secret-42"
BASE = f"mysql+pymysql://app:{PASSWORD}@db.example:3306/shop"


def url(query: str):
    return make_url(f"{BASE}?{query}")


REFUSED = ["charset", "collation", "init_command", "sql_mode", "read_default_file",
           "read_default_group", "autocommit", "local_infile", "client_flag", "binary_prefix",
           "conv", "cursorclass", "defer_connect", "use_unicode", "max_allowed_packet",
           "server_public_key", "auth_plugin_map", "ssl", "host", "password", "db", "passwd",
           "CHARSET", "Charset", "chrset", "compress"]


@pytest.mark.parametrize("key", REFUSED)
def test_url_keys_that_could_change_the_session_are_refused_by_name(key):
    value = "gbk-v4lue"
    for call in (connection.check_url, connection.connect_kwargs,
                 connection.engine_connect_args, connection.connect):
        with pytest.raises(OptionError) as err:
            call(url(f"{key}={value}"))
        message = str(err.value)
        assert "option 'url'" in message and f"'{key}'" in message
        assert PASSWORD not in message and value not in message and "db.example" not in message


@pytest.mark.parametrize("charset", ["gbk", "big5", "sjis", "cp932", "latin1", "utf8", "binary"])
def test_a_charset_other_than_the_pinned_one_is_refused_for_its_reason(charset):
    with pytest.raises(OptionError, match="pins the session's character set to utf8mb4"):
        connection.check_url(url(f"charset={charset}"))


def test_charset_utf8mb4_as_sqlalchemy_writes_it_is_the_pin_itself():
    for value in ("utf8mb4", "UTF8MB4"):
        kwargs = connection.connect_kwargs(url(f"charset={value}&connect_timeout=3"))
        assert "charset" not in kwargs and kwargs["connect_timeout"] == 3
        assert connection.engine_connect_args(url(f"charset={value}"))["charset"] == "utf8mb4"


def test_a_key_given_twice_is_refused():
    with pytest.raises(OptionError, match="'ssl_ca' is given more than once"):
        connection.check_url(url("ssl_ca=/a&ssl_ca=/b"))


def test_accepted_keys_are_typed():
    kwargs = connection.connect_kwargs(url(
        "ssl_disabled=false&ssl_verify_cert=true&connect_timeout=5&read_timeout=2.5"
        "&unix_socket=/run/mysqld/mysqld.sock&ssl_ca=/etc/ca.pem&port=3307"))
    assert kwargs["ssl_disabled"] is False and kwargs["ssl_verify_cert"] is True
    assert kwargs["connect_timeout"] == 5 and kwargs["read_timeout"] == 2.5
    assert kwargs["unix_socket"] == "/run/mysqld/mysqld.sock" and kwargs["ssl_ca"] == "/etc/ca.pem"
    assert kwargs["port"] == 3307 and kwargs["host"] == "db.example"
    assert kwargs["password"] == PASSWORD and "charset" not in kwargs
    connection.check_url(make_url(BASE))


@pytest.mark.parametrize("query", ["connect_timeout=-1", "connect_timeout=soon",
                                   "ssl_disabled=perhaps", "port=99999"])
def test_bad_values_of_accepted_keys_are_refused_without_the_value(query):
    key, value = query.split("=")
    with pytest.raises(OptionError) as err:
        connection.check_url(url(query))
    assert f"'{key}'" in str(err.value) and value not in str(err.value)


def test_engine_sessions_are_pinned_as_the_sinks_own():
    args = connection.engine_connect_args(url("ssl_disabled=false"))
    assert args["charset"] == "utf8mb4" and args["ssl_disabled"] is False
    assert "NO_BACKSLASH_ESCAPES" in args["init_command"] and args["local_infile"] is False
    assert args["read_default_file"] is None and args["sql_mode"] is None


def test_pymysql_has_no_connect_argument_the_allow_list_does_not_judge():
    """A PyMySQL upgrade that adds an argument must be judged here."""
    import inspect

    arguments = set(inspect.signature(pymysql.connections.Connection.__init__).parameters) - {"self"}
    judged = set(connection.URL_KEYS) | set(connection.REFUSED_URL_KEYS)
    assert arguments <= judged, sorted(arguments - judged)


def test_the_docs_list_exactly_the_accepted_url_keys():
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "mysql-sink.md").read_text()
    listed = docs.split("**accepts only these URL query keys**")[1].split("Every other key")[0]
    assert set(re.findall(r"`([a-z_]+)`", listed)) == set(connection.URL_KEYS)
