"""The README's demo: its three jobs killed with SIGKILL mid-stream, restarted, exact."""

from eoskit.runtime.devtools.demo import run


def test_demo_survives_kill_and_verifies_exactly_once(kafka, service_endpoints, tmp_path, capsys):
    assert run.main(work_dir=str(tmp_path / "demo"), endpoints=service_endpoints) == 0
    out = capsys.readouterr().out
    assert out.count("killed the job with SIGKILL mid-stream") == 3
    assert "every order is in PostgreSQL exactly once" in out
    assert "every customer's running total counts each order exactly once" in out
    assert "every order is in topic orders-enriched exactly once, despite the kill -9" in out


def test_orders_made_longer_for_the_benchmarks_keep_their_totals(kafka):
    """produce_orders(value_bytes=...) (the peers benchmark's record sizes):
    each value about that long, read back from the broker, the totals those
    of the same orders unpadded, still 500 customers at most."""
    import json
    import uuid
    from decimal import Decimal

    from eoskit.runtime.devtools.demo.orders import produce_orders, recreate_topic
    from eoskit.runtime.devtools.services.kafka_topic import read_topic

    topics = [f"orders-size-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for topic in topics:
        recreate_topic(kafka, topic, 2)
    plain = produce_orders(kafka, topics[0], 300, 2)
    padded = produce_orders(kafka, topics[1], 300, 2, value_bytes=2_000)
    records = read_topic(kafka, topics[1]).records()
    assert len(records) == 300
    assert all(1_990 <= len(r.value) <= 2_010 for r in records), sorted({len(r.value) for r in records})
    orders = [json.loads(r.value) for r in records]
    assert sum((Decimal(o["amount"]) for o in orders), Decimal("0")) == padded.amount == plain.amount
    assert len(padded.by_customer) == len(plain.by_customer) <= 500
    assert all(o["customer"].startswith("customer-") and o["customer"].endswith("x") for o in orders)
    assert [len(r.value) for r in read_topic(kafka, topics[0]).records()][0] < 120
