"""The commit protocol: the sink contracts by capability, transaction ids,
decision log, coordinator, and the adapter that makes any eoskit sink a
PySpark streaming data source. See docs/protocol.md.

Attributes are imported on first use, so that the light modules of this
package (``eoskit.twophase.verdicts``, which the CLI and the connectors'
failure classifiers import) do not import PySpark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eoskit.twophase.contract import (
        CommitMode,
        DirectCommitting,
        KeepsOperatorState,
        MarkedCommitting,
        Sink,
        SinkError,
        StateSpec,
        TwoPhaseCommitting,
    )
    from eoskit.twophase.coordinator import Coordinator, CoordinatorError, OrphanedTransactionsError
    from eoskit.twophase.decision_log import Decision, DecisionLog
    from eoskit.twophase.messages import CommittedByTask, NothingToCommit, PreparedTransaction, TaskAck
    from eoskit.twophase.txn_id import TxnId

_MODULES = {
    "CommitMode": "contract", "DirectCommitting": "contract", "MarkedCommitting": "contract",
    "Sink": "contract", "SinkError": "contract", "TwoPhaseCommitting": "contract",
    "KeepsOperatorState": "contract", "StateSpec": "contract",
    "Coordinator": "coordinator", "CoordinatorError": "coordinator", "OrphanedTransactionsError": "coordinator",
    "Decision": "decision_log", "DecisionLog": "decision_log",
    "CommittedByTask": "messages", "NothingToCommit": "messages", "PreparedTransaction": "messages",
    "TaskAck": "messages", "TxnId": "txn_id",
}

__all__ = [
    "CommitMode", "CommittedByTask", "Coordinator", "CoordinatorError", "Decision", "DecisionLog",
    "DirectCommitting", "KeepsOperatorState", "MarkedCommitting", "NothingToCommit", "OrphanedTransactionsError",
    "PreparedTransaction", "Sink", "SinkError", "StateSpec", "TaskAck", "TwoPhaseCommitting", "TxnId",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"eoskit.twophase.{module}"), name)
