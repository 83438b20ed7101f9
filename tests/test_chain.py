"""Chaining's pieces without Spark (connectors/spark/chain.py,
runtime/job/chain.py): the plan travels and is refused by name when it is
not one, a task's ack rows count its records and give back one ack, the
transform's batches are checked against the promised schema, and only a
pipeline that can chain is chained. The crash scenarios, chained against
PostgreSQL: integration_tests/test_chained_conformance.py."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from eoskit.connectors.spark.chain import (
    ACKS,
    AcksStreamWriter,
    ChainPlan,
    _checked,
    ack_rows,
)
from eoskit.core.options import OptionError
from eoskit.runtime.job.chain import ArrowTransform, chained_writer
from eoskit.twophase.contract import SinkError
from eoskit.twophase.messages import PreparedTransaction

SCHEMA = StructType([StructField("id", LongType()), StructField("customer", StringType())])
ARROW = pa.schema([("id", pa.int64()), ("customer", pa.string())])


def double(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def test_a_plan_travels_whole_and_anything_else_is_refused_by_the_option_s_name():
    plan = ChainPlan("eoskit-postgres", {"dbtable": "t"}, SCHEMA.json(), double, None)
    back = ChainPlan.decode(plan.encode())
    assert back == plan and back.spark_schema == SCHEMA and back.transform(pa.record_batch([[1]], ["x"]))
    for bad in ("not base64!", "aGVsbG8=", pickle.dumps(1).hex()):
        with pytest.raises(OptionError, match="option 'eoskit.chain' is not a chain plan"):
            ChainPlan.decode(bad)


def test_a_task_s_ack_rows_count_its_records_and_give_back_its_ack():
    ack = PreparedTransaction(3, 1, 0, rows=5, txn_id="eoskit:s:3:1:0xab")
    rows = ack_rows(ack)
    assert rows.schema == ACKS and rows.num_rows == 5 and rows.column("ack").null_count == 4
    writer = AcksStreamWriter.__new__(AcksStreamWriter)  # write() needs none of the sink's parts
    assert writer.write(iter([rows.slice(0, 2), rows.slice(2)])) == ack
    empty = PreparedTransaction(3, 2, 0, rows=0, txn_id="")
    assert ack_rows(empty).num_rows == 1  # an empty task still gives its ack


def test_anything_but_one_ack_per_task_is_refused():
    ack = PreparedTransaction(3, 1, 0, rows=1, txn_id="x")
    writer = AcksStreamWriter.__new__(AcksStreamWriter)
    with pytest.raises(SinkError, match="gave 2 acknowledgements, not one"):
        writer.write(iter([ack_rows(ack), ack_rows(ack)]))


def test_the_transform_s_batches_are_cast_to_the_promised_schema_or_refused_naming_the_column():
    narrow = pa.record_batch([pa.array([1, 2], pa.int32()), pa.array(["a", "b"])], ["id", "customer"])
    (cast,) = list(_checked(iter([narrow]), ARROW))
    assert cast.schema == ARROW and cast.column("id").to_pylist() == [1, 2]
    wrong_type = pa.record_batch([pa.array(["x"]), pa.array(["a"])], ["id", "customer"])
    with pytest.raises(SinkError, match="column 'id' is string, not the promised int64"):
        list(_checked(iter([wrong_type]), ARROW))
    renamed = pa.record_batch([pa.array([1]), pa.array(["a"])], ["key", "customer"])
    with pytest.raises(SinkError, match=r"returned columns \['key', 'customer'\], not the promised"):
        list(_checked(iter([renamed]), ARROW))


class Chainable:
    """A source that can chain (runtime.components.Chainable), recording the plan it is given."""

    broadcast = None

    def read_stream(self, spark):
        raise AssertionError("a chained query reads no DataFrame of rows")

    def describe(self) -> str:
        return "a chainable source"

    def chains_values(self) -> str | None:
        return None

    def chained_stream(self, spark, plan):
        raise AssertionError("not to be reached in these cases")


class Formatted:
    def __init__(self, fmt: str, output_mode: str = "append") -> None:
        self.spark_format, self.output_mode = fmt, output_mode

    def all_options(self) -> dict[str, str]:
        return {}


@pytest.mark.parametrize("transform, sink, why", [
    (lambda df: df, Formatted("eoskit-postgres"), "a DataFrame function"),
    (ArrowTransform(double, "id BIGINT"), Formatted("eoskit-postgres", "update"), "update mode"),
    (ArrowTransform(double, "id BIGINT"), Formatted("parquet"), "Spark's own sink"),
    (ArrowTransform(double, "id BIGINT"), object(), "a sink that names no format"),
])
def test_only_a_pipeline_that_can_chain_is_chained(transform, sink, why):
    assert chained_writer(transform, Chainable(), sink, None, {}) is None, why


def test_a_source_with_broadcast_state_is_not_chained():
    source = Chainable()
    source.broadcast = object()
    assert chained_writer(ArrowTransform(double, "id BIGINT"), source, Formatted("eoskit-postgres"),
                          None, {}) is None


def test_a_plan_s_repr_shows_none_of_the_sink_s_options():
    plan = ChainPlan("eoskit-postgres", {"url": "postgresql://app:s3cret-pw@db/shop"}, SCHEMA.json())
    assert "s3cret-pw" not in repr(plan) and "eoskit-postgres" in repr(plan)
