"""The README's demo: its three jobs killed with SIGKILL mid-stream, restarted, exact."""

from eoskit.runtime.demo import run


def test_demo_survives_kill_and_verifies_exactly_once(kafka, service_endpoints, tmp_path, capsys):
    assert run.main(work_dir=str(tmp_path / "demo"), endpoints=service_endpoints) == 0
    out = capsys.readouterr().out
    assert out.count("killed the job with SIGKILL mid-stream") == 3
    assert "every order is in PostgreSQL exactly once" in out
    assert "every customer's running total counts each order exactly once" in out
    assert "every order is in topic orders-enriched exactly once, despite the kill -9" in out
