#!/usr/bin/env bash
# Makes sure PostgreSQL runs on this machine with databases for keel's
# tests, and prints the variables the tests read, as shell assignments:
# KEEL_TEST_POSTGRES (a Unix-socket URL), for the TLS test
# KEEL_TEST_POSTGRES_TLS (a TCP URL with sslmode=require) and
# KEEL_TEST_POSTGRES_CA (the CA that signed the server's certificate), and
# for the fault test, which restarts its server under load, a server of its
# own so that the other tests can run beside it: KEEL_TEST_POSTGRES_RESTART_URL
# and KEEL_TEST_POSTGRES_RESTART (the command that restarts that server; the
# shutdown mode, fast or immediate, is appended).
# Variables already set are printed as they are. On a fresh machine, as
# root: installs Debian's postgresql if missing, starts its cluster `main`
# (with room for the many connections of the multi-process tests and a
# certificate for localhost signed by a test CA) and creates and starts a
# cluster `restart` on port 5433 for the fault test, creates a role for
# this user with the test password, and recreates the database `keel_test`
# on both.
set -euo pipefail

if [ -n "${KEEL_TEST_POSTGRES:-}" ] && [ -n "${KEEL_TEST_POSTGRES_TLS:-}" ]; then
  printf 'KEEL_TEST_POSTGRES=%q\nKEEL_TEST_POSTGRES_TLS=%q\nKEEL_TEST_POSTGRES_CA=%q\nKEEL_TEST_POSTGRES_RESTART_URL=%q\nKEEL_TEST_POSTGRES_RESTART=%q\n' \
    "$KEEL_TEST_POSTGRES" "$KEEL_TEST_POSTGRES_TLS" "${KEEL_TEST_POSTGRES_CA:-}" \
    "${KEEL_TEST_POSTGRES_RESTART_URL:-}" "${KEEL_TEST_POSTGRES_RESTART:-}"
  exit 0
fi

say() { echo "postgres.sh: $*" >&2; }
root() { [ "$(id -u)" = 0 ]; }
as_postgres() { if root; then su postgres -c "$1"; else sh -c "$1"; fi; }
# The restart test's cluster and its port.
restart_port=5433
# pg_ctl_of NAME: the command that controls cluster NAME.
pg_ctl_of() {
  if root; then echo "pg_ctlcluster --skip-systemctl-redirect $version $1"; else echo "pg_ctlcluster $version $1"; fi
}
# cluster NAME ACTION: starts, restarts... cluster NAME.
cluster() { $(pg_ctl_of "$1") "$2"; }
# psql_on PORT ARGS...: psql as the postgres user on the server at PORT.
psql_on() { local port=$1; shift; as_postgres "psql -p $port $*"; }
wait_ready() { # wait_ready PORT
  for _ in $(seq 1 200); do
    if psql_on "$1" "-Atqc 'select 1'" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  say "PostgreSQL on port $1 does not accept connections"
  return 1
}
online() { pg_lsclusters -h | awk -v v="$version" -v n="$1" '$1 == v && $2 == n && $4 == "online"' | grep -q .; }
# serve NAME PORT: starts cluster NAME if it is down, with room for 400
# connections (32 keel processes race one token in the tests).
serve() {
  if ! online "$1"; then
    say "starting PostgreSQL $version/$1"
    cluster "$1" start >&2
  fi
  wait_ready "$2"
  if [ "$(psql_on "$2" "-Atqc 'show max_connections'")" -lt 400 ]; then
    say "raising max_connections of $version/$1 to 400"
    psql_on "$2" "-qc 'ALTER SYSTEM SET max_connections = 400'" >&2
    cluster "$1" restart >&2
    wait_ready "$2"
  fi
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
# The cluster Debian's package makes, on PostgreSQL's port.
main_port=5432
serve main "$main_port"
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "restart"' | grep -q .; then
  if ! root; then
    say "there is no cluster $version/restart for the restart test; run this script once as root, or set KEEL_TEST_POSTGRES_RESTART_URL and KEEL_TEST_POSTGRES_RESTART"
    exit 1
  fi
  say "creating the cluster $version/restart on port $restart_port, for the restart test"
  pg_createcluster "$version" restart -p "$restart_port" >&2
fi
serve restart "$restart_port"

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
if root && [ "$(psql_on "$main_port" "-Atqc 'show ssl_cert_file'")" != "$tls/server.crt" ]; then
  say "serving TLS with the test certificate"
  psql_on "$main_port" "-qc \"ALTER SYSTEM SET ssl = on\"" >&2
  psql_on "$main_port" "-qc \"ALTER SYSTEM SET ssl_cert_file = '$tls/server.crt'\"" >&2
  psql_on "$main_port" "-qc \"ALTER SYSTEM SET ssl_key_file = '$tls/server.key'\"" >&2
  cluster main restart >&2
  wait_ready "$main_port"
fi

user=$(id -un)
for port in "$main_port" "$restart_port"; do
  if ! psql_on "$port" "-Atqc \"select 1 from pg_roles where rolname = '$user'\"" | grep -q 1; then
    as_postgres "createuser -p $port -s '$user'" >&2
  fi
  # The password the TLS test connects with over TCP.
  psql -h /var/run/postgresql -p "$port" -d postgres -qc "ALTER ROLE \"$user\" PASSWORD 'keel-test'" >&2
  dropdb --if-exists -h /var/run/postgresql -p "$port" keel_test >&2
  createdb -h /var/run/postgresql -p "$port" keel_test >&2
done
echo "KEEL_TEST_POSTGRES=postgresql:///keel_test?host=/var/run/postgresql"
echo "KEEL_TEST_POSTGRES_TLS='postgres://$user:keel-test@localhost:5432/keel_test?sslmode=require'"
echo "KEEL_TEST_POSTGRES_CA=$tls/ca.crt"
echo "KEEL_TEST_POSTGRES_RESTART_URL='postgresql:///keel_test?host=/var/run/postgresql&port=$restart_port'"
echo "KEEL_TEST_POSTGRES_RESTART='$(pg_ctl_of restart) restart -m'"
