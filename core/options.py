"""Declared options and settings: one declaration form for all of eoskit.

Every option is declared once, with its type, default and help text, and
checked once when the data source is created, so that a bad value fails
before the query starts with an error that names the option. Names follow
Spark's conventions and are matched case-insensitively, as Spark does for
every data source option. The runtime's settings (``runtime/job/settings.py``)
are declared in the same form (``Setting`` extends ``Option``), and both
read text with the same parsers: one bool (``parse_bool``), one duration
grammar (``parse_duration``, Spark's time strings; what a bare number
counts is part of the declaration, as in Spark's own configuration).

A settings class (a frozen dataclass) declares each of its fields with
``setting(OPTION, ...)``: the option it is read from, what turns the parsed
value into the field's (``derive``), the options that derivation reads too,
whether it is required. Its ``OptionSet`` (``OptionSet.of``) and its
parsing (``OptionSet.read``) are derived from those fields, and rules that
span fields are small named checks on the class (``CHECKS``), so a setting
is written in one place: its field.

It sits at the bottom of the import graph (the protocol's adapter reads
``commitMode``, ``sinkId`` and ``checkpointLocation`` through their
declarations, ``twophase/sink_options.py``), so connectors and the runtime
both build on it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Generic, TypeVar

T = TypeVar("T")
S = TypeVar("S")


class OptionError(ValueError):
    """A data source option is missing, unknown or has a bad value."""


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_bool(text: Any) -> bool:
    """``true``/``false`` as Spark writes them, and ``yes``/``no``,
    ``on``/``off``, ``1``/``0``; a Python bool as it is."""
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in _TRUE or lowered in _FALSE:
        return lowered in _TRUE
    raise ValueError("expected true or false")


# Spark's time strings (JavaUtils.timeStringAs): a number and a unit suffix,
# with the long unit names the runtime took before too; decimals allowed.
_DURATION = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[a-z]*)\s*$")
_SECONDS_PER = {
    "us": 1e-6, "ms": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0,
}


def parse_duration(text: Any, bare: str = "s") -> float:
    """Seconds from a duration: ``500ms``, ``30s``, ``15m``, ``1h``, ``2d``,
    ``5 seconds``. A number without a unit, text or a Python number, counts
    in ``bare`` (``ms`` for the Kafka source's options, as Spark's Kafka
    source reads them; ``s`` for the runtime's settings)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        amount, unit = float(text), bare
    else:
        match = _DURATION.match(str(text).lower())
        if match is None or match["unit"] not in ("", *_SECONDS_PER):
            if str(text).strip().startswith("-"):
                raise ValueError("a duration cannot be negative")
            raise ValueError("expected a duration such as 30s, 500ms, 15m or '5 seconds'")
        amount, unit = float(match["n"]), match["unit"] or bare
    if amount < 0:
        raise ValueError("a duration cannot be negative")
    return amount * _SECONDS_PER[unit]


def parse_duration_ms(text: Any) -> float:
    """Seconds from a duration whose bare number counts milliseconds, as
    Spark's Kafka source reads its options (``15m``, ``30s``, ``500ms``, ``1500``)."""
    return parse_duration(text, bare="ms")


_SIZE = re.compile(r"^\s*(?P<n>\d+)\s*(?P<unit>[kmgt]?)b?\s*$")


def parse_bytes(text: str) -> int:
    """A size in bytes, as Spark's byte strings: ``64m``, ``512k``, ``1g``,
    ``1048576`` (bare bytes); a ``b`` after the unit is allowed (``64mb``)."""
    match = _SIZE.match(str(text).lower())
    if match is None:
        raise ValueError("expected a size such as 64m, 512k, 1g or a number of bytes")
    value = int(match["n"]) * 1024 ** " kmgt".index(match["unit"] or " ")
    if value <= 0:
        raise ValueError("expected a positive size")
    return value


def parse_positive_int(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError("expected a positive whole number")
    return value


def parse_non_negative_int(text: str) -> int:
    """A whole number, 0 meaning no limit."""
    value = int(text.strip())
    if value < 0:
        raise ValueError("expected 0 (no limit) or a positive whole number")
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

    def get(self, options: Mapping[str, str]) -> T | None:
        """The value in ``options`` whatever the case of its keys (Spark's
        options as a data source receives them), parsed; the default if absent."""
        return self.read({str(k).lower(): v for k, v in options.items() if v is not None})

    def read(self, raw: Mapping[str, str]) -> T | None:
        """The value in ``raw``, whose keys are lower case (``OptionSet.normalise``)."""
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
    #: Options a user brings from another system (Spark's JDBC source, say)
    #: that this one does not take: name -> what to do instead. Refused by
    #: name, never mistaken for a typo, and listed in the docs.
    refused: Mapping[str, str] = field(default_factory=dict)
    #: Where the refused options come from, for their error ("Spark JDBC").
    refused_from: str = ""
    #: The settings class whose fields declare these options (``OptionSet.of``):
    #: what ``read`` builds.
    settings: type | None = None
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
            for name, instead in self.refused.items():
                if name.lower() == key:
                    origin = f"a {self.refused_from} option that " if self.refused_from else ""
                    raise OptionError(f"option '{name}' is {origin}{self.owner} does not take: "
                                      f"{instead}")
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

    @classmethod
    def of(cls, settings: type, also: Iterable[Option[Any]] = (), **kwargs: Any) -> "OptionSet":
        """The options the fields of ``settings`` declare (``setting``), in
        field order, each field's option before those its derivation reads;
        then ``also``, options taken but read by none of them (``sinkId``,
        read by the protocol's adapter; ``batchsize``, accepted and unused)."""
        declared = [o for _, d in declarations(settings) for o in (d.option, *d.reads) if o]
        unique: dict[str, Option[Any]] = {}
        for option in (*declared, *also):
            unique.setdefault(option.name.lower(), option)
        return cls(tuple(unique.values()), settings=settings, **kwargs)

    def read(self, options: Mapping[str, str], owner: str, **context: Any) -> Any:
        """``options`` (as Spark hands them to a data source) as the settings
        class this set was made ``of``: unknown names refused, each field
        read as it declares, then each of the class's ``CHECKS``. Runs on
        the driver, where the data source is made; an ``OptionError``
        naming the option (and ``owner``, the sink's name, where the
        declaration says so) fails the query before it starts."""
        if self.settings is None:
            raise TypeError("an OptionSet made without OptionSet.of has no settings class")
        reading = Reading(self.normalise(options), options, owner, context)
        for declared, declaration in declarations(self.settings):
            reading.fields[declared.name] = declaration.value(declared, reading)
        made = self.settings(**reading.fields)
        for check in getattr(self.settings, "CHECKS", ()):
            check(made, reading)
        return made

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
        for name, instead in self.refused.items():
            yield f"| `{name}` | refused | {instead[:1].upper()}{instead[1:]}. |"


# -- settings declared by their options ---------------------------------------------

_DECLARATION = "eoskit.setting"


@dataclass(frozen=True)
class Reading:
    """One reading of a settings class's options, handed to each field's
    ``derive`` and to the class's ``CHECKS``: the options with lower-case
    keys (``raw``, as ``OptionSet.normalise`` gives them) and as given
    (``given``, for passthrough prefixes), the name errors give the reader
    (``owner``: ``eoskit-postgres``), what the caller adds (``context``,
    by key: ``reading["sink_type"]``), and the fields read so far, in
    declaration order (``fields``: a field may derive from an earlier one)."""

    raw: Mapping[str, str]
    given: Mapping[str, str]
    owner: str
    context: Mapping[str, Any] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.context[key]


@dataclass(frozen=True)
class Declaration:
    """How one field of a settings class is read (see ``setting``)."""

    option: Option[Any] | None
    derive: Callable[[Any, Reading], Any] | None = None
    reads: tuple[Option[Any], ...] = ()
    #: None: optional; text: required, and what the error adds after the name.
    required: str | None = None

    def value(self, declared: Field[Any], reading: Reading) -> Any:
        """The field's value: its option parsed (an ``OptionError`` naming
        it), required or absent, then derived. An absent option (None) gives
        the field's default without derivation; a field with no option is
        always derived, as is an absent option's whose field has no default."""
        value = None if self.option is None else self.option.read(reading.raw)
        if self.required is not None and not value:
            raise OptionError(f"{reading.owner} needs the option '{self.option.name}'"
                              f"{self.required}")
        if value is None and self.option is not None:
            if declared.default is not MISSING:
                return declared.default
            if declared.default_factory is not MISSING:
                return declared.default_factory()
        return value if self.derive is None else self.derive(value, reading)


def setting(option: Option[Any] | None = None, *,
            derive: Callable[[Any, Reading], Any] | None = None,
            reads: Iterable[Option[Any]] = (), required: str | None = None,
            **kwargs: Any) -> Any:
    """A settings dataclass field, declared by the option it is read from.

    ``derive(value, reading)`` turns the parsed value into the field's (it
    may read more options, listed in ``reads`` so that the set takes them,
    and raises ``OptionError`` naming the option at fault); without an
    ``option`` the field is derived from ``reads`` alone. ``required``
    (text added after the option's name in the error, such as
    ``" (a SQLAlchemy or JDBC URL)"``) refuses an absent or empty value.
    ``kwargs`` go to ``dataclasses.field``; a plain option's field defaults
    to the option's default."""
    if (option is not None and derive is None and required is None
            and "default" not in kwargs and "default_factory" not in kwargs):
        kwargs["default"] = option.default
    return field(metadata={_DECLARATION: Declaration(option, derive, tuple(reads), required)},
                 **kwargs)


def declarations(settings: type) -> list[tuple[Field[Any], Declaration]]:
    """The declared fields of a settings dataclass, in order."""
    return [(f, f.metadata[_DECLARATION]) for f in fields(settings)
            if _DECLARATION in f.metadata]
