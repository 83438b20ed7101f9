"""Pause points (``EOSKIT_PAUSE_AT``): a process stops at a named point,
says so, and goes on when told, in a real child process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from eoskit.twophase import crash

CHILD = """
from eoskit.twophase import crash
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


def test_a_pause_without_its_directory_is_refused_by_name(tmp_path):
    child = _start({crash.PAUSE_ENV: crash.DRIVER_AFTER_DECISION})
    _, err = child.communicate(timeout=30)
    assert child.returncode != 0 and crash.PAUSE_DIR_ENV in err


def test_an_unknown_pause_point_is_refused_by_name(tmp_path):
    child = _start({crash.PAUSE_ENV: "after_lunch@1", crash.PAUSE_DIR_ENV: str(tmp_path)})
    _, err = child.communicate(timeout=30)
    assert child.returncode != 0 and "unknown crash point" in err and crash.PAUSE_ENV in err
