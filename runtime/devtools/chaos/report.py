"""What a chaos run found, for a terminal, for tools and for a browser.

A :class:`ChaosReport` holds, per output of the job (a table, a topic, a
path), the comparison of the chaos run with the reference run, and of a
second reference run with the first when determinism was checked; the
timeline of the chaos run (batch commits, faults, restarts); and the fault
that preceded the first difference when the command could tell.

Three renderings, the same facts: :meth:`ChaosReport.to_text` (aligned
plain text), :meth:`ChaosReport.to_json` (stable keys; datetimes in ISO
8601) and :meth:`ChaosReport.to_html` (one self-contained page: inline CSS
and an inline SVG timeline, no script, no external asset, every value
escaped). :meth:`ChaosReport.exit_code` is the command's exit code.
"""

from __future__ import annotations

import html
import json
import math
import numbers
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from eoskit.runtime.devtools.chaos.compare import EXAMPLES, Comparison, Difference, RowCount
from eoskit.runtime.devtools.chaos.plan import WINDOWS, Fault
from eoskit.runtime.cli.errors import FAILED, OK, USAGE

#: The exit codes of ``eoskit chaos``: 0 every output exact (and the job
#: deterministic, when that was checked), 1 a difference, 2 the command
#: refused its input (a bad option, a job file it cannot run, a plan left
#: with no fault) before any report exists: ``exit_code()`` never returns it.
EXIT_EXACT, EXIT_DIFFERENT, EXIT_REFUSED = OK, FAILED, USAGE

#: The hint printed for an output whose two runs without faults differ
#: (``{them}``: "it" for one column, "them" otherwise).
NONDETERMINISM_HINT = (
    "the job is not deterministic on replay (current_timestamp(), rand(), a UDF calling "
    "a service...). Compute {them} from the record (e.g. the Kafka timestamp) or use the "
    "two-phase commit mode, which writes each batch once.")

#: A value wider than this is cut in the text and HTML tables (never in JSON).
CELL_WIDTH = 40


@dataclass(frozen=True)
class OutputResult:
    """One output of the job: its name (``table public.orders``, ``topic
    orders``, ``path s3://b/x``), the reference run against the chaos run,
    the first reference run against the second (None: determinism not
    checked), and the columns found to differ between the two references."""

    name: str
    comparison: Comparison
    determinism: Comparison | None = None
    nondeterministic_columns: tuple[str, ...] = ()

    @property
    def deterministic(self) -> bool | None:
        """Whether two runs without faults wrote the same rows (None: not checked)."""
        return None if self.determinism is None else self.determinism.exact

    @property
    def exact(self) -> bool:
        return self.comparison.exact and self.deterministic is not False

    def replay(self) -> str:
        """The determinism column of the reports."""
        return {None: "not checked", True: "deterministic", False: "not deterministic"}[self.deterministic]

    def hint(self) -> str | None:
        """What to tell a user whose job is not deterministic (None: it is,
        or it was not checked)."""
        if self.deterministic is not False:
            return None
        columns = self.nondeterministic_columns
        if len(columns) == 1:
            what = f"column {columns[0]} differs"
        elif columns:
            what = f"columns {', '.join(columns)} differ"
        else:
            assert self.determinism is not None
            what = f"the output differs ({self.determinism.summary()})"
        them = "it" if len(columns) == 1 else "them"
        return (f"{self.name}: {what} between two runs without faults: "
                + NONDETERMINISM_HINT.format(them=them))


@dataclass(frozen=True)
class BatchEvent:
    """Batch ``batch`` committed at ``time``."""

    batch: int
    time: datetime
    kind: ClassVar[str] = "batch"


@dataclass(frozen=True)
class FaultEvent:
    """``fault`` was injected at ``time``; ``landed``: where, in words (``at
    driver_after_decision``, ``0.314 s after batch 5``, ...)."""

    fault: Fault
    time: datetime
    landed: str = ""
    kind: ClassVar[str] = "fault"

    @property
    def window(self) -> str:
        """The window of the protocol it landed in (``plan.WINDOWS``)."""
        fault = self.fault
        if fault.kind == "driver":
            hit = fault.step is not None and self.landed.startswith("at ")
            return WINDOWS[fault.step if hit else None]
        if fault.kind == "network":
            return f"the network to the sink's server cut ({fault.cut})"
        return f"a {fault.kind} lost mid-batch"


