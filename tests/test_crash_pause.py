"""Pause points (``EOSKIT_PAUSE_AT``): a process stops at a named point,
says so, and goes on when told, in a real child process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from eoskit.core import crash

CHILD = """
from eoskit.core import crash
crash.crash_point(crash.TASK_AFTER_PREPARE, 0)  # below the armed batch: no pause
print("before", flush=True)
crash.crash_point(crash.TASK_AFTER_PREPARE, 2)
print("after", flush=True)
crash.crash_point(crash.TASK_AFTER_PREPARE, 3)  # go exists: no second pause
"""


def _start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_paused_process_announces_itself_and_waits_for_go(tmp_path):
    child = _start({crash.PAUSE_ENV: f"{crash.TASK_AFTER_PREPARE}@2", crash.PAUSE_DIR_ENV: str(tmp_path)})
    reached = tmp_path / crash.REACHED_FILE
    deadline = time.monotonic() + 30
    while not reached.exists():
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)
    assert reached.read_text() == f"{crash.TASK_AFTER_PREPARE}@2 pid {child.pid}\n"
    time.sleep(0.3)
    assert child.poll() is None, "the process did not wait for go"
    (tmp_path / crash.GO_FILE).touch()
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert out.split() == ["before", "after"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [crash.GO_FILE, crash.REACHED_FILE]


LIST_CHILD = """
from eoskit.core import crash
for batch in (0, 1, 2, 3, 4):
    crash.crash_point(crash.BROADCAST_BEFORE_PIN, batch)
    print(batch, flush=True)
crash.crash_point(crash.BROADCAST_BEFORE_PIN, 3)  # go-3 exists: no second pause
"""


def _wait_for(path, child):
    deadline = time.monotonic() + 30
    while not path.exists():
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)


def test_a_list_of_batches_pauses_at_each_of_them_only(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", LIST_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, crash.PAUSE_ENV: f"{crash.BROADCAST_BEFORE_PIN}@1,3",
             crash.PAUSE_DIR_ENV: str(tmp_path)})
    for batch in (1, 3):
        _wait_for(tmp_path / f"{crash.REACHED_FILE}-{batch}", child)
        time.sleep(0.3)
        assert child.poll() is None, "the process did not wait for go"
        assert not (tmp_path / f"{crash.REACHED_FILE}-3").exists() or batch == 3
        (tmp_path / f"{crash.GO_FILE}-{batch}").touch()
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert out.split() == ["0", "1", "2", "3", "4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go-1", "go-3", "reached-1", "reached-3"]


def test_a_pause_without_its_directory_is_refused_by_name(tmp_path):
    child = _start({crash.PAUSE_ENV: crash.DRIVER_AFTER_DECISION})
    _, err = child.communicate(timeout=30)
    assert child.returncode != 0 and crash.PAUSE_DIR_ENV in err


def test_an_unknown_pause_point_is_refused_by_name(tmp_path):
    child = _start({crash.PAUSE_ENV: "after_lunch@1", crash.PAUSE_DIR_ENV: str(tmp_path)})
    _, err = child.communicate(timeout=30)
    assert child.returncode != 0 and "unknown crash point" in err and crash.PAUSE_ENV in err


# -- a task point armed in a running process (EOSKIT_CRASH_CONTROL) ----------

ARMED_CHILD = """
import sys
from eoskit.core import crash
crash.crash_point(crash.TASK_AFTER_PREPARE, 5)  # nothing armed yet
print("unarmed", flush=True)
sys.stdin.readline()  # the test arms the point meanwhile
crash.crash_point(crash.DRIVER_AFTER_DECISION, 5)  # another point: goes on
crash.crash_point(crash.TASK_AFTER_PREPARE, 1)  # below the armed batch: goes on
print("below", flush=True)
crash.crash_point(crash.TASK_AFTER_PREPARE, 2)
print("survived", flush=True)
"""


def _armed_child(control) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ARMED_CHILD],
                            env={**os.environ, crash.CONTROL_ENV: str(control)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_task_point_armed_after_the_process_started_kills_it_once(tmp_path):
    control, once = tmp_path / "control", tmp_path / "crashed-once"
    first = _armed_child(control)
    assert first.stdout.readline().strip() == "unarmed"
    crash.arm(control, crash.TASK_AFTER_PREPARE, 2, once)
    out, err = first.communicate("\n", timeout=30)
    assert first.returncode == -9, (out, err)
    assert out.split() == ["below"] and once.exists()
    # Armed still, but the once-file exists: the next worker goes on.
    second = _armed_child(control)
    out, err = second.communicate("\n", timeout=30)
    assert second.returncode == 0 and out.split() == ["unarmed", "below", "survived"], err
    crash.disarm(control)
    assert not (control / crash.ARMED_FILE).exists()


def test_a_driver_point_cannot_be_armed_in_a_running_process(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="task points only"):
        crash.arm(tmp_path, crash.DRIVER_AFTER_DECISION, 1, tmp_path / "once")
    assert not (tmp_path / crash.ARMED_FILE).exists()
