"""Transaction ids: ``eoskit:<sink-id>:<batch>:<partition>:<attempt>x<nonce>``.

They name what the coordinator needs to resolve a prepared transaction
without any other state: the sink (namespace), the batch (which decision
applies) and the task attempt. They fit MySQL's 64-byte gtrid, the tightest
limit of the supported backends; the nonce keeps a rerun of the same task
attempt after a restart from colliding with a leftover of the last run.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

PREFIX = "eoskit"
MAX_BYTES = 64
SINK_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,24}$")
_ID = re.compile(
    r"^eoskit:(?P<sink>[A-Za-z0-9_-]{1,24}):(?P<batch>\d+):(?P<partition>\d+):(?P<attempt>\d+)x(?P<nonce>[0-9a-f]+)$"
)


class InvalidSinkIdError(ValueError):
    """A sinkId option that cannot namespace transaction ids."""


def validate_sink_id(sink_id: str) -> str:
    if not SINK_ID_PATTERN.match(sink_id):
        raise InvalidSinkIdError(
            f"option 'sinkId' = {sink_id!r}: use 1 to 24 letters, digits, '_' or '-' "
            "(it is part of every transaction id, which must fit 64 bytes)"
        )
    return sink_id


def sink_id_for_checkpoint(checkpoint_location: str) -> str:
    """The default sink id: stable for a checkpoint location, never per run."""
    normalised = checkpoint_location.rstrip("/")
    return "ck" + hashlib.sha256(normalised.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TxnId:
    sink_id: str
    batch: int
    partition: int
    attempt: int
    nonce: str

    @classmethod
    def new(cls, sink_id: str, batch: int, partition: int, attempt: int) -> "TxnId":
        return cls(sink_id, batch, partition, attempt, secrets.token_hex(3))

    def __str__(self) -> str:
        text = f"{PREFIX}:{self.sink_id}:{self.batch}:{self.partition}:{self.attempt}x{self.nonce}"
        assert len(text.encode()) <= MAX_BYTES, text
        return text

    @classmethod
    def parse(cls, text: str) -> "TxnId | None":
        """The parts of an eoskit id, or None for anybody else's transaction."""
        match = _ID.match(text)
        if match is None:
            return None
        return cls(
            match["sink"], int(match["batch"]), int(match["partition"]),
            int(match["attempt"]), match["nonce"],
        )


def sink_prefix(sink_id: str) -> str:
    return f"{PREFIX}:{sink_id}:"


def batch_prefix(sink_id: str, batch: int) -> str:
    return f"{PREFIX}:{sink_id}:{batch}:"


def task_prefix(sink_id: str, batch: int, partition: int) -> str:
    return f"{PREFIX}:{sink_id}:{batch}:{partition}:"
