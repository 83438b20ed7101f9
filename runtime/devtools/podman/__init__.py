"""The container path on Podman: the host's set-up and undoing (``host``), and
the local images built from Debian's packages and Maven Central (``images``).

``eoskit dev podman up`` makes this machine's Podman a Docker-compatible
engine for testcontainers and builds the images; ``eoskit dev podman down``
removes what it made and leaves the machine as found. docs/dev-services.md,
"Podman", has the whole path.
"""

from .engine import PodmanEngine, podman_env
from .host import PodmanHost
from .images import LOCAL_IMAGES, build_all

__all__ = ["LOCAL_IMAGES", "PodmanEngine", "PodmanHost", "build_all", "podman_env"]
