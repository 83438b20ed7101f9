"""Options of the files sinks (``eoskit-parquet``, ``eoskit-json``), declared once.

Names follow Spark's own file sinks (``path``, ``compression``,
``maxRecordsPerFile``), so a query switches by its format string. Storage
options for fsspec come as ``fs.<protocol>.<name>`` (e.g.
``fs.s3.endpoint_url``), the way Hadoop takes ``fs.s3a.*``; credentials
may also come from the file system's usual environment (``AWS_*``, ...).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.registry import known_implementations

from eoskit.core.options import (
    Option,
    OptionError,
    OptionSet,
    Reading,
    parse_non_negative_int,
    parse_positive_int,
    parse_str,
    setting,
)
from eoskit.connectors.sink_options import parse_names
from eoskit.twophase.sink_options import COMMIT_MODE, COMMON
from eoskit.twophase.contract import CommitMode, Sink, resolve_commit_mode
from eoskit.core.fs import fs_path

STORAGE_PREFIX = "fs."

#: Spark's compression names -> pyarrow's Parquet codec, and the file extension.
PARQUET_CODECS: dict[str, tuple[str, str]] = {
    "none": ("none", "parquet"), "uncompressed": ("none", "parquet"),
    "snappy": ("snappy", "snappy.parquet"), "gzip": ("gzip", "gz.parquet"),
    "zstd": ("zstd", "zstd.parquet"), "lz4": ("lz4", "lz4.parquet"),
    "lz4_raw": ("lz4", "lz4.parquet"), "brotli": ("brotli", "br.parquet"),
}
#: Spark's compression names -> pyarrow's stream codec for JSON lines, and the
#: extension readers (Spark's Hadoop codecs, pandas, DuckDB) recognise.
JSON_CODECS: dict[str, tuple[str | None, str]] = {
    "none": (None, "json"), "uncompressed": (None, "json"), "gzip": ("gzip", "json.gz"),
    "bzip2": ("bz2", "json.bz2"), "zstd": ("zstd", "json.zst"),
}
_UNSUPPORTED = {
    ("parquet", "lzo"): "pyarrow cannot write LZO",
    ("json", "snappy"): "Hadoop's snappy framing is not the one pyarrow writes",
    ("json", "lz4"): "Hadoop's lz4 framing is not the one pyarrow writes",
    ("json", "deflate"): "Hadoop's deflate files are zlib streams pyarrow does not write",
}
DEFAULT_COMPRESSION = {"parquet": "snappy", "json": "none"}


def _path(path: str, _: Reading) -> str:
    """``path`` normalised (``normalise_path``), its file system known here."""
    path = normalise_path(path)
    filesystem_protocols(path)
    return path


def _compression(text: str | None, reading: Reading) -> str:
    """``compression`` (or the format's default) as a codec the format writes."""
    file_format = reading["file_format"]
    compression = (text or DEFAULT_COMPRESSION[file_format]).strip().lower()
    codecs = PARQUET_CODECS if file_format == "parquet" else JSON_CODECS
    if compression not in codecs:
        why = _UNSUPPORTED.get((file_format, compression))
        raise OptionError(
            f"option 'compression' = {compression!r}: {reading.owner} writes "
            f"{', '.join(sorted(codecs))}" + (f" ({why})" if why else ""))
    return compression


def _partition_by(columns: tuple[str, ...], _: Reading) -> tuple[str, ...]:
    if len(set(columns)) != len(columns):
        raise OptionError(f"option 'partitionBy' = {','.join(columns)!r} names a column twice")
    return columns


def _storage_options(_: None, reading: Reading) -> dict[str, Any]:
    """The ``fs.<protocol>.*`` options, S3's requests bounded by ``networkTimeout``."""
    protocols = filesystem_protocols(reading.fields["path"])
    return with_timeouts(storage_options(reading.given, protocols), protocols,
                         NETWORK_TIMEOUT.read(reading.raw))


NETWORK_TIMEOUT = Option(
    "networkTimeout", parse_positive_int, 30,
    "On S3 (s3fs): seconds botocore waits to connect and for each reply before it "
    "retries the request (3 attempts in all), then fails the task's write or the driver's "
    "commit, which the protocol repeats. Given `fs.s3.config_kwargs` wins.")


@dataclass(frozen=True)
class FilesSettings:
    """One files sink's settings, each field declared by the option it is
    read from (``setting``): ``OPTIONS`` and ``parse`` are derived from
    them. ``storage_options`` may hold credentials: never put them in
    messages."""

    path: str = setting(
        Option("path", parse_str, None,
               "Output directory, any fsspec URL: a local path, `file://`, `s3://` (`s3a://` "
               "is read as `s3://`), `gs://`, `abfs://`, ... (writeStream's `start(path)` "
               "sets it)."),
        required=" (or writeStream.start(path)): the output directory", derive=_path)
    #: ``parquet`` or ``json``: the sink's, not an option.
    format: str = setting(derive=lambda _, reading: reading["file_format"])
    compression: str = setting(
        Option("compression", parse_str, None,
               "Spark's names. Parquet: `snappy` (default), `zstd`, `gzip`, `lz4`, "
               "`brotli`, `none`. JSON lines: `none` (default), `gzip`, `bzip2`, `zstd`."),
        derive=_compression)
    partition_by: tuple[str, ...] = setting(
        Option("partitionBy", parse_names, None,
               "Comma-separated partition columns: Hive-style `col=value/` directories, "
               "the columns left out of the files. (Spark does not hand "
               "`writeStream.partitionBy(...)` to Python sinks: use this option.)"),
        derive=_partition_by, default=())
    max_records_per_file: int = setting(
        Option("maxRecordsPerFile", parse_non_negative_int, 0,
               "At most this many rows per file (per task and partition directory); "
               "0: no limit."))
    commit_mode: CommitMode = setting(
        COMMIT_MODE, derive=lambda mode, reading: resolve_commit_mode(reading["sink_type"], mode),
        default=CommitMode.TWOPHASE)
    storage_options: dict[str, Any] = setting(
        derive=_storage_options, reads=(NETWORK_TIMEOUT,), default_factory=dict, repr=False)

    @property
    def extension(self) -> str:
        codecs = PARQUET_CODECS if self.format == "parquet" else JSON_CODECS
        return codecs[self.compression][1]

    @property
    def codec(self) -> str | None:
        codecs = PARQUET_CODECS if self.format == "parquet" else JSON_CODECS
        return codecs[self.compression][0]

    @classmethod
    def parse(cls, options: Mapping[str, str], sink_name: str, file_format: str,
              sink_type: type[Sink]) -> "FilesSettings":
        """The options as settings (``OPTIONS.read``), on the driver;
        ``commitMode`` resolved against the capabilities of ``sink_type``.
        ``sink_name`` is the sink's name in errors."""
        return OPTIONS.read(options, sink_name, file_format=file_format, sink_type=sink_type)


OPTIONS = OptionSet.of(
    FilesSettings,
    also=COMMON,  # sinkId, ...: read by the protocol's adapter
    passthrough_prefixes=(STORAGE_PREFIX,),
    owner="this eoskit files sink",
)


def normalise_path(path: str) -> str:
    """Hadoop spellings as fsspec's; a relative local path made absolute here,
    on the driver (executors may run elsewhere)."""
    path = fs_path(path.strip())
    protocol, _ = fsspec.core.split_protocol(path)
    if protocol is None:
        path = os.path.abspath(path)
    return path.rstrip("/") or "/"


def filesystem_protocols(path: str) -> tuple[str, ...]:
    """The protocol names of the path's file system; a clear error when fsspec
    does not know it or its package is not installed."""
    protocol = fsspec.core.split_protocol(path)[0] or "file"
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError:
        package = known_implementations.get(protocol, {}).get("class", protocol).split(".")[0]
        raise OptionError(
            f"option 'path' = {path!r}: the {protocol}:// file system needs the Python package "
            f"{package!r}, which is not installed here: pip install {package}"
            + (" (or eoskit[s3])" if package == "s3fs" else "")
            + "; the driver and every executor need it") from None
    except ValueError:
        raise OptionError(f"option 'path' = {path!r}: fsspec knows no file system "
                          f"{protocol!r}") from None
    names = cls.protocol if isinstance(cls.protocol, tuple) else (cls.protocol,)
    return tuple(dict.fromkeys((protocol, *names)))


def with_timeouts(options: dict[str, Any], protocols: tuple[str, ...], seconds: int) -> dict[str, Any]:
    """S3's requests bounded (``networkTimeout``): botocore's connect and read
    timeouts and a retry budget, unless ``fs.s3.config_kwargs`` gives them."""
    if "s3" not in protocols:
        return options
    given = dict(options.get("config_kwargs") or {})
    given.setdefault("connect_timeout", seconds)
    given.setdefault("read_timeout", seconds)
    given.setdefault("retries", {"max_attempts": 3, "mode": "standard"})
    return {**options, "config_kwargs": given}


_SECRET_KEYS = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)


def storage_options(options: Mapping[str, str], protocols: tuple[str, ...]) -> dict[str, Any]:
    """``fs.<protocol>.<name>`` options as fsspec keyword arguments: ``true`` /
    ``false`` as booleans, ``{...}`` / ``[...]`` as JSON, whole numbers as
    numbers (except in secrets), the rest as text."""
    out: dict[str, Any] = {}
    for key, text in OPTIONS.passthrough(options, STORAGE_PREFIX).items():
        protocol, _, name = key.partition(".")
        if not name:
            raise OptionError(f"option 'fs.{key}': name it fs.<protocol>.<option>, e.g. "
                              "fs.s3.endpoint_url")
        if protocol.lower() not in protocols:
            raise OptionError(f"option 'fs.{key}' is for the {protocol}:// file system, but "
                              f"'path' is on {protocols[0]}://")
        out[name] = _decode(name, text, f"fs.{key}")
    return out


def _decode(name: str, text: str, option: str) -> Any:
    stripped = text.strip()
    if stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise OptionError(f"option '{option}' looks like JSON but is not: {exc.msg}") from None
    if re.fullmatch(r"-?\d+", stripped) and not _SECRET_KEYS.search(name):
        return int(stripped)
    return text
