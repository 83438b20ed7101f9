"""A Kafka topic as a correct ``read_committed`` consumer sees it, computed
from the raw log: the verifier of Kafka sinks.

Why it exists: a Kafka sink's exactly-once claim is checked by reading the
topic back, and a plain ``read_committed`` consumer trusts the broker to
filter aborted transactions. The local broker (Tansu 0.6) hands the records
of aborted transactions to such consumers (measured: those of a zombie
fenced by a new instance, and those of an explicit abort once they reached
the log), so it would report duplicates that a real Kafka consumer never
sees. Tansu does write the ABORT marker in both cases, under the producer
id of the transaction, so the log itself says what is committed. This
module trusts the broker only to hand back the bytes of its log.

How: a small client of the Kafka protocol (ApiVersions v0, Metadata v4,
ListOffsets v1, Fetch v4 with isolation READ_UNCOMMITTED; versions every
Kafka since 1.0, Kafka 4 and Tansu serve) reads every record batch of every
partition, control batches included, from the log start to the high
watermark of the first fetch, from each partition's leader. Then
:func:`apply_read_committed` applies Kafka's rule:

1. a non-transactional batch is visible at once;
2. a transactional batch joins the open transaction of its producer id;
3. a control batch of that producer id ends the transaction: COMMIT makes
   its records visible at their offsets, ABORT drops them; control records
   themselves are never visible;
4. producer epochs: a transactional batch with a higher epoch than its
   producer id's open transaction means a new instance fenced that
   transaction without a marker, so it is dropped as aborted; a batch with
   a lower epoch than one already seen is a fenced zombie's late write and is
   dropped too, and so is a marker older than the open transaction. Kafka
   writes the coordinator's ABORT marker (same producer id) before a new
   instance writes, and refuses stale epochs, so none of these fires against
   Kafka; they keep the rule sound on a broker that does not;
5. what is still open at the end is reported, never visible.

Record batches of format v2 only (Kafka 0.11+; every transactional batch is
one). Compressed batches are decoded with pyarrow's codecs (gzip through
zlib), so the verifier needs nothing eoskit does not already depend on.
"""

from __future__ import annotations

import socket
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

__all__ = ["KafkaLogError", "LogRecord", "RecordBatch", "TopicLog", "apply_read_committed",
           "read_batches", "read_topic"]

_API_FETCH, _API_LIST_OFFSETS, _API_METADATA, _API_VERSIONS = 1, 2, 3, 18
#: The version of each API this client speaks.
_VERSIONS = {_API_FETCH: 4, _API_LIST_OFFSETS: 1, _API_METADATA: 4}
_API_NAMES = {_API_FETCH: "Fetch", _API_LIST_OFFSETS: "ListOffsets", _API_METADATA: "Metadata"}

#: Errors after which the leader is asked again and the request retried.
_RETRIABLE = {
    3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER",
    7: "REQUEST_TIMED_OUT", 13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    56: "KAFKA_STORAGE_ERROR", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
}
_EARLIEST = -2
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}
_MISSING = "the topic does not exist"
#: Bytes one fetch asks for, unless a single batch is larger.
DEFAULT_MAX_BYTES = 1 << 20
_LARGEST_MAX_BYTES = 1 << 28


class KafkaLogError(RuntimeError):
    """The topic's log could not be read or decoded."""


@dataclass(frozen=True)
class LogRecord:
    """One data record of the log."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


@dataclass(frozen=True)
class RecordBatch:
    """One record batch of a partition's log, as the broker stored it."""

    partition: int
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    #: ``"COMMIT"`` or ``"ABORT"`` for a control batch, else None.
    control: str | None
    records: tuple[LogRecord, ...]


@dataclass
class TopicLog:
    """What a correct ``read_committed`` reader of a topic sees, and what it does not."""

    topic: str
    #: Per partition, in offset order: non-transactional records and records
    #: of committed transactions.
    committed: dict[int, list[LogRecord]]
    #: Records of aborted transactions (ABORT marker, or fenced) dropped.
    aborted: int = 0
    #: Per partition, producer ids whose transaction has no control record
    #: yet; their records are not in ``committed``.
    open_transactions: dict[int, list[int]] = field(default_factory=dict)
    #: Records of the open transactions, not visible.
    open_records: int = 0

    def records(self) -> list[LogRecord]:
        """Every committed record, partition then offset order."""
        return [r for p in sorted(self.committed) for r in self.committed[p]]


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0,
               max_bytes: int = DEFAULT_MAX_BYTES) -> TopicLog:
    """Read every partition of ``topic`` and apply read_committed to it.

    ``bootstrap`` is ``host:port[,host:port...]``, plaintext. Raises
    :class:`KafkaLogError` naming the topic (and partition) when the topic is
    missing or a partition cannot be read within ``timeout`` seconds.
    ``max_bytes`` is what one fetch asks for (more when a single batch is
    larger). ``committed`` has every partition of the topic, empty or not.
    """
    partitions, batches = _read(bootstrap, topic, timeout, max_bytes)
    log = apply_read_committed(topic, batches)
    log.committed = {p: log.committed.get(p, []) for p in partitions}
    return log


