"""Which SQL sink owns a database URL, for the plug-in registry (``eoskit txn``).

SQLAlchemy is imported where a URL is parsed, not with this module: the
SQL sinks' ``plugin.py`` imports ``in_doubt_for`` from here, and the plug-in
registry must load without the SQL sinks' extras installed. The sinks' own
URL handling (``parse_url``, ``safe``) is in ``sink.py``, which imports
SQLAlchemy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


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
    """Is ``target`` a database URL of one of ``backends`` (for ``eoskit txn``)?
    A JDBC URL (``jdbc:postgresql://...``) is one too, as the sinks take it:
    its subprotocol names the backend."""
    if kind != "url":
        return False
    if target.lower().startswith("jdbc:"):
        return target[len("jdbc:"):].partition(":")[0].lower() in backends
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(target).get_backend_name() in backends
    except ArgumentError:
        return False
