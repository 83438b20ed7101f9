"""``eoskit --log-format text|json``: how eoskit's own log lines look.

The command's process (the driver, for ``eoskit run``) logs through Python's
``logging`` under the ``eoskit`` logger; :func:`configure` gives that logger
one handler on stderr, so this module is the one place their form is chosen:

- ``text`` (the default): the message alone, as Python prints a warning no
  handler took;
- ``json``: one JSON object per line, ``{"ts", "level", "logger",
  "message"}`` (``ts`` in UTC, ISO 8601 with milliseconds), for a log
  collector. ``eoskit run``'s progress lines (one per batch, restarts,
  savepoints, the in-doubt transactions recovery settled) become such lines
  too, from the logger ``eoskit.progress`` at INFO (:func:`progress_stream`).

A record's traceback is added (``exc_info`` in JSON) only with ``--verbose``,
as a failing command's is. Every line passes through
:func:`eoskit.runtime.cli.errors.redact`: a URL's password never shows.
What a command prints as its result (stdout, ``--json``) and its one failure
line are not log lines: they keep their form. Spark's own logs (the JVM's
log4j) and the lines of Spark's Python processes are Spark's.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

from eoskit.runtime.cli.errors import add_everywhere, redact

FORMATS = ("text", "json")
DEFAULT = "text"
#: The logger of ``eoskit run``'s progress lines when they are log lines.
PROGRESS = "eoskit.progress"
#: eoskit's loggers' root: every ``logging.getLogger(__name__)`` of the package.
ROOT = "eoskit"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message (and exc_info
    with ``verbose``)."""

    def __init__(self, verbose: bool = False) -> None:
        super().__init__()
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if self.verbose and record.exc_info:
            entry["exc_info"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The message, and with ``verbose`` its traceback."""

    def __init__(self, verbose: bool = False) -> None:
        super().__init__("%(message)s")
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        line = redact(record.getMessage())
        if self.verbose and record.exc_info:
            line += "\n" + redact(self.formatException(record.exc_info))
        return line


class _Stderr(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is when a record is written."""

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def configure(log_format: str = DEFAULT, verbose: bool = False) -> logging.Handler:
    """Give the ``eoskit`` logger its one handler in the form ``log_format``
    (replacing the one an earlier call gave); return it. Levels are left as
    they are (WARNING and above, as Python's default), but for the progress
    logger, INFO."""
    if log_format not in FORMATS:
        raise ValueError(f"--log-format {log_format!r}: expected one of {', '.join(FORMATS)}")
    logger = logging.getLogger(ROOT)
    for handler in [h for h in logger.handlers if getattr(h, "eoskit_cli", False)]:
        logger.removeHandler(handler)
    handler = _Stderr()
    handler.eoskit_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter(verbose) if log_format == "json" else TextFormatter(verbose))
    logger.addHandler(handler)
    logging.getLogger(PROGRESS).setLevel(logging.INFO)
    return handler


class LogLines(io.TextIOBase):
    """A text stream whose every complete line is an INFO record of ``logger``."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            if line.strip():
                self.logger.info(line)
        return len(text)


def progress_stream(log_format: str) -> TextIO | None:
    """Where ``eoskit run`` writes its progress lines: None (stderr, as they
    are) in ``text``, the progress logger in ``json``."""
    return LogLines(logging.getLogger(PROGRESS)) if log_format == "json" else None  # type: ignore[return-value]


def add_log_format(parser: argparse.ArgumentParser) -> None:
    """``--log-format text|json`` on every verb (before or after it)."""
    add_everywhere(parser, "--log-format", choices=FORMATS, default=DEFAULT,
                   help="eoskit's own log lines (and run's progress lines) as text (default) or "
                   "one JSON object per line: ts, level, logger, message")


def log_format(args: argparse.Namespace) -> str:
    return getattr(args, "log_format", DEFAULT)
