"""SQLAlchemy URLs: parsed once, shown without their password.

SQLAlchemy is imported where a URL is parsed, not with this module: the
SQL sinks' ``plugin.py`` imports ``in_doubt_for`` from here, and the plug-in
registry must load without the SQL sinks' extras installed."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from typing import TYPE_CHECKING

from eoskit.twophase.options import OptionError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL


def parse_url(text: str, allowed_backends: tuple[str, ...]) -> "URL":
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(text)
    except ArgumentError:
        raise OptionError(
            "option 'url' is not a SQLAlchemy URL (dialect+driver://user:password@host:port/db)"
        ) from None
    if url.get_backend_name() not in allowed_backends:
        raise OptionError(
            f"option 'url' names the {url.get_backend_name()!r} dialect; this sink "
            f"accepts {', '.join(allowed_backends)}"
        )
    return url


def safe(url: "URL") -> str:
    """The URL as it may appear in logs and errors."""
    return url.render_as_string(hide_password=True)


def in_doubt_for(sink: str, backends: tuple[str, ...]) -> Callable[[str, str, Mapping[str, str]], Any]:
    """A SQL sink's ``Plugin.in_doubt``: for a database URL of one of
    ``backends``, the sink class ``sink`` (``module:Class``, imported only
    then) made ``for_url`` it, to list and settle its prepared ids."""

    def in_doubt(kind: str, target: str, options: Mapping[str, str]) -> Any:
        if not owns_url(kind, target, backends):
            return None
        module, _, name = sink.partition(":")
        return getattr(importlib.import_module(module), name).for_url(target)

    return in_doubt


def owns_url(kind: str, target: str, backends: tuple[str, ...]) -> bool:
    """Is ``target`` a database URL of one of ``backends`` (for ``eoskit txn``)?"""
    if kind != "url":
        return False
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(target).get_backend_name() in backends
    except ArgumentError:
        return False
