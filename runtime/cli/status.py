"""``eoskit status`` and ``eoskit list``: what a job is doing, read from
what every run keeps beside its checkpoint.

- ``eoskit/control/status.json`` (``listeners.CheckpointStatus``): the run's
  state, batches, last batch and checkpoint, rows per second, lag per
  partition, restarts, in-doubt transactions settled, last savepoint;
- ``eoskit/control/run.json`` (``control.RunRecord``): whether a run is live
  (a fresh heartbeat, and on this host a live pid);
- ``~/.cache/eoskit/runs`` (``control.LocalRuns``): the runs of this machine,
  for ``eoskit list``.

``eoskit status --watch`` redraws the status every few seconds with the lag
and throughput of the samples it has seen drawn as sparklines: the picture
of a running job in a terminal. Failures follow the CLI's one convention
(``eoskit.runtime.cli.errors``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections import deque
from typing import Any

from eoskit.runtime.cli.checkpoint import (
    add_checkpoint_dir,
    add_common,
    checkpoint_dir,
    render_table,
    storage_options,
)
from eoskit.runtime.cli.errors import UsageError, guarded
from eoskit.runtime.job.control import ControlDir, ControlError, LocalRuns
from eoskit.runtime.state.checkpoints import require_directory

#: A sparkline's eight heights.
BARS = "▁▂▃▄▅▆▇█"
#: Samples a sparkline shows.
HISTORY = 40


def sparkline(values: list[float | None]) -> str:
    """``values`` as bars scaled between their least and greatest; a missing
    value as a space."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    return "".join(" " if v is None else BARS[min(len(BARS) - 1, int((v - low) / span * len(BARS)))]
                   for v in values)


def view(control: ControlDir) -> dict[str, Any] | None:
    """The job on ``control``'s checkpoint as ``eoskit status`` shows it, or
    None if no run has written a status there."""
    status, live, last = control.status(), control.live_run(), control.last_run()
    if status is None and live is None:
        return None
    status = dict(status or {})
    if live is not None:
        state = status.get("state") if status.get("state") in ("running", "restarting") else "running"
    elif status.get("state") == "finished" and status.get("cancelled"):
        state = "cancelled"  # eoskit cancel
    elif status.get("state") in ("finished", "failed"):
        state = status["state"]
    else:  # the last run ended without saying so: killed, or its machine lost
        state = "not running"
    status.update(state=state, checkpoint=control.checkpoint, live=live is not None,
                  run=live or last)
    return status


def _number(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}{unit}" if isinstance(value, (int, float)) else str(value)


def _ago(at: Any, now: float) -> str:
    if not isinstance(at, (int, float)):
        return "-"
    seconds = max(0.0, now - at)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def render(status: dict[str, Any], now: float | None = None) -> list[str]:
    """The status as lines of text."""
    now = time.time() if now is None else now
    run = status.get("run") or {}
    app = run.get("app") or {}
    where = (f" (pid {run.get('pid')} on {run.get('host')}, heartbeat "
             f"{_ago(run.get('heartbeat'), now)}"
             + (f"; Spark app {app.get('id')} on {app.get('master')}" if app.get("id") else "")
             + ")" if status.get("live") else "")
    lines = [f"job {status.get('job') or run.get('job') or '-'} on {status['checkpoint']}: "
             f"{status['state']}{where}"]
    if status.get("failure"):
        lines.append(f"  failure      {status['failure']}")
    lines.append(f"  batches      {_number(status.get('batches'))} this run; last batch "
                 f"{_number(status.get('last_batch'))}, status written {_ago(status.get('updated'), now)}")
    lines.append(f"  rows/s       input {_number(status.get('input_rows_per_second'))}, processed "
                 f"{_number(status.get('processed_rows_per_second'))}; last batch took "
                 f"{_number(status.get('batch_ms'), ' ms')}")
    lag = status.get("lag") or {}
    worst = sorted(lag.items(), key=lambda item: -item[1])[:4]
    lines.append(f"  lag          {_number(status.get('total_lag'))} records"
                 + (" (" + ", ".join(f"{p} {n:,}" for p, n in worst)
                    + (", ..." if len(lag) > len(worst) else "") + ")" if worst else ""))
    lines.append(f"  restarts     {_number(status.get('restarts'))}"
                 + (f"; last: {status['last_failure']}" if status.get("last_failure") else ""))
    lines.append(f"  in-doubt     {_number(status.get('in_doubt_settled'))} settled this run "
                 f"({_number(status.get('in_doubt_committed'))} committed, "
                 f"{_number(status.get('in_doubt_rolled_back'))} rolled back)")
    savepoint = status.get("last_savepoint")
    if savepoint:
        lines.append(f"  savepoint    {savepoint.get('path')} (batch {savepoint.get('batch')}, "
                     f"{_ago(savepoint.get('at'), now)})")
    return lines


