"""Declared options for eoskit's data sources and sinks.

Every option is declared once, with its type, default and help text, and
checked once when the data source is created, so that a bad value fails
before the query starts with an error that names the option. Names follow
Spark's conventions and are matched case-insensitively, as Spark does for
every data source option.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class OptionError(ValueError):
    """A data source option is missing, unknown or has a bad value."""


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def parse_positive_int(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError("expected a positive whole number")
    return value


def parse_str(text: str) -> str:
    return text


def parse_choice(*choices: str) -> Callable[[str], str]:
    """A parser that accepts one of ``choices``, case-insensitively."""

    def parse(text: str) -> str:
        for choice in choices:
            if text.strip().lower() == choice.lower():
                return choice
        raise ValueError(f"expected one of {', '.join(choices)}")

    return parse


@dataclass(frozen=True)
class Option(Generic[T]):
    """One option: its Spark-style name, how to parse it, its default, why it exists."""

    name: str
    parse: Callable[[str], T]
    default: T | None
    help: str
    secret: bool = False

    def read(self, raw: Mapping[str, str]) -> T | None:
        text = raw.get(self.name.lower())
        if text is None:
            return self.default
        try:
            return self.parse(text)
        except (ValueError, TypeError) as exc:
            shown = "<redacted>" if self.secret else repr(text)
            raise OptionError(f"option '{self.name}' = {shown}: {exc}") from None


@dataclass(frozen=True)
class OptionSet:
    """The options a data source accepts, plus prefixes passed through to a client."""

    options: tuple[Option[Any], ...]
    passthrough_prefixes: tuple[str, ...] = ()
    owner: str = "data source"
    _by_name: dict[str, Option[Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {o.name.lower(): o for o in self.options})

    def normalise(self, raw: Mapping[str, str]) -> dict[str, str]:
        """Lower-case the keys and refuse unknown ones, suggesting the closest name."""
        lowered = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
        for key in lowered:
            if key in self._by_name:
                continue
            if any(key.startswith(p.lower()) for p in self.passthrough_prefixes):
                continue
            names = [o.name for o in self.options]
            close = difflib.get_close_matches(key, [n.lower() for n in names], n=1)
            hint = ""
            if close:
                hint = f" Did you mean '{next(n for n in names if n.lower() == close[0])}'?"
            raise OptionError(
                f"unknown option '{key}' for {self.owner}.{hint} "
                f"Known options: {', '.join(sorted(names))}"
                + (
                    f", and {', '.join(p + '*' for p in self.passthrough_prefixes)}"
                    if self.passthrough_prefixes
                    else ""
                )
                + "."
            )
        return lowered

    def passthrough(self, raw: Mapping[str, str], prefix: str) -> dict[str, str]:
        """Options under ``prefix`` with the prefix removed, keys kept as given."""
        return {
            str(k)[len(prefix) :]: str(v)
            for k, v in raw.items()
            if str(k).lower().startswith(prefix.lower())
        }

    def docs(self) -> Iterable[str]:
        """Markdown table rows, so the docs are generated from the declarations."""
        yield "| option | default | meaning |"
        yield "| --- | --- | --- |"
        for o in self.options:
            default = "" if o.default is None else f"`{o.default}`"
            yield f"| `{o.name}` | {default} | {o.help} |"
