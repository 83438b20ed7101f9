#!/usr/bin/env bash
# The containers tier's machine (docs/dev-services.md, "Podman"):
#
#   bash scripts/containers.sh install   # Debian's Podman 4.3, runc, debootstrap, podman-compose
#   bash scripts/containers.sh purge     # the images, Podman's storage and those packages: a fresh machine
#
# `install` adds only what is missing and changes no setting of the machine:
# eoskit's Podman settings live in its own folder (CONTAINERS_CONF), and
# `eoskit dev podman down` (which the tests run at their end) puts back the
# network state Podman's bridge changes. scripts/test.sh runs `install` for
# the containers tier.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(podman runc debootstrap podman-compose containernetworking-plugins
          golang-github-containernetworking-plugin-dnsname dnsmasq-base iptables nftables)
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"

case "${1:-}" in
install)
    missing=()
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "==> installing Debian packages: ${missing[*]}"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    ;;
purge)
    if command -v podman >/dev/null 2>&1; then
        for dir in .eoskit/test-containers/podman .eoskit/podman; do
            [ -d "$dir" ] && .venv/bin/eoskit dev podman down --dir "$dir" || true
        done
        $sudo podman system reset --force >/dev/null 2>&1 || true
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get purge -y -qq podman runc debootstrap podman-compose \
        golang-github-containernetworking-plugin-dnsname >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get autoremove -y -qq >/dev/null
    $sudo rm -rf /var/lib/containers /var/lib/cni "${EOSKIT_CACHE_DIR:-$HOME/.cache/eoskit}/wheels"
    ;;
*)
    echo "usage: bash scripts/containers.sh install|purge" >&2
    exit 2
    ;;
esac