def _status(args: argparse.Namespace) -> int:
    location = checkpoint_dir(args)
    require_directory(location, storage_options(args.storage_option))  # exit 2 before anything
    control = ControlDir(location)
    history: deque[tuple[float | None, float | None]] = deque(maxlen=HISTORY)
    shown = 0
    while True:
        status = view(control)
        if status is None:
            raise ControlError(f"no eoskit run has kept a status on checkpoint {control.checkpoint} "
                               "(eoskit run writes one under eoskit/control)")
        shown += 1
        if args.json:
            print(json.dumps(status, sort_keys=True, default=str))
        elif not args.watch:
            print("\n".join(render(status)))
        else:
            history.append((status.get("total_lag"), status.get("processed_rows_per_second")))
            lines = render(status)
            lines.append(f"  lag          {sparkline([h[0] for h in history])}")
            lines.append(f"  processed/s  {sparkline([h[1] for h in history])}")
            lines.append(f"  (every {args.watch:g} s, the last {len(history)} samples; Ctrl-C ends)")
            if sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[J")  # redraw in place
            print("\n".join(lines) + ("" if sys.stdout.isatty() else "\n"), flush=True)
        if not args.watch or (args.count and shown >= args.count) or not status["live"]:
            return 0
        time.sleep(args.watch)


def _list(args: argparse.Namespace) -> int:
    runs = LocalRuns().running()
    rows = []
    apps = cluster_apps(args.cluster) if args.cluster else None
    for run in runs:
        try:
            status = view(ControlDir(run["checkpoint"])) or {}
        except Exception as exc:  # noqa: BLE001 - one unreadable checkpoint must not hide the others
            status = {"state": f"unreadable ({type(exc).__name__})"}
        rows.append({"pid": run.get("pid"), "app": (run.get("app") or {}).get("id"),
                     "job": run.get("job"), "checkpoint": run.get("checkpoint"),
                     "started": run.get("started"), "state": status.get("state", "starting"),
                     "batches": status.get("batches"), "last_batch": status.get("last_batch"),
                     "total_lag": status.get("total_lag"),
                     "processed_rows_per_second": status.get("processed_rows_per_second")})
    if apps is not None:
        rows = with_cluster_apps(rows, apps)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no eoskit job is running on this machine"
              + (f", and no application on the cluster {args.cluster}" if args.cluster else ""))
        return 0
    print(render_table(("pid", "app", "job", "state", "batches", "last batch", "lag", "rows/s", "checkpoint"),
                       [(r["pid"] or "-", r.get("app") or "-", r["job"], r["state"], _number(r["batches"]),
                         _number(r["last_batch"]), _number(r["total_lag"]),
                         _number(r["processed_rows_per_second"]), r["checkpoint"] or "-") for r in rows]))
    return 0


def cluster_apps(ui: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The applications a Spark standalone master runs, from its web UI's
    ``/json/`` (``http://host:8080``); a master that cannot be reached is a
    service failure (exit 3)."""
    if not ui.startswith(("http://", "https://")):
        raise UsageError(f"--cluster {ui!r}: give the master's web UI, e.g. http://host:8080 "
                         "(not its spark:// URL)")
    url = ui.rstrip("/") + "/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            found = json.loads(response.read())
    except (OSError, ValueError) as exc:
        raise ConnectionError(f"the Spark master's web UI {url} cannot be read: "
                              f"{getattr(exc, 'reason', exc)}") from None
    return list(found.get("activeapps") or [])


def with_cluster_apps(rows: list[dict[str, Any]], apps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This machine's runs, each matched to its application on the cluster
    by id, then the cluster's other applications (other machines' drivers,
    or not eoskit's), as rows of their own."""
    ours = {r["app"] for r in rows if r.get("app")}
    for app in apps:
        if app.get("id") in ours:
            continue
        rows.append({"pid": None, "app": app.get("id"), "job": app.get("name"), "checkpoint": None,
                     "started": (app.get("starttime") or 0) / 1000 or None,
                     "state": f"{str(app.get('state', '?')).lower()} (not run from this machine)",
                     "batches": None, "last_batch": None, "total_lag": None,
                     "processed_rows_per_second": None})
    return rows


def register_cli(commands: Any) -> None:
    status = commands.add_parser(
        "status", help="what the job on a checkpoint is doing: state, batches, rows/s, lag, "
        "restarts, in-doubt transactions, last savepoint",
        description="Read the status every eoskit run keeps beside its checkpoint "
        "(eoskit/control/status.json) and whether a run is live there.")
    add_checkpoint_dir(status, "the job's checkpoint location")
    add_common(status)
    status.add_argument("--watch", type=float, nargs="?", const=2.0, default=None, metavar="SECONDS",
                        help="redraw every SECONDS (2) with lag and throughput sparklines, until "
                        "the run ends or Ctrl-C")
    status.add_argument("--count", type=int, metavar="N",
                        help="with --watch: stop after N refreshes")
    status.set_defaults(func=guarded("status", _status))
    listing = commands.add_parser("list", help="the eoskit jobs running on this machine, and with "
                                  "--cluster the applications of a Spark standalone master")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.add_argument("--cluster", metavar="URL",
                         help="also the applications of this Spark standalone master, by its web "
                         "UI (http://host:8080): each run of this machine matched to its "
                         "application, the others listed as the master reports them")
    listing.set_defaults(func=guarded("list", _list))