@dataclass(frozen=True)
class RestartEvent:
    """The job was started again at ``time`` (after a driver kill)."""

    time: datetime
    kind: ClassVar[str] = "restart"


Event = BatchEvent | FaultEvent | RestartEvent


@dataclass
class ChaosReport:
    """The outcome of ``eoskit chaos JOB.py``. The timeline's times are all
    aware or all naive datetimes; ``notes`` are lines shown above the
    results (the faults skipped and why)."""

    job: str
    seed: int
    outputs: list[OutputResult]
    timeline: list[Event] = field(default_factory=list)
    first_difference_after: Fault | None = None
    notes: list[str] = field(default_factory=list)
    #: The chaos run's batch by which its output first differed (read after
    #: each commit, ``snapshots``); None: not located, or no difference.
    first_difference_batch: int | None = None

    def windows(self) -> list[str]:
        """The windows of the protocol the faults landed in, each with its count."""
        found: dict[str, int] = {}
        for event in self.timeline:
            if isinstance(event, FaultEvent):
                found[event.window] = found.get(event.window, 0) + 1
        return [f"{window} ({count})" for window, count in found.items()]

    def first_difference(self) -> str | None:
        """``first difference by batch 5, after fault 3 (driver): ...``."""
        if self.first_difference_batch is None:
            return None
        after = (f"after {self.first_difference_after.describe()}" if self.first_difference_after
                 else "before any fault")
        return f"first difference by batch {self.first_difference_batch}, {after}"

    @property
    def exact(self) -> bool:
        """Every output exact, and the job deterministic where that was checked."""
        return all(output.exact for output in self.outputs)

    def exit_code(self) -> int:
        """0 when :attr:`exact`, 1 otherwise (see :data:`EXIT_REFUSED` for 2)."""
        return EXIT_EXACT if self.exact else EXIT_DIFFERENT

    def verdict(self) -> str:
        """The report's last line."""
        if self.exact:
            return (f"exact: every output ({len(self.outputs)}) holds the reference run's rows, "
                    "each as many times")
        wrong = sum(1 for output in self.outputs if not output.exact)
        return f"different: {wrong} of {len(self.outputs)} outputs differ"

    # -- text ---------------------------------------------------------------

    def to_text(self) -> str:
        """Aligned plain text for a terminal."""
        lines = [f"eoskit chaos {self.job} (seed {self.seed})", *self.notes, ""]
        lines += _aligned(["output", "verdict", "reference", "chaos", "duplicated", "missing",
                           "different", "unexpected", "replay"],
                          [[o.name, o.comparison.verdict, *_counts(o.comparison), o.replay()]
                           for o in self.outputs],
                          right={2, 3, 4, 5, 6, 7})
        if self.timeline:
            lines += ["", _timeline_line(self.timeline)]
        if self.windows():
            lines.append("windows hit: " + "; ".join(self.windows()))
        if self.first_difference() is not None:
            lines.append(str(self.first_difference()))
        for output in self.outputs:
            for title, header, rows in _example_tables(output.comparison):
                lines += ["", f"{output.name}: {title}"]
                lines += ["  " + line for line in _aligned(header, [[_cell(v) for v in r] for r in rows])]
        hints = [hint for hint in (o.hint() for o in self.outputs) if hint]
        if hints:
            lines += ["", *hints]
        lines += ["", self.verdict()]
        return "\n".join(lines) + "\n"

    # -- JSON ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (see :func:`json_value`)."""
        return {
            "job": self.job,
            "seed": self.seed,
            "exact": self.exact,
            "exit_code": self.exit_code(),
            "verdict": self.verdict(),
            "notes": list(self.notes),
            "outputs": [{
                "name": o.name,
                "exact": o.exact,
                "comparison": _comparison_dict(o.comparison),
                "determinism": None if o.determinism is None else _comparison_dict(o.determinism),
                "nondeterministic_columns": list(o.nondeterministic_columns),
                "hint": o.hint(),
            } for o in self.outputs],
            "timeline": [_event_dict(e) for e in self.timeline],
            "first_difference_after": (None if self.first_difference_after is None
                                       else self.first_difference_after.to_dict()),
            "first_difference_batch": self.first_difference_batch,
            "windows": self.windows(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON: keys sorted, no NaN (see :func:`json_value`)."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, allow_nan=False)

    # -- HTML ---------------------------------------------------------------

    def to_html(self) -> str:
        """One self-contained HTML page: the verdict, the timeline as inline
        SVG, the results table and the examples; every value escaped."""
        state = "exact" if self.exact else "different"
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>eoskit chaos {_e(self.job)}</title>",
            f"<style>{_CSS}</style></head><body>",
            f"<h1>eoskit chaos <code>{_e(self.job)}</code></h1>",
            f'<p class="verdict {state}">{_e(self.verdict())}</p>',
            f"<p>seed {_e(self.seed)}</p>",
        ]
        if self.notes:
            parts.append("<ul>" + "".join(f"<li>{_e(note)}</li>" for note in self.notes) + "</ul>")
        parts.append("<h2>Timeline</h2>")
        if self.timeline:
            parts += [f"<p>{_e(_timeline_line(self.timeline))}</p>", timeline_svg(self.timeline)]
        else:
            parts.append("<p>No timeline was recorded.</p>")
        if self.first_difference() is not None:
            parts.append(f"<p>{_e(str(self.first_difference()).capitalize())}</p>")
        parts.append("<h2>Outputs</h2>")
        parts.append(_html_table(
            ["output", "verdict", "reference", "chaos", "duplicated", "missing", "different",
             "unexpected", "replay"],
            [[o.name, o.comparison.verdict, *_counts(o.comparison), o.replay()] for o in self.outputs]))
        for output in self.outputs:
            tables = _example_tables(output.comparison)
            hint = output.hint()
            if not tables and not hint:
                continue
            parts.append(f"<h2>{_e(output.name)}</h2>")
            if hint:
                parts.append(f'<p class="hint">{_e(hint)}</p>')
            for title, header, rows in tables:
                cells = [[_cell(v) for v in row] for row in rows]
                parts += [f"<h3>{_e(title)}</h3>", _html_table(header, cells)]
        parts.append("</body></html>")
        return "\n".join(parts) + "\n"


# -- shared pieces ------------------------------------------------------------


def _counts(comparison: Comparison) -> list[str]:
    c = comparison
    return [f"{n:,}" for n in (c.reference_rows, c.chaos_rows, c.duplicated, c.missing,
                               c.different, c.unexpected)]


def _timeline_line(timeline: Sequence[Event]) -> str:
    batches = [e.batch for e in timeline if isinstance(e, BatchEvent)]
    faults = sum(1 for e in timeline if isinstance(e, FaultEvent))
    restarts = sum(1 for e in timeline if isinstance(e, RestartEvent))
    span = f"batches {min(batches)} to {max(batches)}" if batches else "no batch committed"
    seconds = (max(e.time for e in timeline) - min(e.time for e in timeline)).total_seconds()
    return (f"{_plural(faults, 'fault')} injected, {_plural(restarts, 'restart')}, {span}, "
            f"over {seconds:.1f} s")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _example_tables(c: Comparison) -> list[tuple[str, list[str], list[list[Any]]]]:
    """(title, header, rows) of each kind of difference that has examples."""
    tables = []
    kinds: list[tuple[str, int, tuple[RowCount, ...]]] = [
        ("duplicated", c.duplicated, c.duplicated_examples),
        ("missing", c.missing, c.missing_examples),
        ("unexpected", c.unexpected, c.unexpected_examples)]
    for word, count, examples in kinds[:2]:
        if examples:
            tables.append((_title(count, word, len(examples)), [*c.columns, "reference", "chaos"],
                           [[*e.row, _Raw(e.reference), _Raw(e.chaos)] for e in examples[:EXAMPLES]]))
    if c.different_examples:
        tables.append((_title(c.different, "different", len(c.different_examples)),
                       [*c.key, "columns", "reference", "chaos"],
                       [[*d.key, _Raw(", ".join(d.columns)), _Raw(_changed(c.columns, d, d.reference)),
                         _Raw(_changed(c.columns, d, d.chaos))] for d in c.different_examples[:EXAMPLES]]))
    word, count, examples = kinds[2]
    if examples:
        tables.append((_title(count, word, len(examples)), [*c.columns, "chaos"],
                       [[*e.row, _Raw(e.chaos)] for e in examples[:EXAMPLES]]))
    return tables


def _title(count: int, word: str, shown: int) -> str:
    rows = "row" if count == 1 else "rows"
    return f"{count:,} {word} {rows}" + (f" ({shown} shown)" if shown < count else "")


def _changed(columns: tuple[str, ...], difference: Difference, row: Sequence[Any]) -> str:
    """The differing columns' values of one side of a changed row."""
    return ", ".join(f"{name}={_cell(value)}" for name, value in zip(columns, row)
                     if name in difference.columns)


@dataclass(frozen=True)
class _Raw:
    """A table cell that is already text (a count, a list of columns), not a row value."""

    text: Any


def _cell(value: Any) -> str:
    """A row value as a table cell: strings and bytes quoted (so that
    ``'NULL'`` and NULL differ), datetimes in ISO 8601, cut at
    :data:`CELL_WIDTH` characters."""
    if isinstance(value, _Raw):
        return str(value.text)
    if value is None:
        text = "NULL"
    elif isinstance(value, (datetime, date, time)):
        text = value.isoformat()
    elif isinstance(value, Decimal):
        text = str(value)
    else:
        text = repr(value)
    return text if len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 3] + "..."


