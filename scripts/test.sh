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
trap cluster_down EXIT
cluster_down  # a cluster left behind by an interrupted earlier run
.venv/bin/python -m pytest "$@"
