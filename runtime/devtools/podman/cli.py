"""``eoskit dev podman up|down|env|images``: this machine's Podman as the engine
of ``eoskit dev up --docker``, the pytest plugin's containers and the job image.

``up`` sets Podman up (``host``), builds the local images (``images``) and
prints the export lines that point testcontainers and eoskit at both;
``eval "$(eoskit dev podman up)"``. ``down`` removes every container and
network made here and puts the host's network back as it was.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..services.cli import add_folder_verbs
from ..services.errors import DevServicesError
from .engine import PodmanEngine, podman_env
from .host import PodmanHost
from .images import LOCAL_IMAGES, build_all

DEFAULT_ROOT = ".eoskit/podman"


def _print_exports(env: dict[str, str]) -> None:
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")


def cmd_up(args: argparse.Namespace) -> int:
    """Set Podman up, build what is missing, print the export lines."""
    _print_exports(PodmanEngine(args.dir).up(rebuild=args.rebuild))
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    """Build the local images (those missing, or all with --rebuild) and list them."""
    host = PodmanHost(args.dir)
    host.up()
    for service, name in build_all(host, force=args.rebuild).items():
        print(f"{service:<9} {name}  (for {LOCAL_IMAGES[service].official})")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    """Print the export lines of a Podman set up with ``up``."""
    host = PodmanHost(args.dir)
    if not host.serving():
        raise DevServicesError(f"no Podman is set up in {args.dir}; set it up with: "
                               f"eoskit dev podman up --dir {args.dir}")
    _print_exports(podman_env(host))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Remove what was made here; restore the host's network."""
    undone = PodmanEngine(args.dir).down()
    print("podman: " + (f"removed or restored {', '.join(undone)}" if undone else "nothing to undo"))
    return 0


def register(commands: Any) -> None:
    """Add ``podman`` to ``eoskit dev``'s subcommands."""
    podman = commands.add_parser("podman", help="Podman as a Docker engine here: set up, images, undo")
    verbs = podman.add_subparsers(dest="podman_command", metavar="{up,down,env,images}", required=True)
    specs = [
        ("up", cmd_up, "set Podman up, build the local images, print export lines"),
        ("down", cmd_down, "remove its containers and networks, restore the host's network"),
        ("env", cmd_env, "print the export lines again"),
        ("images", cmd_images, "build the local images and list them"),
    ]
    add_folder_verbs(verbs, specs, "dev podman", DEFAULT_ROOT, "Podman's folder")
    for name in ("up", "images"):
        verbs.choices[name].add_argument("--rebuild", action="store_true", help="build every image again")
