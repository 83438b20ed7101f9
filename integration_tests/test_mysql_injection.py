"""No record's value runs as SQL in the MySQL sink, against the real server.

Hostile values go through the sink's own statement path (``literals`` on a
``connection.connect`` session) and are read back as hex by a plain PyMySQL
connection of the test's own. The multibyte escape bypass is shown to be
real on a session left in GBK, BIG5, SJIS or CP932, and shown to be closed
for the sink: a URL cannot choose the character set, and a session that
drifted from the pin is refused.
"""

from __future__ import annotations

import random
import uuid

import pyarrow as pa
import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from eoskit.connectors.mysql import connection, literals
from eoskit.core.options import OptionError
from eoskit.twophase.contract import SinkError

#: Their UTF-8 bytes end in a lead byte of the character set, which read
#: in it takes the escaping backslash: U+7E17 for GBK, SJIS, CP932; U+5861 for BIG5.
BAIT = {"gbk": "\u7e17", "sjis": "\u7e17", "cp932": "\u7e17", "big5": "\u5861"}
#: What a value would add if it escaped its literal: a row with id 666
#: (and a comment that swallows the rest of the statement).
ESCAPE = "', NULL),(666, 0x70776e6564, NULL)#"
HOSTILE = [
    "", "'", "\\", "\\'", "'\\", "\x00", "a\x00b", "\x1a", "\n\r", '"', "''", "%_\\%",
    "'; DROP TABLE t; -- ", "\\'),(666, 1, NULL)#", "\u00bf'", "\u00bf\\'", "\uff07\u2019",
    "\U0001f600'\\\x00", "\u8868'", "\u529f\\", "\u8a31'",
    *(bait + ESCAPE for bait in sorted(set(BAIT.values()))),
    "\u7e17\\", "\u7e17" * 3 + "'",
]


def plain(url: str, **kwargs) -> pymysql.connections.Connection:
    """A connection of the test's own, not eoskit's."""
    u = make_url(url)
    return pymysql.connect(host=u.host, port=u.port, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True, **kwargs)


def run(url: str, statement: str, args=None) -> list[tuple]:
    conn = plain(url)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, args)
            return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()


