"""The files sink in eoskit's plug-in registry (``eoskit.connectors.plugins``):
one Plugin per format, both from this folder."""

from __future__ import annotations

import os
from collections.abc import Mapping

from eoskit.connectors.files.layout import EOSKIT_DIR
from eoskit.connectors.plugins import Plugin


def _in_doubt(kind: str, target: str, options: Mapping[str, str]):
    """A files sink's output directory (``eoskit txn --path``): any path that
    holds an ``_eoskit`` directory; never a local file (another plug-in's
    target, e.g. a SQLite database)."""
    if kind != "path" or os.path.isfile(target):
        return None
    # Here: the registry loads this file in every run; the sink (PySpark, pyarrow, fsspec) only when asked.
    from eoskit.connectors.files.transactions import FilesTransactions

    sink = FilesTransactions.for_path(target, options)
    return sink if sink.storage.exists(EOSKIT_DIR) else None


PLUGIN = (
    Plugin(
        format="eoskit-parquet",
        extra="files",
        # Nothing beyond the core (pyarrow, fsspec): the extra exists so that
        # every connector is installed the same way.
        requires=("pyarrow>=15", "fsspec>=2024.2"),
        data_source="eoskit.connectors.files.datasource:ParquetDataSource",
        in_doubt=_in_doubt,
    ),
    Plugin(
        format="eoskit-json",
        extra="files",
        # Nothing beyond the core (pyarrow, fsspec): the extra exists so that
        # every connector is installed the same way.
        requires=("pyarrow>=15", "fsspec>=2024.2"),
        data_source="eoskit.connectors.files.datasource:JsonDataSource",
    ),
)
