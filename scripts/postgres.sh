#!/usr/bin/env bash
# Makes sure a PostgreSQL server runs on this machine with a database for
# keel's tests, and prints its URL. Uses KEEL_TEST_POSTGRES as it is when
# it is set. On a fresh machine, as root: installs Debian's postgresql if
# missing, starts the cluster (with room for the many connections of the
# multi-process tests), creates a role for this user and recreates the
# database `keel_test`.
set -euo pipefail

if [ -n "${KEEL_TEST_POSTGRES:-}" ]; then
  echo "$KEEL_TEST_POSTGRES"
  exit 0
fi

say() { echo "postgres.sh: $*" >&2; }
root() { [ "$(id -u)" = 0 ]; }
as_postgres() { if root; then su postgres -c "$1"; else sh -c "$1"; fi; }
cluster() { if root; then pg_ctlcluster --skip-systemctl-redirect "$version" main "$1"; else pg_ctlcluster "$version" main "$1"; fi; }
wait_ready() {
  for _ in $(seq 1 200); do
    if as_postgres "psql -Atqc 'select 1'" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  say "PostgreSQL does not accept connections"
  return 1
}

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  if ! root; then
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
  cluster start >&2
fi
wait_ready

# 32 keel processes race one token in the tests: they need connections.
if [ "$(as_postgres "psql -Atqc 'show max_connections'")" -lt 400 ]; then
  say "raising max_connections to 400"
  as_postgres "psql -qc 'ALTER SYSTEM SET max_connections = 400'" >&2
  cluster restart >&2
  wait_ready
fi

user=$(id -un)
if ! as_postgres "psql -Atqc \"select 1 from pg_roles where rolname = '$user'\"" | grep -q 1; then
  as_postgres "createuser -s '$user'" >&2
fi
dropdb --if-exists -h /var/run/postgresql keel_test >&2
createdb -h /var/run/postgresql keel_test >&2
echo "postgresql:///keel_test?host=/var/run/postgresql"
