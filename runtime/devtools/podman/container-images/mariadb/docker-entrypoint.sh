#!/bin/bash
# The official image's contract, as far as eoskit and testcontainers use it:
# MARIADB_ROOT_PASSWORD / MARIADB_ALLOW_EMPTY_ROOT_PASSWORD /
# MARIADB_RANDOM_ROOT_PASSWORD, MARIADB_DATABASE, MARIADB_USER and
# MARIADB_PASSWORD (each also under its MYSQL_* name, as the official image
# accepts), /docker-entrypoint-initdb.d/*.sql and *.sh on the first start,
# arguments starting with "-" passed to mariadbd. Initialisation runs on a
# server without networking; like the official image, the log says "ready
# for connections" twice, the second time for the real server.
set -euo pipefail
if [ "${1:0:1}" = '-' ]; then set -- mariadbd "$@"; fi
env_of() { local name=MARIADB_$1 old=MYSQL_${2:-$1}; printf '%s' "${!name:-${!old:-}}"; }
sql_string() { local s=${1//\\/\\\\}; printf "'%s'" "${s//\'/\'\'}"; }
sql_name() { printf '`%s`' "${1//\`/\`\`}"; }
if { [ "$1" = mariadbd ] || [ "$1" = mysqld ]; } && [ ! -d /var/lib/mysql/mysql ]; then
    root_password=$(env_of ROOT_PASSWORD)
    empty=$(env_of ALLOW_EMPTY_ROOT_PASSWORD ALLOW_EMPTY_PASSWORD)
    random=$(env_of RANDOM_ROOT_PASSWORD)
    if [ -z "$root_password" ] && [ -z "$empty" ] && [ -z "$random" ]; then
        echo "error: database is uninitialized and the root password option is not specified" >&2
        echo "       (MARIADB_ROOT_PASSWORD, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD or MARIADB_RANDOM_ROOT_PASSWORD)" >&2
        exit 1
    fi
    if [ -n "$random" ]; then
        root_password=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
        echo "GENERATED ROOT PASSWORD: $root_password"
    fi
    chown mysql:mysql /var/lib/mysql
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
        --auth-root-authentication-method=normal >/dev/null
    mariadbd --user=mysql --skip-networking --socket=/run/mysqld/init.sock &
    pid=$!
    for _ in $(seq 120); do
        mariadb-admin --socket=/run/mysqld/init.sock ping >/dev/null 2>&1 && break
        sleep 0.5
    done
    client=(mariadb --protocol=socket --socket=/run/mysqld/init.sock -uroot)
    {
        echo "SET @@SESSION.SQL_LOG_BIN=0;"
        echo "DELETE FROM mysql.user WHERE user = '';"
        echo "CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY $(sql_string "$root_password");"
        echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
        echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $(sql_string "$root_password");"
        database=$(env_of DATABASE)
        [ -z "$database" ] || echo "CREATE DATABASE IF NOT EXISTS $(sql_name "$database");"
        user=$(env_of USER)
        if [ -n "$user" ]; then
            echo "CREATE USER $(sql_string "$user")@'%' IDENTIFIED BY $(sql_string "$(env_of PASSWORD)");"
            [ -z "$database" ] || echo "GRANT ALL ON $(sql_name "$database").* TO $(sql_string "$user")@'%';"
        fi
        echo "FLUSH PRIVILEGES;"
    } | "${client[@]}"
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; . "$f" ;;
            *.sql) echo "running $f"; "${client[@]}" --password="$root_password" ${database:+"$database"} < "$f" ;;
            *) ;;
        esac
    done
    kill "$pid" && wait "$pid" || true
    echo "MariaDB init process done. Ready for start up."
fi
if [ "$1" = mariadbd ] || [ "$1" = mysqld ]; then
    shift
    exec mariadbd --user=mysql "$@"
fi
exec "$@"
