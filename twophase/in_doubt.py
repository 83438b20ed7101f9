"""In-doubt transactions by hand: what is prepared, what the decision log
says of each, and settling them the way the coordinator would."""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.twophase.contract import Committer
from eoskit.twophase.coordinator import Coordinator
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.txn_id import TxnId, sink_prefix

COMMIT = "commit (its batch's decision lists it)"
ROLLBACK_DECIDED = "roll back (its batch was decided without it)"
ROLLBACK_UNDECIDED = "roll back (its batch was never decided)"
NO_LOG = "unknown: no decision log (checkpoint deleted?)"


@dataclass(frozen=True)
class InDoubt:
    txn_id: str
    batch: int | None
    verdict: str


def list_in_doubt(committer: Committer, decisions: DecisionLog) -> list[InDoubt]:
    prepared = committer.in_doubt(sink_prefix(decisions.sink_id))
    has_log = decisions.exists()
    out = []
    for txn in prepared:
        parsed = TxnId.parse(txn)
        batch = parsed.batch if parsed else None
        if not has_log:
            verdict = NO_LOG
        else:
            decision = decisions.get(batch) if batch is not None else None
            if decision is None:
                verdict = ROLLBACK_UNDECIDED
            elif txn in decision.commit:
                verdict = COMMIT
            else:
                verdict = ROLLBACK_DECIDED
        out.append(InDoubt(txn, batch, verdict))
    return out


def resolve_in_doubt(
    committer: Committer, decisions: DecisionLog, orphans: str | None = None
) -> dict[str, list[str]]:
    """Settle by the decision log; ids without a log only by an explicit
    ``orphans`` choice (``rollback`` or ``commit``), never silently."""
    if decisions.exists():
        return Coordinator(committer, decisions).sweep(planned_batch=None)
    prepared = committer.in_doubt(sink_prefix(decisions.sink_id))
    if not prepared:
        return {"committed": [], "rolled_back": []}
    if orphans == "rollback":
        for txn in prepared:
            committer.roll_back(txn)
        return {"committed": [], "rolled_back": prepared}
    if orphans == "commit":
        for txn in prepared:
            committer.commit(txn)
        return {"committed": prepared, "rolled_back": []}
    raise ValueError(
        f"{len(prepared)} prepared transaction(s) of sink id {decisions.sink_id!r} have no "
        f"decision log under {decisions.root}; nothing says whether they should commit. "
        "Re-run with --rollback-orphans (discard their rows) or --commit-orphans (keep them, "
        "only if you know their batches were complete)"
    )
