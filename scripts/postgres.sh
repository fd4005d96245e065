#!/usr/bin/env bash
# Makes sure a PostgreSQL server runs on this machine with a database for
# keel's tests, and prints its URL. Uses KEEL_TEST_POSTGRES as it is when
# it is set. On a fresh machine, as root: installs Debian's postgresql if
# missing, starts the cluster, creates a role for this user and recreates
# the database `keel_test`.
set -euo pipefail

if [ -n "${KEEL_TEST_POSTGRES:-}" ]; then
  echo "$KEEL_TEST_POSTGRES"
  exit 0
fi

say() { echo "postgres.sh: $*" >&2; }

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    say "PostgreSQL is not installed; install Debian's postgresql package (as root) or set KEEL_TEST_POSTGRES"
    exit 1
  fi
  say "installing PostgreSQL"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi

version=$(ls /etc/postgresql | sort -n | tail -n 1)
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
  say "starting PostgreSQL $version"
  if [ "$(id -u)" = 0 ]; then
    pg_ctlcluster --skip-systemctl-redirect "$version" main start >&2
  else
    pg_ctlcluster "$version" main start >&2
  fi
fi

user=$(id -un)
as_postgres() { if [ "$(id -u)" = 0 ]; then su postgres -c "$1"; else sh -c "$1"; fi; }
# Wait for the server to accept connections (it was just started).
for _ in $(seq 1 100); do
  if as_postgres "psql -Atqc 'select 1'" >/dev/null 2>&1; then break; fi
  sleep 0.1
done
if ! as_postgres "psql -Atqc \"select 1 from pg_roles where rolname = '$user'\"" | grep -q 1; then
  as_postgres "createuser -s '$user'" >&2
fi
dropdb --if-exists -h /var/run/postgresql keel_test >&2
createdb -h /var/run/postgresql keel_test >&2
echo "postgresql:///keel_test?host=/var/run/postgresql"
