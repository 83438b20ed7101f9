"""A network lab's ground: the commands it runs, the namespaces it makes
and enters, and who owns them (a state file under :data:`STATE_DIR`), so
that :func:`sweep` removes what a dead process left. Stdlib only (see the
package's docstring)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

#: Where each lab's owner is written down, so that :func:`sweep` can tell a
#: live lab from one left by a killed process.
STATE_DIR = Path("/run/eoskit-netlab")
_LAB_NAME = re.compile(r"^(eosk[a-z0-9]{1,8}-)")
_COMMAND_TIMEOUT = 20.0
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)
_T = TypeVar("_T")


class NetlabError(RuntimeError):
    """A lab could not be made, changed or removed; the message names what."""


def _tool(name: str) -> str:
    """Full path of ``name`` (sbin directories are not on every PATH)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise NetlabError(f"`{name}` is not installed (apt-get install iptables iproute2)")
    return found


def _run(argv: Sequence[str], *, input: str | None = None, check: bool = True,
         timeout: float = _COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a setup command; a failure names the command and what it printed."""
    command = " ".join(argv)
    try:
        done = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NetlabError(f"`{command}` did not finish within {timeout:g} s") from None
    except FileNotFoundError:
        raise NetlabError(f"`{argv[0]}` is not installed") from None
    if check and done.returncode != 0:
        raise NetlabError(f"`{command}` failed (exit {done.returncode}): {done.stderr.strip()}")
    return done


def _in_netns(netns: str | None, work: Callable[[], _T], timeout: float = 10.0) -> _T:
    """``work()`` run on a fresh thread that has entered ``netns``.

    setns(2) moves only the calling thread, and a socket stays in the
    namespace it was made in, so this is how a socket (or a /proc/sys/net
    write) is made inside a host without a subprocess. The thread ends
    afterwards instead of going back: nothing else ever runs in it.
    """
    if netns is None:
        return work()
    outcome: dict[str, Any] = {}

    def enter_and_work() -> None:
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise NetlabError(f"cannot enter namespace {netns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            outcome["value"] = work()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=enter_and_work, name=f"netlab-{netns}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise NetlabError(f"work inside namespace {netns} did not finish within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _socket_in(netns: str | None, kind: int = socket.SOCK_STREAM) -> socket.socket:
    return _in_netns(netns, lambda: socket.socket(socket.AF_INET, kind))


def _start_time(pid: int) -> int | None:
    """Start time of a live (not zombie) ``pid`` in clock ticks, or None.

    The same check as :mod:`.processes`, repeated so this module stays
    stdlib-only: a recycled pid is not taken for a lab's owner.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _state_path(prefix: str) -> Path:
    return STATE_DIR / f"{prefix.rstrip('-')}.json"


def _owner_alive(prefix: str) -> bool:
    """A process's lab lives while its process does; a kept lab
    (``Lab(keep_while=...)``, the dev services') while its owner's file exists."""
    try:
        owner = json.loads(_state_path(prefix).read_text())
        if owner.get("keep_while"):
            return Path(owner["keep_while"]).exists()
        started = _start_time(int(owner["pid"]))
        return started is not None and started == owner["start_time"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _list_netns() -> list[str]:
    out = _run([_tool("ip"), "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _delete_netns(names: Sequence[str]) -> list[str]:
    """Kill every process inside ``names``, then delete them; the errors."""
    ip, errors = _tool("ip"), []
    for name in names:
        pids = _run([ip, "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    for name in names:
        done = _run([ip, "netns", "delete", name], check=False)
        if done.returncode != 0 and name in _list_netns():
            errors.append(f"namespace {name}: {done.stderr.strip()}")
    return errors


def sweep(prefix: str = "eosk") -> list[str]:
    """Remove the namespaces (their processes, links and rules with them) of
    labs whose owning process is gone; the namespace names removed.

    A state file is written before a lab makes anything, so a namespace
    without a live owner is a leftover, never a lab being built.
    """
    labs: dict[str, list[str]] = {}
    for name in _list_netns():
        match = _LAB_NAME.match(name)
        if match and name.startswith(prefix):
            labs.setdefault(match.group(1), []).append(name)
    if STATE_DIR.is_dir():
        for path in STATE_DIR.glob(f"{prefix}*.json"):
            labs.setdefault(f"{path.stem}-", [])
    removed = []
    for lab_prefix, names in sorted(labs.items()):
        if _owner_alive(lab_prefix):
            continue
        errors = _delete_netns(names)
        if errors:
            raise NetlabError(f"sweeping lab {lab_prefix}: " + "; ".join(errors))
        _state_path(lab_prefix).unlink(missing_ok=True)
        removed += names
    return removed


def _claim_prefix(prefix: str, keep_while: Path | None = None, subnet: str = "") -> None:
    """Write down the owner of ``prefix`` before anything of it exists: this
    process, or (a kept lab) a file whose existence keeps it.

    Written aside and linked into place, so that a sweeper never reads a
    half-written file (and takes the lab for a dead one) and two labs never
    share a prefix.
    """
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    path, aside = _state_path(prefix), STATE_DIR / f".{prefix}{os.getpid()}.tmp"
    owner: dict[str, Any] = {"pid": os.getpid(), "start_time": _start_time(os.getpid())}
    if keep_while is not None:
        owner.update(keep_while=str(Path(keep_while).absolute()), subnet=subnet)
    aside.write_text(json.dumps(owner))
    try:
        os.link(aside, path)
    except FileExistsError:
        raise NetlabError(f"lab prefix {prefix} is taken ({path} exists)") from None
    finally:
        aside.unlink()
