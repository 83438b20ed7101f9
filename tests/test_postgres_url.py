"""The PostgreSQL sink's URL keys: nothing a URL says changes the session's
encoding away from the UTF-8 the sink sends (pure: URL parsing only)."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from eoskit.twophase.options import OptionError
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
