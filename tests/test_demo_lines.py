"""What the demo says at its end about the local services (issue 23: it stops
what it started, and says how to get them back)."""

from eoskit.runtime.devtools.demo.run import stop_line


def test_the_demo_says_what_it_stopped_and_what_it_left_running():
    line = stop_line(".eoskit/dev", ["kafka", "postgres"], ["mariadb"])
    assert "stopped the local services it started (kafka, postgres;" in line
    assert "`eoskit dev up --dir .eoskit/dev` starts them again" in line
    assert "left running the ones that ran before it (mariadb;" in line
    assert "`eoskit dev down --dir .eoskit/dev` stops them" in line
    assert stop_line("d", [], []) == "no local service to stop"
