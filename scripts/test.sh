#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, then pytest. The pytest
# plugin shipped in eoskit starts the local services and stops them after.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
