#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, then pytest. The pytest
# plugin shipped in eoskit starts the local services and stops them after;
# the cluster tier's Spark standalone cluster (`pytest -m cluster`: one master,
# two workers from the installed PySpark) is started by its `spark_cluster`
# fixture under .eoskit/cluster and stopped here too, even if pytest is
# interrupted, so no master, worker or executor outlives the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cluster_down() {
    .venv/bin/eoskit dev cluster down --dir "${EOSKIT_CLUSTER_DIR:-.eoskit/cluster}" >/dev/null 2>&1 || true
}
# The containers tier (`--tier containers` or `all`) needs Podman from Debian;
# whatever happens to pytest, Podman's containers go and the host's network is
# put back (`eoskit dev podman down`, a no-op when nothing was set up).
containers=""
previous=""
for arg in "$@"; do
    case "$previous $arg" in
        "--tier containers" | "--tier all" | *" --tier=containers" | *" --tier=all") containers=1 ;;
    esac
    previous=$arg
done
podman_down() {
    [ -z "$containers" ] || .venv/bin/eoskit dev podman down \
        --dir "${EOSKIT_DEV_DIR:-.eoskit/test-containers}/podman" >/dev/null || true
}
cleanup() { cluster_down; podman_down; }
trap cleanup EXIT
cluster_down  # a cluster left behind by an interrupted earlier run
[ -z "$containers" ] || bash scripts/containers.sh install
.venv/bin/python -m pytest "$@"
