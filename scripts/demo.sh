#!/usr/bin/env bash
# The end-to-end demo on a fresh machine: set up, start local services,
# produce sample orders, run the job, verify the result.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/eoskit demo