def _aligned(header: Sequence[str], rows: Sequence[Sequence[str]],
             right: Container[int] = frozenset()) -> list[str]:
    """Columns padded to their widest cell, two spaces apart; the columns in
    ``right`` (numbers) aligned right."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        padded = [str(c).rjust(w) if i in right else str(c).ljust(w)
                  for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(padded).rstrip()

    return [line(header), *(line(row) for row in rows)]


def json_value(value: Any) -> Any:
    """A row value as JSON: numbers, strings, booleans and null as they are;
    datetimes, dates and times in ISO 8601; Decimals as strings (exact);
    dicts as objects (keys as strings), lists, tuples and sets as arrays;
    anything else JSON has no type for (bytes, NaN, infinities) as its
    Python ``repr``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else repr(number)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(json_value(k)): json_value(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [json_value(v) for v in sorted(value, key=repr)]
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return repr(value)


def _row_counts(examples: Sequence[RowCount]) -> list[dict[str, Any]]:
    return [{"row": json_value(e.row), "reference": e.reference, "chaos": e.chaos} for e in examples]


def _comparison_dict(c: Comparison) -> dict[str, Any]:
    return {
        "verdict": c.verdict,
        "summary": c.summary(),
        "columns": list(c.columns),
        "key": list(c.key),
        "reference_rows": c.reference_rows,
        "chaos_rows": c.chaos_rows,
        "duplicated": {"count": c.duplicated, "examples": _row_counts(c.duplicated_examples)},
        "missing": {"count": c.missing, "examples": _row_counts(c.missing_examples)},
        "unexpected": {"count": c.unexpected, "examples": _row_counts(c.unexpected_examples)},
        "different": {"count": c.different, "examples": [
            {"key": json_value(d.key), "reference": json_value(d.reference),
             "chaos": json_value(d.chaos), "columns": list(d.columns)}
            for d in c.different_examples]},
    }


def _event_dict(event: Event) -> dict[str, Any]:
    found: dict[str, Any] = {"kind": event.kind, "time": event.time.isoformat()}
    if isinstance(event, BatchEvent):
        found["batch"] = event.batch
    elif isinstance(event, FaultEvent):
        found.update(fault=event.fault.to_dict(), landed=event.landed, window=event.window)
    return found


# -- HTML pieces ----------------------------------------------------------------

_CSS = ("body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}"
        "th,td{border:1px solid #ccc;padding:.2em .6em;text-align:left;font-family:monospace}"
        "th{background:#f3f3f3}.verdict{font-size:1.2em;font-weight:bold}"
        ".exact{color:#176b2c}.different{color:#a61b1b}.hint{background:#fff6d6;padding:.5em}"
        "svg{border:1px solid #ddd;background:#fff}")


def _e(value: Any) -> str:
    """Text escaped for HTML (element content and quoted attributes alike)."""
    return html.escape(str(value), quote=True)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _step(span: float, ticks: int = 8) -> float:
    """A round axis step (1, 2 or 5 times a power of ten) giving about ``ticks`` ticks."""
    raw = max(span / ticks, 1e-3)
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def timeline_svg(timeline: Sequence[Event], width: int = 960, height: int = 170) -> str:
    """The timeline as an inline SVG: a time axis in seconds from the first
    event, a grey tick per batch commit (numbered where there is room), a
    red dot per fault (its kind above, its description as a tooltip), a
    dashed blue line per restart."""
    left, right, axis = 40, 20, 120
    start = min(e.time for e in timeline)
    span = max((max(e.time for e in timeline) - start).total_seconds(), 1e-3)

    def x(at: datetime) -> float:
        return left + (at - start).total_seconds() / span * (width - left - right)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of the chaos run">',
           f'<line x1="{left}" y1="{axis}" x2="{width - right}" y2="{axis}" stroke="#444"/>']
    step = _step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = left + tick / span * (width - left - right)
        out.append(f'<line x1="{tx:.1f}" y1="{axis}" x2="{tx:.1f}" y2="{axis + 5}" stroke="#444"/>'
                   f'<text x="{tx:.1f}" y="{axis + 18}" font-size="10" text-anchor="middle">'
                   f"{tick:g} s</text>")
        tick += step
    labelled = -math.inf
    faults = 0

    def batch(event: BatchEvent, at: float) -> str:
        nonlocal labelled
        mark = (f'<line x1="{at:.1f}" y1="{axis - 14}" x2="{at:.1f}" y2="{axis}" stroke="#888">'
                f"<title>{_e(f'batch {event.batch} committed at {event.time.isoformat()}')}</title></line>")
        if at - labelled >= 24:
            labelled = at
            mark += (f'<text x="{at:.1f}" y="{axis - 18}" font-size="9" fill="#666" '
                     f'text-anchor="middle">{_e(event.batch)}</text>')
        return mark

    def fault(event: FaultEvent, at: float) -> str:
        nonlocal faults
        faults += 1
        y = 52 if faults % 2 else 38
        return (f'<line x1="{at:.1f}" y1="{y + 4}" x2="{at:.1f}" y2="{axis}" stroke="#c0392b" '
                f'stroke-dasharray="2,2"/><circle cx="{at:.1f}" cy="{y + 6}" r="4" fill="#c0392b">'
                f"<title>{_e(event.fault.describe() + ' at ' + event.time.isoformat())}</title></circle>"
                f'<text x="{at:.1f}" y="{y - 2}" font-size="10" fill="#c0392b" text-anchor="middle">'
                f"{_e(event.fault.kind)}</text>")

    def restart(event: RestartEvent, at: float) -> str:
        return (f'<line x1="{at:.1f}" y1="14" x2="{at:.1f}" y2="{axis}" stroke="#2468b4" '
                f'stroke-dasharray="5,3"><title>{_e("restart at " + event.time.isoformat())}</title></line>'
                f'<text x="{at:.1f}" y="12" font-size="10" fill="#2468b4" '
                'text-anchor="middle">restart</text>')

    for event in sorted(timeline, key=lambda e: e.time):
        if isinstance(event, BatchEvent):
            out.append(batch(event, x(event.time)))
        elif isinstance(event, FaultEvent):
            out.append(fault(event, x(event.time)))
        else:
            out.append(restart(event, x(event.time)))
    legend = height - 8
    out.append(f'<text x="{left}" y="{legend}" font-size="10" fill="#444">'
               '<tspan fill="#888">| batch commit</tspan><tspan dx="14" fill="#c0392b">● fault</tspan>'
               '<tspan dx="14" fill="#2468b4">-- restart</tspan>'
               '<tspan dx="14">(seconds from the first event)</tspan>'
               "</text>")
    out.append("</svg>")
    return "".join(out)
