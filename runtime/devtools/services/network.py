"""The dev services on hosts of their own: ``eoskit dev up --network``.

Each service (Kafka's nodes, PostgreSQL, MariaDB, the S3 server) runs in a
network namespace of a kept network lab (``netlab.Lab(keep_while=...)``),
listening on that host's address, beside a ``job`` host for the jobs under
test; this machine itself reaches every host over the lab's tester link,
so ``eoskit dev env``'s endpoints work from here as from the job host.
Faults between the job's host and a service's (``eoskit chaos --faults
network``) then cut what a production network cuts: a partition, lost
replies, resets. The lab lives while the folder's ``network.json`` does;
``eoskit dev down`` removes it, every namespace, link and rule with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from .errors import DevServicesError
from .local import LocalServices, Placement
from .netlab import Host, Lab, NetlabError
from .state import STATE_FILE

NETWORK_FILE = "network.json"
#: The dev services' lab subnet, apart from the test labs' 10.213.0.0/24.
SUBNET = "10.214.0.0/24"
#: The host jobs under test run on.
JOB_HOST = "job"


def network_file(root: str | Path) -> Path:
    return Path(root).absolute() / NETWORK_FILE


def is_networked(root: str | Path) -> bool:
    """Whether the folder's services run on a lab's hosts."""
    return network_file(root).is_file()


def lab(root: str | Path) -> Lab:
    """The folder's lab, attached (``NetlabError`` naming the folder when it is gone)."""
    try:
        prefix = json.loads(network_file(root).read_text())["prefix"]
        return Lab.attach(prefix)
    except (OSError, ValueError, KeyError, NetlabError) as exc:
        raise DevServicesError(f"the network lab of the dev services in {root} is gone ({exc}); "
                               f"run `eoskit dev down --dir {root}` and `eoskit dev up --network` again") from None


def job_host(root: str | Path) -> Host:
    return lab(root).hosts[JOB_HOST]


def up(root: str | Path, service_names: Iterable[str], kafka_brokers: int | None = None,
       only: Iterable[str] | None = None) -> LocalServices:
    """Start (or reuse) the folder's services on a lab's hosts, the lab made
    on the first call, a host added for each of ``service_names`` that has
    none yet (``only``: the services chosen, as ``LocalServices`` takes
    them). A folder whose services ran on this host before is refused:
    their data names this host's addresses."""
    root = Path(root).absolute()
    why = Lab.available()
    if why is not None:
        raise DevServicesError(f"--network needs network namespaces: {why}")
    marker = network_file(root)
    if not marker.is_file():
        if (root / STATE_FILE).is_file():
            raise DevServicesError(f"the dev services in {root} ran on this host before: use another --dir "
                                   f"for --network, or `eoskit dev down --purge --dir {root}` first")
        root.mkdir(parents=True, exist_ok=True)
        made = Lab(subnet=SUBNET, keep_while=marker)
        # Written first: a sweep between the lab's start and this file would take the lab for a dead one.
        marker.write_text(json.dumps({"prefix": made.prefix}))
        try:
            made.start()
            made.tester()
            for name in (*service_names, JOB_HOST):
                made.host(name)
        except BaseException:
            made.close()
            marker.unlink(missing_ok=True)
            raise
        placed = made
    else:
        placed = lab(root)
        for name in service_names:  # chosen with --only after the lab was made
            if name not in placed.hosts:
                placed.host(name)
    hosts = {name: Placement(host.ip, host.netns) for name, host in placed.hosts.items() if name != JOB_HOST}
    return LocalServices(root, kafka_brokers=kafka_brokers, hosts=hosts, only=only)


def down(root: str | Path) -> None:
    """Remove the folder's lab (after its services were stopped)."""
    if not is_networked(root):
        return
    try:
        lab(root).close()
    finally:
        network_file(root).unlink(missing_ok=True)
