"""The eoskit-kafka source's broadcast options (``broadcast.py``), declared
once here; ``settings.KafkaSourceSettings`` reads them into its fields."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from eoskit.core.options import Option, OptionError, parse_bytes, parse_duration_ms, parse_str

if TYPE_CHECKING:
    from eoskit.connectors.kafka.settings import KafkaSourceSettings


BROADCAST_TOPIC = Option(
    "broadcastTopic", parse_str, None,
    "eoskit only (Flink's broadcast state): a topic, usually compacted, folded into a state that "
    "every task of a batch sees the same (dynamic rules, thresholds, a currency table). Each batch "
    "pins the topic's last stable offsets in the offset log with the events' offsets, so a replay "
    "sees the same state; rows gain a broadcastVersion column. Same cluster and kafka.* options "
    "as the events; needs 'checkpointLocation' (a Pipeline sets it).",
)
BROADCAST_NAME = Option(
    "broadcastName", parse_str, None,
    "The broadcast state's name (letters, digits, '_', '-', '.'), its folder under "
    "<checkpoint>/eoskit/broadcast/; default: the topic.",
)
BROADCAST_FOLD = Option(
    "broadcastFold", parse_str, "latest",
    "How records become the state: 'latest' (the latest value per key; a record with a null "
    "value, a tombstone, removes its key) or 'module:name', a Fold importable on the driver.",
)
BROADCAST_MAX_BYTES = Option(
    "broadcastMaxBytes", parse_bytes, 64 * 1024 * 1024,
    "The largest broadcast state (its snapshot file); a larger one fails the batch, naming "
    "this option (a size: 64m, 512k, 1g). Every task that judges rows holds it in memory.",
)
#: broadcastStaleAfter's default: Kafka's default delete.retention.ms.
DEFAULT_STALE_AFTER_S = 86_400.0
BROADCAST_STALE_AFTER = Option(
    "broadcastStaleAfter", parse_duration_ms, None,
    "How long a broadcast pin may age before its next fold cannot trust the rules topic's history: "
    "after the topic's delete.retention.ms, compaction drops tombstones, so a rule deleted while no "
    "batch was planned would stay. When the rules changed and the last pin is older than this, "
    "'latest' rebuilds the state from the topic's earliest offsets (a compacted topic read whole is "
    "its current state) and a custom fold fails the batch, naming this option. Set it to the topic's "
    "delete.retention.ms (a duration: 1d, 12h; a bare number is ms; default 1d, Kafka's default).",
)
#: Options of the broadcast state, which only a streaming read keeps.
BROADCAST = (BROADCAST_TOPIC, BROADCAST_NAME, BROADCAST_FOLD, BROADCAST_MAX_BYTES, BROADCAST_STALE_AFTER)


_BROADCAST_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


def broadcast_is_whole(settings: "KafkaSourceSettings", _: Any) -> None:
    """A broadcast needs the checkpoint it lives beside, a usable name, and
    no option of it without ``broadcastTopic``."""
    if settings.broadcast_topic is None:
        stray = [o.name for o in BROADCAST[1:] if o.name in settings.given]
        if stray:
            raise OptionError(f"option '{stray[0]}' needs the option '{BROADCAST_TOPIC.name}' "
                              "(the topic the broadcast state is folded from)")
        return
    if not _BROADCAST_NAME.match(settings.broadcast_name):
        raise OptionError(f"option '{BROADCAST_NAME.name}' = {settings.broadcast_name!r}: use "
                          "letters, digits, '_', '-' and '.' (it names a folder)")
    if settings.subscription.select({settings.broadcast_topic: [0]}):
        raise OptionError(f"option '{BROADCAST_TOPIC.name}' = {settings.broadcast_topic!r} is also "
                          "a topic the source reads as events: use another topic")
