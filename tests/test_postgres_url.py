"""The PostgreSQL sink's URL keys: nothing a URL says changes the session's
encoding away from the UTF-8 the sink sends (pure: URL parsing only)."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from eoskit.core.options import OptionError
from eoskit.connectors.postgres.connection import check_url, connect_kwargs

BASE = "postgresql://eoskit:s3cret@127.0.0.1:5432/db"


@pytest.mark.parametrize("query", ["client_encoding=LATIN1", "client_encoding=SJIS",
                                   "options=-c%20client_encoding%3DGBK"])
def test_a_url_that_changes_the_encoding_is_refused(query):
    with pytest.raises(OptionError) as raised:
        check_url(make_url(f"{BASE}?{query}"))
    assert "client_encoding" in str(raised.value) and "s3cret" not in str(raised.value)


@pytest.mark.parametrize("query", ["client_encoding=UTF8", "client_encoding=utf-8",
                                   "options=-c%20search_path%3Dsales", "sslmode=disable", ""])
def test_other_keys_and_utf8_are_accepted(query):
    check_url(make_url(f"{BASE}?{query}"))


def test_the_session_encoding_is_pinned_whatever_the_url_says():
    kwargs = connect_kwargs(make_url(f"{BASE}?client_encoding=utf-8&sslmode=disable"))
    assert kwargs["client_encoding"] == "UTF8" and kwargs["sslmode"] == "disable"


def test_the_network_bounds_reach_libpq_and_the_servers_session():
    from eoskit.connectors.postgres.connection import with_limits
    from eoskit.connectors.sql.network import SessionLimits

    limits = SessionLimits(connect=5, network=30, idle=120, reconnect=60)
    assert limits.keepalive() == (10, 6, 3)  # a dead peer noticed within about 30 s
    url = with_limits(make_url("postgresql://u:p@h/db"), limits)
    assert {k: url.query[k] for k in ("connect_timeout", "keepalives", "keepalives_idle",
                                      "keepalives_interval", "keepalives_count", "tcp_user_timeout")} == {
        "connect_timeout": "5", "keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "6",
        "keepalives_count": "3", "tcp_user_timeout": "30000"}
    assert url.query["options"] == ("-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=6 "
                                    "-c tcp_keepalives_count=3 -c tcp_user_timeout=30000 "
                                    "-c idle_in_transaction_session_timeout=120000")


def test_bounds_the_url_gives_win():
    from eoskit.connectors.postgres.connection import with_limits
    from eoskit.connectors.sql.network import SessionLimits

    url = with_limits(make_url("postgresql://u:p@h/db?connect_timeout=30&options=-c%20tcp_keepalives_idle%3D99"),
                      SessionLimits())
    assert url.query["connect_timeout"] == "30"
    assert url.query["options"].startswith("-c tcp_keepalives_idle=99 ")
    assert url.query["options"].count("tcp_keepalives_idle") == 1
