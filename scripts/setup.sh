#!/usr/bin/env bash
# Make a fresh Debian machine ready for eoskit's demo and tests: the OS
# packages the local services need, then .venv with eoskit installed.
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
[ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1 || missing+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-client)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)  # the dev broker's TLS certificates
# The network lab (runtime/devtools/services/netlab/): namespaces and veth links, faults
# as iptables rules inside them, slow links with tc; sbin is not on every PATH.
PATH="$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1 || missing+=(iproute2)
PATH="$PATH:/usr/sbin:/sbin" command -v iptables >/dev/null 2>&1 || missing+=(iptables)
PATH="$PATH:/usr/sbin:/sbin" command -v nft >/dev/null 2>&1 || missing+=(nftables)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "==> installing Debian packages: ${missing[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$python" -m venv .venv
fi
# Dependencies when pyproject.toml or setup.py (the extras) changed; eoskit
# itself every time. A regular (not editable) install, so that Spark's
# discovery of pyspark_* modules sees the data sources exactly as a user's
# installation would.
stamp=.venv/.eoskit-deps-$(cat pyproject.toml setup.py | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
    echo "==> installing Python dependencies into .venv"
    # A current pip, whatever the venv started with (23.x on Debian 12's
    # Python, which installs eoskit's extras too).
    .venv/bin/pip install -q --disable-pip-version-check --upgrade "pip>=24"
    .venv/bin/pip install -q --disable-pip-version-check ".[test]"
    touch "$stamp"
fi
# Without setuptools' build/ folder of an earlier install: its stale copies
# of moved or deleted modules would be installed again.
rm -rf build
.venv/bin/pip install -q --disable-pip-version-check --no-deps --force-reinstall .
# The worked example of a plug-in in a package of its own (docs/plugins.md):
# its tests are in the tiers, and eoskit finds it by its entry point alone.
.venv/bin/pip install -q --disable-pip-version-check --no-deps --force-reinstall ./examples/sqlite-sink
# Apache Kafka's jars for the local broker, fetched once into eoskit's cache
# (a no-op when they are there). Without network this only warns: the first
# `eoskit dev up` tries again and says what to do.
.venv/bin/python -c 'import sys; from eoskit.runtime.devtools.services.kafka_jars import fetch_main; sys.exit(fetch_main())' >/dev/null \
    || echo "==> warning: Apache Kafka's jars are not fetched yet; \`eoskit dev up\` will try again" >&2
