"""Network labs: each party of a distributed test on a host of its own.

A :class:`Lab` puts hosts, each a Linux network namespace with one ``eth0``,
on a bridge that lives in a "switch" namespace of its own, and makes faults
between them with iptables rules inside the hosts' namespaces: partitions,
lost replies, resets, packet loss, isolation (for half-open peers), slow links
(tbf). The kernel here has no netem, so latency comes from :class:`DelayProxy`.

Nothing is created in the root namespace: the test process reaches a host's
service through :meth:`Lab.expose` (a forwarder listening on the root's
loopback whose outgoing socket is made inside the host's namespace) or opens
sockets inside a host with :meth:`Host.socket`. An address in the root
namespace would be seen by every process on the machine and would collide
with a concurrent lab on the same subnet.

Cleanup: every namespace name starts with the lab's prefix, ``eosk<6 hex>-``,
and a state file under :data:`STATE_DIR` names the owning process (pid and
start time) before anything is made. ``Lab.__exit__`` (or the ``atexit`` hook,
or the watchdog after ``timeout``) kills the processes in the namespaces and
deletes the namespaces, which takes their links, rules and qdiscs with them;
:func:`sweep` does the same for labs whose owner died (run at every lab's
start, and by ``python -m eoskit.runtime.devtools.services.netlab sweep``).

Stdlib only, so that the package also loads by path, without eoskit
installed (its ``__init__.py``, as ``tests/test_netlab.py`` does in an
isolated interpreter). Its modules: ``namespaces`` (commands, namespaces,
owners, :func:`sweep`), ``lab`` (:class:`Lab`, :class:`Host`,
:class:`Fault`), ``proxy`` (:class:`DelayProxy`), ``__main__`` (``python -m
eoskit.runtime.devtools.services.netlab sweep|check``). See docs/network-faults.md.
"""

from __future__ import annotations

from .lab import Fault, Host, Lab
from .namespaces import STATE_DIR, NetlabError, sweep
from .proxy import DelayProxy

__all__ = ["STATE_DIR", "DelayProxy", "Fault", "Host", "Lab", "NetlabError", "sweep"]
