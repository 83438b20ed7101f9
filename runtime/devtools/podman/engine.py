"""Podman set up and the local images built: what ``eoskit dev podman up`` and
the pytest plugin's ``EOSKIT_SERVICES=podman`` start, as one object."""

from __future__ import annotations

import os

from ..services.docker import IMAGE_SETTINGS
from .host import PodmanHost
from .images import LOCAL_IMAGES, build_all


def podman_env(host: PodmanHost) -> dict[str, str]:
    """The host's settings, and the local images in place of the official ones."""
    local = {s.env: LOCAL_IMAGES[s.service].name for s in IMAGE_SETTINGS}
    return {**host.env(), **local}


class PodmanEngine:
    """``up``: the host set up (``host``), every local image there (built when
    missing or changed); the environment that points testcontainers and
    eoskit at both. ``down``: the host's ``down``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.host = PodmanHost(root)

    def up(self, rebuild: bool = False) -> dict[str, str]:
        self.host.up()
        build_all(self.host, force=rebuild)
        return podman_env(self.host)

    def down(self) -> list[str]:
        return self.host.down()