def read_batches(bootstrap: str, topic: str, timeout: float = 30.0,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> list[RecordBatch]:
    """Every record batch of ``topic``, control batches included, partition
    then offset order, from the log start to the high watermark."""
    return _read(bootstrap, topic, timeout, max_bytes)[1]


def apply_read_committed(topic: str, batches: Iterable[RecordBatch]) -> TopicLog:
    """Kafka's read_committed rule over a log's batches (each partition's in
    offset order); the steps are numbered as in the module docstring."""
    result = TopicLog(topic, {})
    visible: dict[int, list[LogRecord]] = {}
    # (partition, producer id) -> the epoch and records of its open
    # transaction; the highest producer epoch seen in its batches.
    pending: dict[tuple[int, int], tuple[int, list[LogRecord]]] = {}
    newest: dict[tuple[int, int], int] = {}
    for batch in batches:
        out = visible.setdefault(batch.partition, [])
        key, epoch = (batch.partition, batch.producer_id), batch.producer_epoch
        if not batch.transactional and batch.control is None:
            out.extend(batch.records)  # Step 1.
            continue
        stale = epoch < newest.get(key, epoch)
        newest[key] = max(newest.get(key, epoch), epoch)
        if batch.control is not None:
            # Step 3: the marker ends its producer's transaction. Kafka's
            # coordinator may write it with a bumped epoch; one older than the
            # open transaction's is a fenced instance's and ends nothing.
            if key in pending and epoch < pending[key][0]:
                continue
            records = pending.pop(key, (epoch, []))[1]
            if batch.control == "COMMIT":
                out.extend(records)
            else:
                result.aborted += len(records)
        elif stale:
            result.aborted += len(batch.records)  # Step 4: a fenced instance's late write.
        else:
            if key in pending and pending[key][0] < epoch:
                # Step 4: a newer instance fenced the open transaction, no marker.
                result.aborted += len(pending.pop(key)[1])
            pending.setdefault(key, (epoch, []))[1].extend(batch.records)  # Step 2.
    for partition, records in visible.items():
        result.committed[partition] = sorted(records, key=lambda r: r.offset)
    for (partition, producer_id), (_, records) in sorted(pending.items()):
        result.open_transactions.setdefault(partition, []).append(producer_id)  # Step 5.
        result.open_records += len(records)
    return result


def _read(bootstrap: str, topic: str, timeout: float, max_bytes: int
          ) -> tuple[list[int], list[RecordBatch]]:
    if max_bytes < 1:
        raise KafkaLogError(f"max_bytes must be positive, not {max_bytes}")
    deadline = time.monotonic() + timeout
    with _Cluster(bootstrap, deadline) as cluster:
        partitions = cluster.partitions(topic)
        batches: list[RecordBatch] = []
        for partition in partitions:
            batches.extend(_read_partition(cluster, topic, partition, max_bytes))
        return partitions, batches


# --- reading a partition ---------------------------------------------------------------


class _OutOfRange(Exception):
    """A fetch before the log's start (records removed by retention)."""


_OFFSET_OUT_OF_RANGE = 1


def _read_partition(cluster: _Cluster, topic: str, partition: int,
                    first_max_bytes: int) -> Iterator[RecordBatch]:
    """From offset 0, or the log start if the broker has removed records
    before it: a reported log start is not trusted (the local broker once
    reported a start past records it still served)."""
    try:
        yield from _read_from(cluster, topic, partition, first_max_bytes, 0)
    except _OutOfRange:
        yield from _read_from(cluster, topic, partition, first_max_bytes,
                              cluster.earliest(topic, partition))


def _read_from(cluster: _Cluster, topic: str, partition: int, first_max_bytes: int,
               start: int) -> Iterator[RecordBatch]:
    position, end, max_bytes = start, None, first_max_bytes
    while end is None or position < end:
        cluster.check_deadline(f"topic {topic!r} partition {partition}: read up to offset "
                               f"{position} of {end}")
        high_watermark, data = cluster.fetch(topic, partition, position, max_bytes)
        if end is None:
            # The end of this read: the first answer's high watermark, not the
            # ListOffsets "latest" (Tansu's is the last batch's base offset + 1).
            end = high_watermark
            if position >= end:
                return
        complete = 0
        for batch in _decode_batches(topic, partition, data):
            complete += 1
            if batch.last_offset < position:
                continue  # before the position (a broker may start at an earlier batch)
            if batch.base_offset >= end:
                return
            yield _from_position(batch, position)
            position = batch.last_offset + 1
        if complete:
            max_bytes = first_max_bytes
        elif data:
            # A batch larger than max_bytes arrived cut short: ask for more.
            if max_bytes >= _LARGEST_MAX_BYTES:
                raise KafkaLogError(f"topic {topic!r} partition {partition}: the batch at offset "
                                    f"{position} is larger than {_LARGEST_MAX_BYTES} bytes")
            max_bytes *= 4
        else:
            time.sleep(0.1)  # nothing yet below the high watermark: ask again


def _from_position(batch: RecordBatch, position: int) -> RecordBatch:
    if batch.base_offset >= position:
        return batch
    records = tuple(r for r in batch.records if r.offset >= position)
    return RecordBatch(batch.partition, position, batch.last_offset, batch.producer_id,
                       batch.producer_epoch, batch.transactional, batch.control, records)


# --- record batch v2 -------------------------------------------------------------------

# base offset, batch length, partition leader epoch, magic, crc, attributes,
# last offset delta, base timestamp, max timestamp, producer id, producer
# epoch, base sequence, record count.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = 12  # base offset and batch length


def _decode_batches(topic: str, partition: int, data: bytes) -> Iterator[RecordBatch]:
    """The complete batches in a fetch answer's records; a cut-short last one is left out."""
    pos = 0
    while pos + _LOG_OVERHEAD <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + _LOG_OVERHEAD + length
        if end > len(data):
            return
        if length < _BATCH_HEADER.size - _LOG_OVERHEAD:
            raise KafkaLogError(f"topic {topic!r} partition {partition}: a batch at offset "
                                f"{base_offset} is {length} bytes long, too short for a header")
        yield _decode_batch(topic, partition, memoryview(data)[pos:end])
        pos = end


def _decode_batch(topic: str, partition: int, data: memoryview) -> RecordBatch:
    (base_offset, _, _, magic, _, attributes, last_delta, base_timestamp, max_timestamp,
     producer_id, producer_epoch, _, count) = _BATCH_HEADER.unpack_from(data)
    where = f"topic {topic!r} partition {partition} offset {base_offset}"
    if magic != 2:
        raise KafkaLogError(f"{where}: message format v{magic}; only record batches (v2, "
                            "Kafka 0.11+) are read")
    payload = _decompress(where, attributes & 0x07, data[_BATCH_HEADER.size:])
    log_append_time = bool(attributes & 0x08)
    is_control = bool(attributes & 0x20)
    reader = _Reader(payload, where)
    records, control = [], None
    for _ in range(count):
        length = reader.varint()
        body = _Reader(reader.take(length), where)
        body.int8()  # record attributes, unused
        delta = body.varint()
        timestamp = max_timestamp if log_append_time else base_timestamp + delta
        offset = base_offset + body.varint()
        key = body.varbytes()
        value = body.varbytes()
        headers = tuple((bytes(body.varbytes() or b"").decode(), body.varbytes())
                        for _ in range(body.varint()))
        if is_control:
            if key is None or len(key) < 4:
                raise KafkaLogError(f"{where}: a control record without a type")
            kind = struct.unpack_from(">h", key, 2)[0]
            if kind not in _CONTROL_TYPES:
                raise KafkaLogError(f"{where}: control record of unknown type {kind}")
            control = _CONTROL_TYPES[kind]
        else:
            records.append(LogRecord(topic, partition, offset, key, value, headers, timestamp))
    if is_control and control is None:
        raise KafkaLogError(f"{where}: a control batch without a control record")
    return RecordBatch(partition, base_offset, base_offset + last_delta, producer_id,
                       producer_epoch, bool(attributes & 0x10), control, tuple(records))


def _decompress(where: str, codec: int, data: memoryview) -> bytes:
    if codec == 0:
        return bytes(data)
    try:
        if codec == 1:
            return zlib.decompress(data, wbits=47)  # gzip or zlib header
        if codec == 2:
            return _snappy(bytes(data))
        if codec in (3, 4):
            stream = pa.input_stream(pa.py_buffer(data), compression="lz4" if codec == 3 else "zstd")
            return stream.read()
    except (zlib.error, pa.ArrowException, ValueError) as exc:
        raise KafkaLogError(f"{where}: the batch does not decompress: {exc}") from exc
    raise KafkaLogError(f"{where}: unknown compression codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy(data: bytes) -> bytes:
    """Raw snappy (librdkafka), or the Java client's xerial framing of it."""
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data)
    pos, out = 16, []  # magic, version, compatible version
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        out.append(_snappy_block(data[pos + 4:pos + 4 + length]))
        pos += 4 + length
    return b"".join(out)


def _snappy_block(data: bytes) -> bytes:
    size = _Reader(data, "snappy").uvarint()  # a raw snappy block starts with its length
    return pa.Codec("snappy").decompress(data, decompressed_size=size, asbytes=True)


class _Reader:
    """Big-endian fields and zigzag varints over a buffer."""

    def __init__(self, data: bytes | memoryview, where: str) -> None:
        self.data, self.pos, self.where = data, 0, where

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise KafkaLogError(f"{self.where}: truncated data")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))

    def int8(self) -> int:
        return self.unpack(">b")[0]

    def int16(self) -> int:
        return self.unpack(">h")[0]

    def int32(self) -> int:
        return self.unpack(">i")[0]

    def int64(self) -> int:
        return self.unpack(">q")[0]

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self.take(n)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data) or shift > 63:
                raise KafkaLogError(f"{self.where}: truncated or malformed varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def varbytes(self) -> bytes | None:
        n = self.varint()
        return None if n < 0 else self.take(n)

    def array(self) -> range:
        return range(max(self.int32(), 0))


# --- the protocol client ---------------------------------------------------------------


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


class _Connection:
    """One broker connection: request header v1, response header v0."""

    def __init__(self, host: str, port: int, deadline: float) -> None:
        self.address = f"{host}:{port}"
        self.deadline = deadline
        self.correlation = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=self._left())
        except OSError as exc:
            raise KafkaLogError(f"cannot connect to the broker at {self.address}: {exc}") from exc

    def _left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.1)

    def request(self, api_key: int, version: int, body: bytes) -> _Reader:
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + _string("eoskit-kafka-log")
        message = header + body
        try:
            self.sock.settimeout(self._left())
            self.sock.sendall(struct.pack(">i", len(message)) + message)
            (size,) = struct.unpack(">i", self._receive(4))
            reply = _Reader(self._receive(size), f"a reply from {self.address}")
        except OSError as exc:
            raise KafkaLogError(f"the broker at {self.address} did not answer: {exc}") from exc
        if reply.int32() != self.correlation:
            raise KafkaLogError(f"the broker at {self.address} answered out of order")
        return reply

    def _receive(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise OSError("connection closed")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


class _Cluster:
    """Connections to the brokers, partition leaders, and the three requests."""

    def __init__(self, bootstrap: str, deadline: float) -> None:
        self.bootstrap = [_host_port(a) for a in bootstrap.split(",") if a.strip()]
        if not self.bootstrap:
            raise KafkaLogError("no bootstrap servers given")
        self.deadline = deadline
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.connections: dict[int | tuple[str, int], _Connection] = {}

    def __enter__(self) -> _Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        for connection in self.connections.values():
            connection.close()

    def check_deadline(self, what: str) -> None:
        if time.monotonic() > self.deadline:
            raise KafkaLogError(f"timed out: {what}")

    def _connect(self, key: int | tuple[str, int]) -> _Connection:
        if key not in self.connections:
            host, port = self.brokers[key] if isinstance(key, int) else key
            connection = _Connection(host, port, self.deadline)
            _check_versions(connection)
            self.connections[key] = connection
        return self.connections[key]

    def _drop(self, key: int | tuple[str, int]) -> None:
        connection = self.connections.pop(key, None)
        if connection is not None:
            connection.close()

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions, after learning every partition's leader."""
        # A topic just created may take a moment to reach every broker; one
        # that stays missing is a mistake, reported without the full timeout.
        missing_until = time.monotonic() + 5
        while True:
            error = self._metadata(topic)
            if error is None:
                return sorted(p for t, p in self.leaders if t == topic)
            if error == _MISSING and time.monotonic() > missing_until:
                raise KafkaLogError(f"topic {topic!r}: {error}")
            self.check_deadline(f"topic {topic!r}: {error}")
            time.sleep(0.2)

    def _metadata(self, topic: str) -> str | None:
        body = struct.pack(">i", 1) + _string(topic) + struct.pack(">?", False)
        last: Exception | None = None
        for address in list(self.bootstrap) + list(self.brokers.values()):
            try:
                reply = self._connect(address).request(_API_METADATA, 4, body)
                break
            except KafkaLogError as exc:
                self._drop(address)
                last = exc
        else:
            raise KafkaLogError(f"no broker answered a metadata request for topic {topic!r}: {last}")
        reply.int32()  # throttle time
        for _ in reply.array():
            node, host, port = reply.int32(), reply.string(), reply.int32()
            reply.string()  # rack
            self.brokers[node] = (host or "", port)
        reply.string()  # cluster id
        reply.int32()  # controller id
        error = None
        for _ in reply.array():
            code, name = reply.int16(), reply.string()
            reply.int8()  # is internal
            if code == 3:
                error = _MISSING
            elif code:
                error = f"metadata error {code}"
            for _ in reply.array():
                part_code, index, leader = reply.int16(), reply.int32(), reply.int32()
                for _ in range(2):  # replicas, in-sync replicas
                    for _ in reply.array():
                        reply.int32()
                if name == topic and part_code == 0 and leader >= 0:
                    self.leaders[(topic, index)] = leader
                elif name == topic:
                    error = f"partition {index} has no leader (error {part_code})"
        return error

    def _leader(self, topic: str, partition: int) -> _Connection:
        return self._connect(self.leaders[(topic, partition)])

    def _retry(self, topic: str, partition: int, what: str, code: int) -> None:
        """After a retriable error, learn the leader again; raise if it is not retriable."""
        where = f"topic {topic!r} partition {partition}"
        if code not in _RETRIABLE:
            raise KafkaLogError(f"{where}: {what} failed with error {code}")
        self.check_deadline(f"{where}: {what} kept failing with {_RETRIABLE[code]}")
        self._drop(self.leaders.pop((topic, partition), -1))
        time.sleep(0.2)
        self.partitions(topic)

    def earliest(self, topic: str, partition: int) -> int:
        body = (struct.pack(">ii", -1, 1) + _string(topic)
                + struct.pack(">iiq", 1, partition, _EARLIEST))
        while True:
            reply = self._leader(topic, partition).request(_API_LIST_OFFSETS, 1, body)
            code, offset = 0, None
            for _ in reply.array():
                reply.string()
                for _ in reply.array():
                    _, code = reply.int32(), reply.int16()
                    reply.int64()  # timestamp
                    offset = reply.int64()
            if code == 0 and offset is not None:
                return offset
            self._retry(topic, partition, "ListOffsets", code)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[int, bytes]:
        """(high watermark, records bytes) of one fetch, read_uncommitted."""
        body = (struct.pack(">iiiib", -1, 500, 1, max_bytes, 0) + struct.pack(">i", 1) + _string(topic)
                + struct.pack(">iiqi", 1, partition, offset, max_bytes))
        while True:
            reply = self._leader(topic, partition).request(_API_FETCH, 4, body)
            reply.int32()  # throttle time
            found: tuple[int, int, bytes] | None = None
            for _ in reply.array():
                reply.string()
                for _ in reply.array():
                    _, code, high_watermark = reply.int32(), reply.int16(), reply.int64()
                    reply.int64()  # last stable offset
                    for _ in reply.array():  # aborted transactions: none when read_uncommitted
                        reply.int64(), reply.int64()
                    found = (code, high_watermark, reply.nullable_bytes() or b"")
            if found is None:
                raise KafkaLogError(f"topic {topic!r} partition {partition}: the fetch answer "
                                    "does not name the partition")
            code, high_watermark, data = found
            if code == 0:
                return high_watermark, data
            if code == _OFFSET_OUT_OF_RANGE:
                raise _OutOfRange(offset)
            self._retry(topic, partition, f"Fetch at offset {offset}", code)


def _check_versions(connection: _Connection) -> None:
    reply = connection.request(_API_VERSIONS, 0, b"")
    code = reply.int16()
    if code:
        raise KafkaLogError(f"the broker at {connection.address} refused ApiVersions (error {code})")
    ranges = {}
    for _ in reply.array():
        key, low, high = reply.int16(), reply.int16(), reply.int16()
        ranges[key] = (low, high)
    for key, version in _VERSIONS.items():
        low, high = ranges.get(key, (0, -1))
        if not low <= version <= high:
            raise KafkaLogError(f"the broker at {connection.address} does not serve "
                                f"{_API_NAMES[key]} v{version}")


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise KafkaLogError(f"bootstrap server {address.strip()!r} is not host:port")
    return host.strip("[]"), int(port)
