#!/usr/bin/env bash
# Makes sure a PostgreSQL server runs on this machine with a database for
# keel's tests, and prints the variables the tests read, as shell
# assignments: KEEL_TEST_POSTGRES (a Unix-socket URL), for the TLS test
# KEEL_TEST_POSTGRES_TLS (a TCP URL with sslmode=require) and
# KEEL_TEST_POSTGRES_CA (the CA that signed the server's certificate), and
# for the fault test KEEL_TEST_POSTGRES_RESTART (the command that restarts
# the server; the shutdown mode, fast or immediate, is appended).
# Variables already set are printed as they are. On a fresh machine, as
# root: installs Debian's postgresql if missing, starts the cluster (with room
# for the many connections of the multi-process tests and a certificate for
# localhost signed by a test CA), creates a role for this user with the test
# password, and recreates the database `keel_test`.
set -euo pipefail

if [ -n "${KEEL_TEST_POSTGRES:-}" ] && [ -n "${KEEL_TEST_POSTGRES_TLS:-}" ]; then
  printf 'KEEL_TEST_POSTGRES=%q\nKEEL_TEST_POSTGRES_TLS=%q\nKEEL_TEST_POSTGRES_CA=%q\nKEEL_TEST_POSTGRES_RESTART=%q\n' \
    "$KEEL_TEST_POSTGRES" "$KEEL_TEST_POSTGRES_TLS" "${KEEL_TEST_POSTGRES_CA:-}" "${KEEL_TEST_POSTGRES_RESTART:-}"
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

# A certificate for localhost, signed by a CA made for these tests.
tls=/var/lib/postgresql/keel-test-tls
if root && [ ! -f "$tls/server.crt" ]; then
  say "making a test CA and a certificate for localhost"
  mkdir -p "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=keel-test-ca \
    -keyout "$tls/ca.key" -out "$tls/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
    -keyout "$tls/server.key" -out "$tls/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$tls/ext"
  openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
    -CAcreateserial -days 3650 -extfile "$tls/ext" -out "$tls/server.crt" >/dev/null 2>&1
  chown -R postgres:postgres "$tls"
  chmod 600 "$tls/server.key" "$tls/ca.key"
  chmod 644 "$tls/ca.crt" "$tls/server.crt"
fi
if root && [ "$(as_postgres "psql -Atqc 'show ssl_cert_file'")" != "$tls/server.crt" ]; then
  say "serving TLS with the test certificate"
  as_postgres "psql -qc \"ALTER SYSTEM SET ssl = on\"" >&2
  as_postgres "psql -qc \"ALTER SYSTEM SET ssl_cert_file = '$tls/server.crt'\"" >&2
  as_postgres "psql -qc \"ALTER SYSTEM SET ssl_key_file = '$tls/server.key'\"" >&2
  cluster restart >&2
  wait_ready
fi

user=$(id -un)
if ! as_postgres "psql -Atqc \"select 1 from pg_roles where rolname = '$user'\"" | grep -q 1; then
  as_postgres "createuser -s '$user'" >&2
fi
# The password the TLS test connects with over TCP.
psql -h /var/run/postgresql -d postgres -qc "ALTER ROLE \"$user\" PASSWORD 'keel-test'" >&2
dropdb --if-exists -h /var/run/postgresql keel_test >&2
createdb -h /var/run/postgresql keel_test >&2
echo "KEEL_TEST_POSTGRES=postgresql:///keel_test?host=/var/run/postgresql"
echo "KEEL_TEST_POSTGRES_TLS='postgres://$user:keel-test@localhost:5432/keel_test?sslmode=require'"
echo "KEEL_TEST_POSTGRES_CA=$tls/ca.crt"
if root; then
  echo "KEEL_TEST_POSTGRES_RESTART='pg_ctlcluster --skip-systemctl-redirect $version main restart -m'"
else
  echo "KEEL_TEST_POSTGRES_RESTART='pg_ctlcluster $version main restart -m'"
fi
