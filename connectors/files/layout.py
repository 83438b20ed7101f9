"""Where the files sink puts things, as pure functions of names and numbers.

Everything eoskit keeps in the output directory is under ``_eoskit/``, a name
that starts with ``_``, which Spark, Hive, Trino, DuckDB's hive partitioning
and pyarrow.dataset treat as hidden. DuckDB's ``**`` glob does descend into
it, so nothing there ends in ``.parquet`` or ``.json``: a glob such as
``out/**/*.parquet`` finds committed data files only.

```
<root>/
  col=value/part-<batch>-<task>-<seq>-<sink-id>.<ext>    committed data files
  _eoskit/
    sinks/<sink-id>                      which checkpoint owns the sink id (JSON)
    staging/<txn>/<seq>.staged           a task attempt's files, until commit
    staging/<txn>.prepared               its manifest: written last = prepared
    staging/<txn>.committed              the same, once every file is moved
    batches/<sink-id>/<batch>.manifest   a committed batch's files, rows, bytes
    batches/<sink-id>/compact-<last>.manifest
                                         the batch manifests after the previous
                                         compact file's, up to batch <last>
```

``<txn>`` is the transaction id with ``:`` spelled ``.`` (sink ids have no
``.``; Hadoop paths cannot hold ``:``). Final names are deterministic in
(sink id, batch, task partition, sequence), so committing the same manifest
again writes the same names: a re-commit overwrites, never duplicates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

EOSKIT_DIR = "_eoskit"
STAGING_DIR = f"{EOSKIT_DIR}/staging"
BATCHES_DIR = f"{EOSKIT_DIR}/batches"
SINKS_DIR = f"{EOSKIT_DIR}/sinks"
PREPARED = ".prepared"
COMMITTED = ".committed"
STAGED = ".staged"
MANIFEST = ".manifest"
#: Hive's and Spark's spelling of a null (or empty) partition value.
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: The longest path segment local file systems take (NAME_MAX, in bytes).
MAX_SEGMENT_BYTES = 255

# The characters Spark's and Hive's escapePathName percent-encode (plus NUL).
_ESCAPED = frozenset([chr(c) for c in range(0x20)] + list('"#%\'*/:=?\\\x7f{[]^'))
_FINAL = re.compile(
    r"^part-(?P<batch>\d+)-(?P<task>\d+)-(?P<seq>\d+)-(?P<sink>[A-Za-z0-9_-]+)\.(?P<ext>.+)$")


class LayoutError(ValueError):
    """A name or value that cannot be part of the output layout."""


# -- transactions in the staging area ---------------------------------------


def txn_name(txn_id: str) -> str:
    """The transaction id as a file name: ``:`` -> ``.``."""
    if "." in txn_id or "/" in txn_id or not txn_id:
        raise LayoutError(f"transaction id {txn_id!r} cannot name a staging directory")
    return txn_id.replace(":", ".")


def txn_id_of(name: str) -> str:
    return name.replace(".", ":")


def staging_dir(txn_id: str) -> str:
    return f"{STAGING_DIR}/{txn_name(txn_id)}"


def staged_file(txn_id: str, seq: int) -> str:
    return f"{staging_dir(txn_id)}/{seq:05d}{STAGED}"


def prepared_manifest(txn_id: str) -> str:
    return f"{staging_dir(txn_id)}{PREPARED}"


def committed_manifest(txn_id: str) -> str:
    return f"{staging_dir(txn_id)}{COMMITTED}"


@dataclass(frozen=True)
class StagingEntry:
    """One name listed in the staging area, read back."""

    txn_id: str
    #: ``prepared``, ``committed`` or ``files`` (a staging directory).
    kind: str


def parse_staging_entry(name: str) -> StagingEntry | None:
    """What a name in ``_eoskit/staging/`` is; None for anything else
    (temporary files of an atomic write, strangers)."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    for suffix, kind in ((PREPARED, "prepared"), (COMMITTED, "committed")):
        if base.endswith(suffix):
            stem = base[: -len(suffix)]
            return StagingEntry(txn_id_of(stem), kind) if stem.startswith("eoskit.") else None
    if base.startswith("eoskit.") and base.count(".") >= 4 and not base.endswith(".tmp"):
        return StagingEntry(txn_id_of(base), "files")
    return None


