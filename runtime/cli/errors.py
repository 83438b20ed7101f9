"""How every ``eoskit`` command fails: one line, a documented exit code.

A command that fails prints one line to stderr, ``eoskit <verb>: <cause>``,
that names what is wrong, and exits with one of the codes below. The
traceback is printed (after that line) only with ``--verbose`` or
``EOSKIT_VERBOSE=1``; an error eoskit did not foresee says so on the same
line. Every verb's handler is wrapped by :func:`guarded` where it is
registered, so this module is the only place that turns an exception into
output and an exit code; handlers just raise.

Everything written here passes through :func:`redact`: the password of any
URL in a message (and any password given on the command line) is shown as
``***``.

The exit code is the failure's verdict (``eoskit.twophase.verdicts``), read
through :data:`VERDICT_CODES`: a service gone or refusing us is 3, bad input
2, anything else 1. Two rules are the CLI's own: a command that fails with
a ``ValueError``, ``FileNotFoundError`` or ``NotADirectoryError`` nobody
classified was given something it cannot work with (2); and the root cause
of a pipeline that failed inside Spark counts only if it is eoskit's own (a
``ValueError`` in a user's UDF is a failed job).

The exception types are looked up in ``sys.modules`` rather than imported:
a type whose module was never imported cannot have been raised, and the CLI
stays as light as the command it runs (``eoskit dev`` imports no PySpark).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import unquote

from eoskit.connectors.failures import service_failure
from eoskit.runtime.job.failures import error_class
from eoskit.runtime.spark.errors import root_cause
from eoskit.twophase.verdicts import Verdict, first_line, verdict_of

#: The command did what it was asked.
OK = 0
#: The job or operation failed: a sink refused a write, the pipeline stopped
#: with an error, the commit protocol cannot proceed, a dev service did not
#: start, or an error eoskit did not foresee.
FAILED = 1
#: Bad usage or input: a command-line argument, a job file, a data source
#: option, a sink id, a path that does not exist, an unknown target.
USAGE = 2
#: A service (database, Kafka broker) cannot be reached or refused the
#: connection or the login.
UNREACHABLE = 3
#: Interrupted (Ctrl-C) before the command could finish.
INTERRUPTED = 130

#: The exit code of each verdict: the one place a failure's meaning becomes a number.
VERDICT_CODES = {
    Verdict.LOST: UNREACHABLE,
    Verdict.REFUSED: UNREACHABLE,
    Verdict.BAD_INPUT: USAGE,
    Verdict.PERMANENT: FAILED,
    Verdict.RECOVERABLE: FAILED,
}

EXIT_CODES = {
    OK: "success",
    FAILED: "the job or operation failed",
    USAGE: "bad usage or input",
    UNREACHABLE: "a service cannot be reached",
    INTERRUPTED: "interrupted",
}

#: The one exit-code table (docs/operations.md, "Exit codes", generated from
#: it by :func:`exit_code_docs`): the same situation is the same code in
#: every verb. ``tests/test_cli_conventions.py`` checks the page and the verbs.
SITUATIONS: tuple[tuple[int, str], ...] = (
    (OK, "the command did what it was asked; `run` caught up (`--until-caught-up`) or stopped "
         "at a batch boundary (Ctrl-C, SIGTERM, `eoskit stop`) or at once (`eoskit cancel`); `dev status`, `dev cluster "
         "status`: every service or daemon runs"),
    (FAILED, "a failure: a sink refused a write, the pipeline failed and its restart strategy "
             "gave up, the commit protocol cannot proceed (`CoordinatorError`), "
             "a rescale failed and was rolled back"),
    (FAILED, "not running: no job runs on the checkpoint (`stop`, `cancel`, `savepoint trigger`) or none "
             "kept a status there (`status`); a dev service or daemon is not running (`dev "
             "status`, `dev cluster status`), none is (`dev env`, `dev cluster env`)"),
    (FAILED, "busy: the checkpoint is in use by another job (`run`, `state rescale`)"),
    (FAILED, "a running job did not answer within `--timeout`, or could not take the savepoint "
             "(`stop`, `cancel`, `savepoint trigger`)"),
    (FAILED, "a dev service or the dev cluster did not start or stop (`dev up`, `dev down`, "
             "`dev cluster up`, `dev cluster down`)"),
    (FAILED, "`chaos`: an output is not exact, or a run failed by itself"),
    (FAILED, "an error eoskit did not foresee (named by its Python type)"),
    (USAGE, "the command line: an argument the parser refuses, flags that do not go together "
            "(`dev up --docker --only ...`), a bad `--conf`, `--storage-option`, setting flag or "
            "`--timeout`"),
    (USAGE, "not found: no such checkpoint, savepoint, job file or `--dev-dir`, or a path that is "
            "not one (every verb that takes one, before anything starts)"),
    (USAGE, "bad input: a job file that fails to import, a data source or sink option (also when "
            "Spark reports it), a sink id, a checkpoint with no batch yet, a savepoint that does "
            "not fit the job (`run --from-savepoint`), a stopped job's checkpoint a rescale "
            "cannot take"),
    (USAGE, "`txn`: a target no installed sink handles, in-doubt ids that need "
            "`--rollback-orphans` or `--commit-orphans`; `chaos`: the job is refused"),
    (UNREACHABLE, "a service cannot be reached or refused the connection or the login: `txn`, a "
                  "job file that connects, a job's Kafka source or SQL sink once the restart "
                  "strategy gives up, the Spark master of `list --cluster`"),
    (INTERRUPTED, "Ctrl-C in a command other than `run` (`run` stops at a batch boundary and "
                  "exits 0)"),
)


def exit_code_docs() -> list[str]:
    """The exit-code table of docs/operations.md, as Markdown rows, from
    :data:`EXIT_CODES` and :data:`SITUATIONS` (``scripts/options_docs.py``)."""
    rows = ["| exit code | situation, in every verb |", "| --- | --- |"]
    rows += [f"| `{code}` {EXIT_CODES[code]} | {text} |" for code, text in SITUATIONS]
    return rows


HINT = "run with --verbose for the traceback"
VERBOSE_ENV = "EOSKIT_VERBOSE"

# scheme://user:password@ -> scheme://user:***@ (SQLAlchemy's own rendering).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)[^\s@]+@")
# A JAAS line's quoted password (kafka.sasl.jaas.config), as Java quotes it.
_JAAS_PASSWORD = re.compile(r"""(?P<head>\bpassword\s*=\s*)(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')""")
#: A literal password shorter than this is hidden only inside URLs, so that
#: replacing it does not garble the rest of a message.
_MIN_LITERAL_SECRET = 4

class UsageError(ValueError):
    """A command was given something it cannot work with; the message says what."""


@dataclass(frozen=True)
class Outcome:
    """What a command prints and returns for an exception."""

    code: int
    message: str
    #: Add "run with --verbose for the traceback": the line alone may not be enough.
    hint: bool = False


def _type(module: str, name: str) -> type | None:
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


def _is(exc: BaseException, types: Iterable[tuple[str, str]]) -> bool:
    return any((t := _type(m, n)) is not None and isinstance(exc, t) for m, n in types)


def _ours(exc_type: type) -> bool:
    return exc_type.__module__.startswith("eoskit.")


def type_name(exc_type: type) -> str:
    """``psycopg.OperationalError``; builtins bare (``KeyError``)."""
    module = exc_type.__module__
    return exc_type.__qualname__ if module == "builtins" else f"{module}.{exc_type.__qualname__}"


def _text(exc: BaseException) -> str:
    """The exception's first line; foreign types are named, eoskit's own speak for themselves."""
    line = first_line(str(exc))
    if _ours(type(exc)):
        return line or type(exc).__name__
    return f"{type_name(type(exc))}: {line}" if line else type_name(type(exc))


def _service(exc: BaseException) -> Outcome | None:
    """The code and the service's own line when ``exc`` says a service is
    gone or refused us (``eoskit.connectors.failures``, one place per
    service), else None."""
    failure = service_failure(exc)
    if failure is None:
        return None
    return Outcome(VERDICT_CODES[failure.verdict], failure.message or type_name(type(exc)))


def _cause_code(cause_type: str | None) -> int:
    """The exit code for a failure inside Spark whose root cause is ``cause_type``.

    Only eoskit's own types count, by their verdict: a ``ValueError`` in a
    user's UDF is a failed job, an ``OptionError`` in a data source is bad
    input."""
    if not cause_type or not cause_type.startswith("eoskit."):
        return FAILED
    found = error_class(cause_type)  # eoskit's own: its module is safe to import to ask
    return FAILED if found is None else VERDICT_CODES[verdict_of(found)]


def describe(exc: BaseException) -> Outcome:
    """The exit code and the one line for ``exc``.

    In order: Ctrl-C; a service that cannot be reached (whatever the
    client library); a pipeline that failed inside Spark (by its root
    cause's type); a job file that cannot be loaded; bad input; anything
    else is a failed operation, named by its type unless it is eoskit's own.
    The code is the verdict's (:data:`VERDICT_CODES`).
    """
    if isinstance(exc, KeyboardInterrupt):
        return Outcome(INTERRUPTED, "interrupted")
    service = _service(exc)
    if service is not None:
        return service
    if _is(exc, (("eoskit.runtime.job.runner", "PipelineError"),)):
        cause_type = getattr(exc, "cause_type", None)
        foreign = cause_type is not None and not cause_type.startswith("eoskit.")
        return Outcome(_cause_code(cause_type), first_line(str(exc)), hint=foreign or cause_type is None)
    if _is(exc, (("eoskit.runtime.job.jobfile", "JobFileError"),)):
        cause = exc.__cause__
        service = _service(cause) if cause is not None else None
        code = USAGE if service is None else service.code
        told = cause is None or _ours(type(cause)) or isinstance(cause, SyntaxError)  # line and message say it all
        return Outcome(code, first_line(str(exc)), hint=not told)
    verdict = verdict_of(exc)
    if verdict is Verdict.RECOVERABLE and isinstance(exc, (ValueError, FileNotFoundError, NotADirectoryError)):
        verdict = Verdict.BAD_INPUT  # the command's own: what it was given is at fault
    if verdict is Verdict.BAD_INPUT:
        return Outcome(USAGE, _text(exc), hint=not _ours(type(exc)))
    pyspark_errors = sys.modules.get("pyspark.errors")
    if pyspark_errors is not None and isinstance(exc, pyspark_errors.PySparkException):
        return Outcome(FAILED, str(root_cause(exc)), hint=True)
    return Outcome(VERDICT_CODES[verdict], _text(exc), hint=not _ours(type(exc)))


def secrets_in(values: Iterable[Any]) -> set[str]:
    """Passwords of the URLs among ``values`` (command-line arguments), as given and decoded."""
    found: set[str] = set()
    for value in values:
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if not isinstance(item, str):
                continue
            for match in re.finditer(r"://[^\s:/@]*:([^\s@]+)@", item):
                found.update({match.group(1), unquote(match.group(1))})
    return {s for s in found if len(s) >= _MIN_LITERAL_SECRET}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URL's password, every quoted JAAS ``password="..."``,
    and each of ``secrets``, shown as ``***``."""
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    text = _JAAS_PASSWORD.sub(r'\g<head>"***"', text)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def is_verbose(args: argparse.Namespace | None = None) -> bool:
    if args is not None and getattr(args, "verbose", False):
        return True
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def report(verb: str, exc: BaseException, verbose: bool = False, secrets: Iterable[str] = (),
           err: TextIO | None = None) -> int:
    """Print ``exc`` the eoskit way; return its exit code."""
    err = err or sys.stderr
    failure = describe(exc)
    line = f"eoskit {verb}: {failure.message}"
    if failure.hint and not verbose:
        line += f" ({HINT})"
    secrets = set(secrets)
    err.write(redact(line, secrets) + "\n")
    if verbose:
        err.write(redact("".join(traceback.format_exception(exc)), secrets))
    err.flush()
    return failure.code


def guarded(verb: str, handler: Callable[[argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int]:
    """``handler`` with the eoskit failure convention: it raises, this reports."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(handler(args) or OK)
        except SystemExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure gets the same treatment
            return report(verb, exc, is_verbose(args), secrets_in(vars(args).values()))

    run.__doc__ = handler.__doc__
    run.__name__ = getattr(handler, "__name__", "run")
    return run


def add_everywhere(parser: argparse.ArgumentParser, *names: str, sub_help: str | None = None,
                   **kwargs: Any) -> None:
    """A global option on ``parser`` and on every subcommand below it, so that
    it may come before or after the verb (``eoskit -v run ...``, ``eoskit run
    ... -v``). Below the top it defaults to SUPPRESS: absent after the verb
    leaves the value given before it."""
    parser.add_argument(*names, **kwargs)
    below = dict(kwargs, default=argparse.SUPPRESS, help=sub_help or kwargs.get("help"))
    _add_below(parser, names, below)


def _add_below(parser: argparse.ArgumentParser, names: tuple[str, ...], kwargs: dict[str, Any]) -> None:
    for action in parser._actions:  # argparse keeps subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if not any(names[-1] in a.option_strings for a in sub._actions):
                    sub.add_argument(*names, **kwargs)
                _add_below(sub, names, kwargs)


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose``, on every verb (:func:`add_everywhere`)."""
    add_everywhere(parser, "-v", "--verbose", action="store_true",
                   help=f"print the traceback of a failure (or set {VERBOSE_ENV}=1)",
                   sub_help="print the traceback of a failure")
