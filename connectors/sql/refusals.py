"""A row the database refused, said in one shape by both SQL sinks: the
table, the column, where the row was among the task's rows, the server's
reason and constraint.

Each sink reads these facts from its server's error (PostgreSQL's
diagnostics fields and COPY context, MySQL's message text) and hands them
here; the wording lives in one place so that the two sinks' errors read
alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.twophase.txn_id import TxnId

#: A server's detail (PostgreSQL's "Failing row contains (...)") is cut here:
#: it repeats the row, which can be wide.
MAX_DETAIL = 300


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL] + "..."


@dataclass(frozen=True)
class Refusal:
    database: str
    table: str
    reason: str
    columns: tuple[str, ...] = ()
    #: 1-based position among the rows the task wrote in this batch, if known.
    row: int | None = None
    #: Where the server put the row when its position among the task's rows
    #: cannot be told exactly (e.g. "COPY line 7").
    server_position: str = ""
    constraint: str | None = None
    detail: str | None = None
    txn_id: str | None = None

    def _task(self) -> str:
        parsed = TxnId.parse(self.txn_id) if self.txn_id else None
        if parsed is None:
            return "this task's rows"
        return f"batch {parsed.batch}, partition {parsed.partition}"

    def message(self) -> str:
        head = f"{self.database} refused a row for table {self.table}"
        if len(self.columns) == 1:
            head += f", column {self.columns[0]!r}"
        elif self.columns:
            head += ", columns " + ", ".join(map(repr, self.columns))
        parts = [f"{head}: {self.reason}"]
        if self.constraint and self.constraint not in self.reason:
            parts.append(f"constraint {self.constraint!r}")
        if self.row is not None:
            parts.append(f"row {self.row} of {self._task()}")
        elif self.server_position:
            parts.append(f"{self.server_position} of {self._task()}")
        elif self.txn_id:
            parts.append(f"in {self._task()}")
        if self.detail:
            parts.append(_cut(self.detail))
        return "; ".join(parts)
