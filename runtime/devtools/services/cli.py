"""``eoskit dev up|down|status|env`` and ``eoskit dev cluster up|down|status|env``:
manage the dev services and the local Spark cluster from a shell
(``eoskit dev podman ...`` is in ``runtime/devtools/podman/cli.py``).

:func:`register_cli` plugs into the top-level ``eoskit`` parser;
``python -m eoskit.runtime.devtools.services.cli`` runs the same commands standalone.
Failures follow the eoskit CLI's one convention
(``eoskit.runtime.cli.errors``): the commands here just raise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eoskit.runtime.cli.checkpoint import add_json
from eoskit.runtime.cli.errors import UsageError, add_verbose, guarded

from .cluster import DEFAULT_ROOT as CLUSTER_ROOT
from .cluster import ENV_MASTER, SparkCluster
from .docker import STATE_FILE as DOCKER_STATE
from .docker import DockerServices
from .endpoints import render_env
from .errors import DevServicesError
from . import network
from .local import DEFAULT_ROOT, SERVICE_NAMES, LocalServices, parse_services, recorded_only


def _uses_docker(directory: str) -> bool:
    """A folder whose last ``up`` was ``--docker`` is handled by DockerServices."""
    return (Path(directory) / DOCKER_STATE).is_file()


def _services(directory: str) -> LocalServices | DockerServices:
    """The folder's services: those its ``up`` calls chose (``--only``), or all."""
    if _uses_docker(directory):
        return DockerServices(directory, keep=True)
    return LocalServices(directory, only=recorded_only(directory))


