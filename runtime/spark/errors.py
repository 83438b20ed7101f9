"""The root cause of a Spark failure, in one line.

What a Python data source, sink or UDF raises reaches the driver wrapped
several times over: Spark sends the Python traceback to the JVM as text,
where it becomes the message of a ``PythonException`` (a task) or of an
``AnalysisException [PYTHON_DATA_SOURCE_ERROR]`` (a data source failing
while Spark plans a batch), which is the cause of a failed stage ("Job
aborted due to stage failure", "Writing job aborted"), which is the cause of
the ``StreamingQueryException`` the query ends with; every level repeats
the one below, with Java frames. A user needs the error the Python code
raised: the exception line that ends the innermost Python traceback in that
chain (the last one in its text, which is the exception Python raised after
any it was handling). A failure without a Python traceback (a JVM-side
error: ``raise_error`` in SQL, a checkpoint directory that cannot be
written) is told by the innermost JVM exception's message.

PySpark keeps each level of the chain as a ``CapturedException`` whose
``_desc`` is the JVM message without the JVM stack and whose ``_cause`` is
the next level; plain Python exceptions are followed through ``__cause__``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from eoskit.twophase.verdicts import first_line

TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*;?\s*$")
_MAX_DEPTH = 32


@dataclass(frozen=True)
class RootCause:
    """One line: the innermost error, and its Python type if it is a Python one."""

    message: str
    #: ``eoskit.twophase.contract.SinkError``, ``ZeroDivisionError``; None for a JVM error.
    type: str | None = None

    def __str__(self) -> str:
        if self.type is None or self.type.startswith("eoskit."):
            return self.message or (self.type or "unknown error")
        return f"{self.type}: {self.message}" if self.message else self.type


def python_error(text: str) -> RootCause | None:
    """The exception the last Python traceback in ``text`` ends with, if any."""
    start = text.rfind(TRACEBACK)
    if start < 0:
        return None
    for line in text[start + len(TRACEBACK):].splitlines():
        if not line.strip() or line[0].isspace():
            continue  # frames, source lines, carets
        found = _EXCEPTION_LINE.match(line.rstrip())
        if found is None:
            return None
        return RootCause(_SQLSTATE.sub("", first_line(found["message"] or "")), found["type"])
    return None


def messages(error: BaseException) -> Iterator[str]:
    """The message of ``error`` and of every cause below it, outermost first."""
    seen: set[int] = set()
    current: object = error
    while current is not None and id(current) not in seen and len(seen) < _MAX_DEPTH:
        seen.add(id(current))
        desc = getattr(current, "_desc", None)
        yield desc if isinstance(desc, str) else str(current)
        current = getattr(current, "_cause", None) or getattr(current, "__cause__", None)


#: Spark's refusal of an output mode a Python data source cannot take
#: (``requirement failed: eoskit-postgres does not support Update mode``).
_OUTPUT_MODE = re.compile(r"\b(?P<format>eoskit-[\w-]+) does not support (?P<mode>Update|Complete) mode")


def pointer(line: str) -> str:
    """eoskit's own line for a Spark refusal it knows the way around."""
    match = _OUTPUT_MODE.search(line)
    if match is None:
        return line
    fmt, mode = match["format"], match["mode"].lower()
    return (f"{fmt} takes the {mode} output mode through foreachBatch, which Spark allows Python "
            f"data sources no other way: df.writeStream.outputMode({mode!r}).foreachBatch("
            f"sink.foreach_batch()) with the sink's Pipeline component (e.g. PostgresSink(url, "
            f"dbtable, options)), or a Pipeline whose sink has output_mode={mode!r}; same "
            "exactly-once protocol (docs/migrating-from-spark.md)")


def root_cause(error: BaseException) -> RootCause:
    """What went wrong, from the innermost Python error or else the innermost
    JVM message (eoskit's pointer where it knows the way around)."""
    texts = list(messages(error))
    for text in reversed(texts):
        found = python_error(text)
        if found is not None:
            return found
    for text in reversed(texts):
        line = _SQLSTATE.sub("", first_line(text))
        if line:
            return RootCause(pointer(line))
    return RootCause(type(error).__name__)
