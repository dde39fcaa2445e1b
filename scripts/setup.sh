#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test skiplock: the
# PostgreSQL server binaries (initdb, pg_ctl) and pgbench, and, as root,
# Debian's chromium for the dashboard's browser tests (package ui; they
# skip without it) and pgbouncer for the pooler tests (make test-faults).
# Does nothing where they are present.
set -euo pipefail

have_server() {
  command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing chromium (headless) for the dashboard's browser tests"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing pgbouncer for the connection-pooler tests (make test-faults)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  # The package starts a service of its own; the tests start theirs.
  service pgbouncer stop >/dev/null 2>&1 || true
fi

if have_server && command -v pgbench >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: PostgreSQL server binaries not found and no apt-get here: install PostgreSQL (initdb, pg_ctl, pgbench) or set SKIPLOCK_PG_BIN" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing PostgreSQL from the OS packages"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql postgresql-contrib >/dev/null
# The package may start its own cluster; skiplock runs its own servers.
$SUDO service postgresql stop >/dev/null 2>&1 || true