def _only(text: str) -> frozenset[str]:
    """``--only``'s value, parsed; argparse reports a bad one with this message."""
    try:
        return parse_services(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _print_status(status: dict[str, str], as_json: bool = False) -> None:
    """Each service's (or daemon's) state: aligned lines, or with ``--json``
    one object, ``{name: {"running": bool, "status": text}}``."""
    if as_json:
        print(json.dumps({name: {"running": text.startswith("running"), "status": text}
                          for name, text in status.items()}, indent=2))
        return
    width = max(len(name) for name in status)
    for name, text in status.items():
        print(f"{name:<{width}}  {text}")


def cmd_up(args: argparse.Namespace) -> int:
    """Start (or reuse) the services and say how to use them."""
    services: LocalServices | DockerServices
    only: frozenset[str] | None = args.only
    if args.docker and args.kafka_brokers not in (None, 1):
        raise UsageError("--kafka-brokers 3 runs local Kafka nodes; the Docker services have one broker")
    if args.network and args.docker:
        raise UsageError("--network runs the local services on hosts of their own; not with --docker")
    if args.docker and only is not None:
        raise UsageError("--only starts some of the local services; the Docker services start as one set "
                               "(leave out --only, or --docker)")
    if only is not None and args.kafka_brokers is not None and "kafka" not in only:
        raise UsageError(f"--kafka-brokers {args.kafka_brokers} is about Kafka, which "
                               f"--only {','.join(sorted(only))} leaves out")
    if args.docker:
        services = DockerServices(args.dir, keep=True)
    elif args.network or network.is_networked(args.dir):
        # Every service of a networked folder runs on a lab host: one that --only adds later gets its host then.
        names = [s.name for s in LocalServices(args.dir, kafka_brokers=args.kafka_brokers, only=only).services]
        services = network.up(args.dir, names, args.kafka_brokers, only=only)
    else:
        services = LocalServices(args.dir, kafka_brokers=args.kafka_brokers, only=only)
    services.up()
    _print_status(services.status())
    if network.is_networked(args.dir):
        print(f"\neach service runs on a host of its own; run jobs under test on the job host: "
              f"ip netns exec {network.job_host(args.dir).netns} <command>")
    print(f'\nexport the endpoints with:  eval "$(eoskit dev env --dir {args.dir})"')
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the services (every one that runs, whatever ``up --only`` chose);
    ``--purge`` also deletes their data."""
    if _uses_docker(args.dir):  # first: a purge deletes docker.json
        DockerServices(args.dir, keep=True).down()
    local = LocalServices(args.dir)
    if network.is_networked(args.dir):
        local.down()
        network.down(args.dir)  # the lab, every namespace, link and rule of it
    if args.purge:
        local.purge()
    else:
        local.down()
    print(f"stopped dev services in {args.dir}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print the state of each service of the folder (those ``up --only``
    chose); exit 0 only if all of them are running."""
    status = _services(args.dir).status()
    _print_status(status, args.json)
    return 0 if all(text.startswith("running") for text in status.values()) else 1


def cmd_env(args: argparse.Namespace) -> int:
    """Print ``export`` lines (the only output that shows the passwords): the
    variables of the folder's services (those ``up --only`` chose)."""
    endpoints = _services(args.dir).endpoints()
    if endpoints is None:
        only = recorded_only(args.dir)
        chosen = "" if only is None or _uses_docker(args.dir) else f" --only {','.join(sorted(only))}"
        raise DevServicesError(f"dev services in {args.dir} are not running; "
                               f"start them with: eoskit dev up{chosen} --dir {args.dir}")
    sys.stdout.write(render_env(endpoints))
    if network.is_networked(args.dir):
        print(f"# jobs under test run on the lab's job host: ip netns exec {network.job_host(args.dir).netns} ...")
    return 0


def _cluster(args: argparse.Namespace) -> SparkCluster:
    return SparkCluster(args.dir, workers=getattr(args, "workers", 2), cores=getattr(args, "cores", 1),
                        memory=getattr(args, "memory", "1g"),
                        bare_worker_python=getattr(args, "bare_worker_python", False))


def cmd_cluster_up(args: argparse.Namespace) -> int:
    """Start (or reuse) the standalone cluster and say how to use it."""
    cluster = _cluster(args)
    url = cluster.up()
    _print_status(cluster.status())
    print(f"\nrun jobs on it with:  export {ENV_MASTER}={url}")
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    """Stop the master, the workers and their executors."""
    cluster = _cluster(args)
    cluster.down()
    left = cluster.leftover_processes()
    if left:
        raise DevServicesError(f"spark cluster in {args.dir}: processes still running in its work "
                               f"directories: {', '.join(map(str, left))}")
    print(f"stopped the spark cluster in {args.dir}")
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    """Print each daemon's state; exit 0 only if all run."""
    status = _cluster(args).status()
    _print_status(status, args.json)
    return 0 if all(text.startswith("running") for text in status.values()) else 1


def cmd_cluster_env(args: argparse.Namespace) -> int:
    """Print the export line that points eoskit jobs at the cluster."""
    url = _cluster(args).master_url()
    if url is None:
        raise DevServicesError(f"no spark cluster runs in {args.dir}; start one with: "
                               f"eoskit dev cluster up --dir {args.dir}")
    print(f"export {ENV_MASTER}={url}")
    return 0


def add_folder_verbs(verbs: Any, specs: Sequence[tuple[str, Any, str]], command: str, default: str,
                     what: str) -> None:
    """One subcommand per ``(name, handler, help)`` of ``specs``, each taking
    ``--dir`` (``what``, default ``default``) and failing as ``eoskit
    <command> <name>`` does (``guarded``)."""
    for name, handler, help_text in specs:
        sub = verbs.add_parser(name, help=help_text)
        sub.add_argument("--dir", default=default, help=f"{what} (default {default})")
        sub.set_defaults(func=guarded(f"{command} {name}", handler))


def _register_cluster(commands: Any) -> None:
    cluster = commands.add_parser("cluster", help="a Spark standalone master and workers on this machine")
    verbs = cluster.add_subparsers(dest="cluster_command", metavar="{up,down,status,env}", required=True)
    specs = [
        ("up", cmd_cluster_up, "start a master and workers (reusing running ones)"),
        ("down", cmd_cluster_down, "stop the master, the workers and their executors"),
        ("status", cmd_cluster_status, "show what runs where"),
        ("env", cmd_cluster_env, f"print the export line of {ENV_MASTER}"),
    ]
    add_folder_verbs(verbs, specs, "dev cluster", CLUSTER_ROOT, "cluster folder")
    add_json(verbs.choices["status"], "print each daemon's state as JSON")
    up = verbs.choices["up"]
    up.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    up.add_argument("--cores", type=int, default=1, help="cores each worker offers (default 1)")
    up.add_argument("--memory", default="1g", help="memory each worker offers to executors (default 1g)")
    up.add_argument("--bare-worker-python", action="store_true",
                    help="the workers' own python3 is a bare virtualenv without eoskit, "
                    "as on nodes nobody installed eoskit on")


def register_cli(subparsers: Any) -> None:
    """Add the ``dev`` command to an ``argparse`` subparsers object."""
    dev = subparsers.add_parser("dev", help="local Kafka/PostgreSQL/MariaDB/S3 for development and tests")
    commands = dev.add_subparsers(dest="dev_command", metavar="{up,down,status,env,cluster,podman}",
                                  required=True)
    specs = [
        ("up", cmd_up, "start the services (reusing running ones)"),
        ("down", cmd_down, "stop every process the folder started"),
        ("status", cmd_status, "show what runs where"),
        ("env", cmd_env, "print export lines: eval \"$(eoskit dev env)\""),
    ]
    add_folder_verbs(commands, specs, "dev", DEFAULT_ROOT, "services folder")
    add_json(commands.choices["status"], "print each service's state as JSON")
    commands.choices["up"].add_argument("--docker", action="store_true", help="use Docker containers instead")
    commands.choices["up"].add_argument(
        "--only", type=_only, default=None, metavar="SERVICE[,SERVICE...]",
        help=f"start only these services, of {', '.join(SERVICE_NAMES)} (kafka: every Kafka node); "
             "the folder remembers them, and later `status` and `env` show those, `down` stops what runs")
    commands.choices["up"].add_argument(
        "--kafka-brokers", type=int, choices=(1, 3), default=None,
        help="Kafka nodes: 1 (the default) or 3 (replication factor 3, min.insync.replicas 2; the extra "
             "nodes are the services kafka-2 and kafka-3); a folder keeps the count it was first started with")
    commands.choices["up"].add_argument(
        "--network", action="store_true",
        help="run each service on a host of its own (a network namespace, as root), beside a job host, "
             "so that `eoskit chaos --faults network` can cut the network between them")
    commands.choices["down"].add_argument("--purge", action="store_true", help="also delete the folder and all data")
    _register_cluster(commands)
    from eoskit.runtime.devtools.podman.cli import register as register_podman

    register_podman(commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry: ``python -m eoskit.runtime.devtools.services.cli dev up``."""
    parser = argparse.ArgumentParser(prog="eoskit")
    register_cli(parser.add_subparsers(dest="command", required=True))
    add_verbose(parser)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