# -- committed files ----------------------------------------------------------


def final_name(sink_id: str, batch: int, task: int, seq: int, extension: str) -> str:
    """``part-<batch>-<task>-<seq>-<sink-id>.<extension>``, zero-padded so
    that names sort by batch."""
    return f"part-{batch:010d}-{task:05d}-{seq:04d}-{sink_id}.{extension}"


@dataclass(frozen=True)
class FinalName:
    sink_id: str
    batch: int
    task: int
    seq: int
    extension: str


def parse_final_name(name: str) -> FinalName | None:
    match = _FINAL.match(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    return FinalName(match["sink"], int(match["batch"]), int(match["task"]), int(match["seq"]),
                     match["ext"])


def batch_manifest(sink_id: str, batch: int) -> str:
    return f"{BATCHES_DIR}/{sink_id}/{batch:010d}{MANIFEST}"


COMPACT_PREFIX = "compact-"
#: Every this many batches the batch manifests are merged into one compact file.
COMPACT_EVERY = 100


def compact_manifest(sink_id: str, last: int) -> str:
    return f"{BATCHES_DIR}/{sink_id}/{COMPACT_PREFIX}{last:010d}{MANIFEST}"


def parse_manifest_name(name: str) -> tuple[bool, int] | None:
    """(compact, batch) of a name in ``batches/<sink-id>/``: a batch's
    manifest, or a compact file and the last batch it holds; None otherwise."""
    base = name.rsplit("/", 1)[-1]
    if not base.endswith(MANIFEST):
        return None
    stem = base[:-len(MANIFEST)]
    compact = stem.startswith(COMPACT_PREFIX)
    digits = stem[len(COMPACT_PREFIX):] if compact else stem
    return (compact, int(digits)) if digits.isdigit() else None


def sink_claim(sink_id: str) -> str:
    return f"{SINKS_DIR}/{sink_id}"


# -- Hive-style partition directories ---------------------------------------------


def escape_value(text: str) -> str:
    """Percent-encode what Spark and Hive escape in a partition value."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def unescape_value(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and _is_hex(text[i + 1:i + 3]):
            out.append(chr(int(text[i + 1:i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)


def partition_segment(column: str, value: str | None) -> str:
    """``column=value``, escaped; None and "" are Hive's default partition,
    as Spark writes them. Raises LayoutError when the segment is too long
    for a file name."""
    text = DEFAULT_PARTITION if value is None or value == "" else escape_value(value)
    segment = f"{escape_value(column)}={text}"
    if len(segment.encode()) > MAX_SEGMENT_BYTES:
        shown = value if value is None or len(value) <= 40 else value[:40] + "..."
        raise LayoutError(
            f"partition column {column!r}: the value {shown!r} makes a directory name of "
            f"{len(segment.encode())} bytes, more than the {MAX_SEGMENT_BYTES} file systems "
            "allow; partition by a shorter derived column (a prefix, a hash, a date)")
    return segment


def partition_path(columns: Sequence[str], values: Sequence[str | None]) -> str:
    """``a=1/b=x`` for the partition columns' values, in column order."""
    return "/".join(partition_segment(c, v) for c, v in zip(columns, values))


def parse_partition_path(path: str) -> dict[str, str | None]:
    """The partition values of a relative directory path ``a=1/b=x``."""
    out: dict[str, str | None] = {}
    for segment in filter(None, path.split("/")):
        column, sep, value = segment.partition("=")
        if not sep:
            raise LayoutError(f"{segment!r} is not a column=value directory")
        out[unescape_value(column)] = None if value == DEFAULT_PARTITION else unescape_value(value)
    return out
