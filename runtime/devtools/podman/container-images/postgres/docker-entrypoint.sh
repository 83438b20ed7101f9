#!/bin/bash
# The official image's contract, as far as eoskit and testcontainers use it:
# POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_USER
# (default postgres), POSTGRES_DB (default the user), PGDATA,
# /docker-entrypoint-initdb.d/*.sql and *.sh on the first start, arguments
# starting with "-" passed to postgres, password logins from any address.
# Initialisation runs on a server that listens on no TCP port, so a client
# that reaches 127.0.0.1:5432 reaches the finished database.
set -euo pipefail
if [ "${1:0:1}" = '-' ]; then set -- postgres "$@"; fi
if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" && chown -R postgres:postgres "$PGDATA" /var/run/postgresql && chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_USER:=postgres}"
    : "${POSTGRES_DB:=$POSTGRES_USER}"
    method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$method" != trust ]; then
        echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set" >&2
        echo "       (or set POSTGRES_HOST_AUTH_METHOD=trust)" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s' "${POSTGRES_PASSWORD:-}" > "$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" -D "$PGDATA" --auth-local=trust --encoding=UTF8 --locale=C.UTF-8 \
        --auth-host="$method" ${POSTGRES_INITDB_ARGS:-} >/dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all $method" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start >/dev/null
    psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
    if [ "$POSTGRES_DB" != postgres ]; then
        "${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" -q <<<'CREATE DATABASE :"db";'
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; . "$f" ;;
            *.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
            *) ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "PostgreSQL init process complete; ready for start up."
fi
exec "$@"
