"""The two-phase commit protocol: contract, transaction ids, decision log,
coordinator, and the adapter that makes any transactional sink a PySpark
streaming data source. See docs/protocol.md."""

from eoskit.twophase.contract import SinkError, SinkTransaction, TransactionalSink
from eoskit.twophase.coordinator import Coordinator, CoordinatorError, OrphanedTransactions
from eoskit.twophase.decision_log import Decision, DecisionLog
from eoskit.twophase.messages import PreparedMessage
from eoskit.twophase.txn_id import TxnId

__all__ = [
    "Coordinator", "CoordinatorError", "Decision", "DecisionLog", "OrphanedTransactions",
    "PreparedMessage", "SinkError", "SinkTransaction", "TransactionalSink", "TxnId",
]