@pytest.fixture
def table(mysql) -> str:
    name = f"inj_{uuid.uuid4().hex[:10]}"
    run(mysql, f"CREATE TABLE `{name}` (id BIGINT NOT NULL, s LONGTEXT, b LONGBLOB) "
               "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
    yield name
    run(mysql, f"DROP TABLE IF EXISTS `{name}`")


def batch_of(values: list[str]) -> pa.RecordBatch:
    return pa.record_batch({
        "id": pa.array(range(len(values)), pa.int64()),
        "s": pa.array(values, pa.string()),
        "b": pa.array([v.encode("utf-8")[::-1] for v in values], pa.binary()),
    })


def write(conn: pymysql.connections.Connection, table: str, values: list[str],
          max_bytes: int = 1 << 20) -> int:
    """The sink's statement path: literals joined into multi-row INSERTs."""
    prefix = f"INSERT INTO `{table}` (`id`, `s`, `b`) VALUES ".encode()
    statements = 0
    for statement, _ in literals.statements(prefix, literals.value_rows(batch_of(values)),
                                            b"", max_bytes):
        with conn.cursor() as cur:
            cur.execute(statement)
        statements += 1
    return statements


def stored(url: str, table: str) -> list[tuple[int, str, str]]:
    """Every row, its text and bytes as the server's own hex."""
    return run(url, f"SELECT id, HEX(s), HEX(b) FROM `{table}` ORDER BY id")


def expected(values: list[str]) -> list[tuple[int, str, str]]:
    return [(i, v.encode().hex().upper(), v.encode()[::-1].hex().upper())
            for i, v in enumerate(values)]


def with_query(url: str, **query: str):
    return make_url(url).update_query_dict(query)


def assert_no_password(message: str, url) -> None:
    url = make_url(url)
    if url.password:
        assert f":{url.password}@" not in message
        assert url.render_as_string(hide_password=False) not in message


# ----------------------------------------------------------------- the tests

def test_hostile_values_round_trip_exactly_through_the_sinks_statements(mysql, table):
    rng = random.Random(11)
    values = HOSTILE + ["".join(rng.choice(HOSTILE) for _ in range(3)) for _ in range(500)]
    values += ["".join(chr(rng.choice([rng.randrange(1, 0x80), rng.randrange(0x80, 0xD800),
                                       rng.randrange(0xE000, 0x110000)]))
                       for _ in range(rng.randrange(30))) for _ in range(500)]
    conn = connection.connect(make_url(mysql))
    try:
        statements = write(conn, table, values, max_bytes=8 << 10)
    finally:
        conn.close()
    assert statements > 5  # statements were cut between rows, hostile ones included
    assert stored(mysql, table) == expected(values)
    assert not run(mysql, "SHOW TABLES LIKE 'pwned%'")


def test_the_sinks_literals_are_the_live_drivers_own(mysql):
    """PyMySQL's escaping on a real utf8mb4 session (``conn.escape``, which
    also looks at the session's NO_BACKSLASH_ESCAPES) gives the same text."""
    conn = plain(mysql, charset="utf8mb4")
    try:
        texts = literals.literals(pa.array(HOSTILE, pa.string()), "s").to_pylist()
        assert texts == [conn.escape(v) for v in HOSTILE]
        raw = [v.encode() for v in HOSTILE]
        assert literals.literals(pa.array(raw, pa.binary()), "b").to_pylist() == [
            conn.escape(v) for v in raw]
    finally:
        conn.close()


@pytest.mark.parametrize("charset", sorted(BAIT))
def test_the_bypass_is_real_on_a_session_left_in_a_multibyte_charset(mysql, table, charset):
    """The control: the same statement bytes, run by a plain session in
    ``charset``, do run the value's SQL (an extra row). This is what the
    pin prevents; were it not so, the tests below would prove nothing."""
    conn = plain(mysql, charset=charset)
    try:
        write(conn, table, [BAIT[charset] + ESCAPE])
    finally:
        conn.close()
    ids = [row[0] for row in stored(mysql, table)]
    assert ids == [0, 666]


@pytest.mark.parametrize("charset", sorted(BAIT))
def test_a_url_charset_cannot_open_an_injection(mysql, table, charset):
    """Whatever the URL says, the value stays data: the URL's charset is
    refused (it was passed to PyMySQL before, and the row 666 appeared)."""
    values = [BAIT[charset] + ESCAPE, "after"]
    try:
        conn = connection.connect(with_query(mysql, charset=charset))
    except OptionError as exc:
        assert "'charset'" in str(exc) and "option 'url'" in str(exc)
        conn = connection.connect(make_url(mysql))
    try:
        write(conn, table, values)
    finally:
        conn.close()
    assert stored(mysql, table) == expected(values)


@pytest.mark.parametrize("key, value", [
    ("charset", "gbk"), ("collation", "gbk_chinese_ci"), ("init_command", "SET NAMES gbk"),
    ("sql_mode", "NO_BACKSLASH_ESCAPES"), ("read_default_group", "client"),
    ("client_flag", "65536"), ("local_infile", "1"),
])
def test_url_keys_that_change_the_session_are_refused_by_name(mysql, key, value):
    url = with_query(mysql, **{key: value})
    for open_ in (connection.connect,
                  lambda u: sa.create_engine(u, poolclass=NullPool,
                                             connect_args=connection.engine_connect_args(u))):
        with pytest.raises(OptionError) as err:
            open_(url)
        assert f"'{key}'" in str(err.value) and "option 'url'" in str(err.value)
        assert_no_password(str(err.value), url)


def test_an_option_file_in_the_url_is_refused(mysql, tmp_path):
    option_file = tmp_path / "my.cnf"
    option_file.write_text("[client]\ndefault-character-set=gbk\n")
    with pytest.raises(OptionError, match="'read_default_file'"):
        connection.connect(with_query(mysql, read_default_file=str(option_file)))


def test_sink_and_engine_sessions_are_pinned(mysql):
    """Also with the query SQLAlchemy's docs suggest, which is the pin itself."""
    check = "SELECT @@character_set_client, @@character_set_connection, @@sql_mode, @@time_zone"
    url = with_query(mysql, charset="utf8mb4", connect_timeout="10")
    conn = connection.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(check)
            client, conn_charset, sql_mode, zone = cur.fetchone()
    finally:
        conn.close()
    assert (client, conn_charset, zone) == ("utf8mb4", "utf8mb4", "+00:00")
    assert "NO_BACKSLASH_ESCAPES" not in sql_mode
    engine = sa.create_engine(url, poolclass=NullPool,
                              connect_args=connection.engine_connect_args(url))
    try:
        with engine.connect() as c:
            client, conn_charset, sql_mode, zone = c.exec_driver_sql(check).one()
    finally:
        engine.dispose()
    assert (client, conn_charset, zone) == ("utf8mb4", "utf8mb4", "+00:00")
    assert "NO_BACKSLASH_ESCAPES" not in sql_mode


@pytest.mark.parametrize("drift, named", [
    ("SET NAMES gbk", "character_set_client is 'gbk'"),
    ("SET character_set_connection = big5", "character_set_connection is 'big5'"),
    ("SET sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')", "NO_BACKSLASH_ESCAPES"),
])
def test_a_session_that_drifted_from_the_pin_is_refused(mysql, drift, named):
    """What init_connect or a server default would do to a session, done
    after the fact: the read-back that ``connect`` runs refuses it."""
    url = make_url(mysql)
    conn = connection.connect(url)
    try:
        connection.verify_session(conn, url)
        with conn.cursor() as cur:
            cur.execute(drift)
        with pytest.raises(SinkError) as err:
            connection.verify_session(conn, url)
    finally:
        conn.close()
    assert named in str(err.value)
    assert_no_password(str(err.value), url)
