"""subscribePattern read as Java reads it (java.util.regex)."""

import re

import pytest

from eoskit.connectors.kafka.java_regex import JavaRegexError, to_python
from eoskit.connectors.kafka.settings import KafkaSourceSettings

TOPICS = ["orders-1f", "orders-ab", "orders-x9", "orders-", "orders.eu", "a.b", "aXb", "o]", "o9"]


@pytest.mark.parametrize("java, matched", [
    (r"orders-\p{XDigit}+", ["orders-1f", "orders-ab"]),
    (r"orders-\p{IsAlphabetic}", None),  # a Unicode property: refused
    (r"orders-[\p{Alpha}\p{Digit}]+", ["orders-1f", "orders-ab", "orders-x9"]),
    (r"orders\P{Alnum}\p{Lower}+", ["orders-ab", "orders.eu"]),
    (r"\Qa.b\E", ["a.b"]),
    (r"o\p{Punct}", ["o]"]),
    (r"orders-[a-f[0-9]]++", ["orders-1f", "orders-ab"]),
    (r"orders-[a-z&&[^b]]+", None),
    (r"a[\P{Lower}]b", None),
])
def test_java_pattern_selects_what_java_selects(java, matched):
    if matched is None:
        with pytest.raises(JavaRegexError):
            to_python(java)
        return
    regex = re.compile(to_python(java))
    assert [t for t in TOPICS if regex.fullmatch(t)] == matched


def test_subscribe_pattern_option_is_read_as_java():
    settings = KafkaSourceSettings.parse({"kafka.bootstrap.servers": "b:9092",
                                          "subscribePattern": r"orders-\p{XDigit}+"})
    assert settings.subscription.select({t: [0] for t in TOPICS}) == [("orders-1f", 0), ("orders-ab", 0)]
    with pytest.raises(Exception, match="intersection"):
        KafkaSourceSettings.parse({"kafka.bootstrap.servers": "b:9092",
                                   "subscribePattern": "o[a-z&&[^b]]"})
