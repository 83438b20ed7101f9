"""A setting is declared once (issue 32, step 3a): a settings dataclass's
fields declare their options, and the option set, parsing and checks are
derived from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from eoskit.core.options import Option, OptionError, OptionSet, parse_positive_int, parse_str, setting


def _needs_small(settings: "Example", reading) -> None:
    if settings.size > 10 and not settings.name:
        raise OptionError(f"{reading.owner}: option 'size' over 10 needs the option 'name'")


@dataclass(frozen=True, kw_only=True)
class Example:
    name: str | None = setting(Option("name", parse_str, None, "A name."))
    size: int = setting(Option("size", parse_positive_int, 3, "A size."))
    label: str = setting(Option("label", parse_str, None, "A label."),
                         derive=lambda text, reading: (text or reading.fields["name"] or "")
                         + reading["suffix"])
    url: str = setting(Option("url", parse_str, None, "Where."), required=" (a URL)")

    CHECKS: ClassVar = (_needs_small,)


OPTIONS = OptionSet.of(Example, also=(Option("extra", parse_str, None, "Taken, unused."),),
                       owner="the example")


def test_the_option_set_is_the_fields_options_then_the_others():
    assert [o.name for o in OPTIONS.options] == ["name", "size", "label", "url", "extra"]


def test_a_field_is_read_derived_and_checked_as_it_declares():
    made = OPTIONS.read({"URL": "u", "Name": "n", "extra": "x"}, "the example", suffix="!")
    assert made == Example(name="n", size=3, label="n!", url="u")
    with pytest.raises(OptionError, match="the example needs the option 'url' \\(a URL\\)"):
        OPTIONS.read({}, "the example", suffix="")
    with pytest.raises(OptionError, match="option 'size' = '0'"):
        OPTIONS.read({"url": "u", "size": "0"}, "the example", suffix="")
    with pytest.raises(OptionError, match="option 'size' over 10 needs the option 'name'"):
        OPTIONS.read({"url": "u", "size": "11"}, "the example", suffix="")
    with pytest.raises(OptionError, match="Did you mean 'size'"):
        OPTIONS.read({"url": "u", "sise": "1"}, "the example", suffix="")
