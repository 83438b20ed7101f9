"""The commit protocol: the sink contracts by capability, transaction ids,
decision log, coordinator, and the adapter that makes any eoskit sink a
PySpark streaming data source. See docs/protocol.md."""

from eoskit.twophase.contract import (
    CommitMode,
    DirectCommitting,
    MarkedCommitting,
    Sink,
    SinkError,
    TwoPhaseCommitting,
)
from eoskit.twophase.coordinator import Coordinator, CoordinatorError, OrphanedTransactionsError
from eoskit.twophase.decision_log import Decision, DecisionLog
from eoskit.twophase.messages import CommittedByTask, NothingToCommit, PreparedTransaction, TaskAck
from eoskit.twophase.txn_id import TxnId

__all__ = [
    "CommitMode", "CommittedByTask", "Coordinator", "CoordinatorError", "Decision", "DecisionLog",
    "DirectCommitting", "MarkedCommitting", "NothingToCommit", "OrphanedTransactionsError",
    "PreparedTransaction", "Sink", "SinkError", "TaskAck", "TwoPhaseCommitting", "TxnId",
]
