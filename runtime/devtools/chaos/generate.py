"""``eoskit chaos --records N --generator SPEC``: the records of a generated
input, made by a function the user names and checked before any is written.

``SPEC`` is ``path/to/file.py:function`` or ``package.module:function``. The
function is called once, on the driver of the command, as ``function(n)``,
and returns an iterable of exactly ``n`` records, each one of:

- a value: ``bytes`` or ``str`` (UTF-8), without a key;
- a ``(key, value)`` tuple: each ``bytes``, ``str`` or ``None``;
- a dict with keys among ``key``, ``value`` (needed; ``None`` for a record
  without a value), ``headers`` (a list of ``(name, value)`` pairs or a
  dict, names ``str``, values ``bytes`` or ``str``) and ``partition`` (an
  int >= 0; without it the producer picks one from the key).

Everything else is refused naming the record's index (from 0) and what is
wrong with it, and so is a count other than ``n``: the records become
:class:`~eoskit.runtime.job.components.InputRecord` values, all in bytes, that
the source's scratch input writes (``ScratchInput.produce``). Pure: nothing
here touches a service.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Sized
from pathlib import Path
from typing import Any

from eoskit.runtime.cli.errors import UsageError
from eoskit.runtime.job.components import InputRecord
from eoskit.twophase.verdicts import first_line

#: The keys a record given as a dict may have.
DICT_KEYS = ("key", "value", "headers", "partition")


class GeneratorError(UsageError):
    """``--generator`` names no usable function, or what it returned is not
    ``--records`` records of the shapes it may return."""


def _raised(exc: BaseException) -> str:
    line = first_line(str(exc))
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def load(spec: str) -> Callable[..., Any]:
    """The function ``spec`` names (``file.py:function`` or
    ``package.module:function``); refused, naming ``--generator`` and what
    is wrong, when there is none."""
    where, colon, name = spec.rpartition(":")
    if not colon or not where or not name:
        raise GeneratorError(f"--generator {spec!r}: give path/to/file.py:function or "
                             "package.module:function")
    module = _file(spec, where) if where.endswith(".py") or "/" in where else _module(spec, where)
    if not hasattr(module, name):
        raise GeneratorError(f"--generator {spec!r}: {where} has no function {name!r}")
    function = getattr(module, name)
    if not callable(function):
        raise GeneratorError(f"--generator {spec!r}: {where}'s {name!r} is of type "
                             f"{type(function).__name__}, not a function")
    return function


def _file(spec: str, where: str) -> Any:
    path = Path(where)
    if not path.is_file():
        raise GeneratorError(f"--generator {spec!r}: there is no file {where}")
    loader = importlib.util.spec_from_file_location(f"eoskit_generator_{path.stem}", path)
    if loader is None or loader.loader is None:
        raise GeneratorError(f"--generator {spec!r}: {where} is not a Python file")
    module = importlib.util.module_from_spec(loader)
    sys.modules[loader.name] = module
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # for helpers the file imports, as a job file's
    try:
        loader.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the file raises is its failure
        sys.modules.pop(loader.name, None)
        raise GeneratorError(f"--generator {spec!r}: {where} failed to load: {_raised(exc)}") from exc
    return module


def _module(spec: str, where: str) -> Any:
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        if exc.name and (where == exc.name or where.startswith(exc.name + ".")):
            raise GeneratorError(f"--generator {spec!r}: there is no module {where} (nor a file: "
                                 "a file's path ends with .py)") from None
        raise GeneratorError(f"--generator {spec!r}: {where} failed to load: {_raised(exc)}") from exc
    except Exception as exc:  # noqa: BLE001 - whatever the module raises is its failure
        raise GeneratorError(f"--generator {spec!r}: {where} failed to load: {_raised(exc)}") from exc


def generate(spec: str, count: int) -> list[InputRecord]:
    """``count`` records from the function ``spec`` names, called once as
    ``function(count)``, each checked and in bytes (see the module's docstring)."""
    function = load(spec)
    try:
        made = function(count)
    except Exception as exc:  # noqa: BLE001 - the user's function failed
        raise GeneratorError(f"--generator {spec!r}: the function raised {_raised(exc)}") from exc
    return records(made, count, spec)


def records(made: object, count: int, spec: str) -> list[InputRecord]:
    """What the generator ``spec`` returned, as ``count`` records; refused
    when it is not an iterable of exactly ``count`` records of the shapes
    allowed, naming the first record at fault."""
    if isinstance(made, (str, bytes, dict)) or not isinstance(made, Iterable):
        raise GeneratorError(f"--generator {spec!r} returned a value of type {type(made).__name__}, "
                             "not an iterable of records (a list, or a generator function's yields)")
    if isinstance(made, Sized) and len(made) != count:
        raise GeneratorError(f"--generator {spec!r} returned {len(made):,} records; "
                             f"--records asked for {count:,}")
    out: list[InputRecord] = []
    try:
        for index, item in enumerate(made):
            if index == count:
                raise GeneratorError(f"--generator {spec!r} returned more than {count:,} records; "
                                     f"--records asked for {count:,}")
            out.append(record(item, index, spec))
    except GeneratorError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's iterable failed while it was read
        raise GeneratorError(f"--generator {spec!r}: reading its records raised {_raised(exc)} "
                             f"after {len(out):,}") from exc
    if len(out) != count:
        raise GeneratorError(f"--generator {spec!r} returned {len(out):,} records; "
                             f"--records asked for {count:,}")
    return out


def record(item: object, index: int, spec: str) -> InputRecord:
    """One record, normalised; refused naming ``index`` and what is wrong."""
    def refuse(what: str) -> GeneratorError:
        return GeneratorError(f"--generator {spec!r}: the record at index {index} {what}")

    if isinstance(item, (bytes, str)):
        return InputRecord(None, _bytes(item))
    if isinstance(item, tuple):
        if len(item) != 2:
            raise refuse(f"is a tuple of {len(item)} items; a tuple must be (key, value)")
        key, value = (_part(part, name, refuse) for part, name in zip(item, ("key", "value")))
        return InputRecord(key, value)
    if isinstance(item, dict):
        unknown = [k for k in item if k not in DICT_KEYS]
        if unknown:
            raise refuse(f"has the key {unknown[0]!r}; a record's keys are among "
                         f"{', '.join(DICT_KEYS)}")
        if "value" not in item:
            raise refuse("has no 'value' (None for a record without a value)")
        return InputRecord(_part(item.get("key"), "key", refuse), _part(item["value"], "value", refuse),
                           _headers(item.get("headers"), refuse), _partition(item.get("partition"), refuse))
    raise refuse(f"is of type {type(item).__name__}; a record is a value (bytes or str), a "
                 "(key, value) tuple, or a dict with keys among " + ", ".join(DICT_KEYS))


def _bytes(text: bytes | str) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else text


def _part(part: object, name: str, refuse: Callable[[str], GeneratorError]) -> bytes | None:
    if part is None or isinstance(part, (bytes, str)):
        return None if part is None else _bytes(part)
    raise refuse(f"has a {name} of type {type(part).__name__}; expected bytes, str or None")


def _headers(given: object, refuse: Callable[[str], GeneratorError]) -> tuple[tuple[str, bytes], ...]:
    if given is None:
        return ()
    if isinstance(given, dict):
        pairs = list(given.items())
    elif isinstance(given, (list, tuple)):
        pairs = list(given)
    else:
        raise refuse(f"has headers of type {type(given).__name__}; expected a list of "
                     "(name, value) pairs or a dict")
    out = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise refuse(f"has the header {pair!r}; a header is a (name, value) pair")
        name, value = pair
        if not isinstance(name, str):
            raise refuse(f"has a header name of type {type(name).__name__}; expected str")
        if not isinstance(value, (bytes, str)):
            raise refuse(f"has the header {name!r} of type {type(value).__name__}; "
                         "expected bytes or str")
        out.append((name, _bytes(value)))
    return tuple(out)


def _partition(given: object, refuse: Callable[[str], GeneratorError]) -> int | None:
    if given is None:
        return None
    if isinstance(given, bool) or not isinstance(given, int) or given < 0:
        raise refuse(f"has the partition {given!r}; expected an int >= 0")
    return given
