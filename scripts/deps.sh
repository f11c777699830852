#!/usr/bin/env bash
# What the test suite needs beyond .venv, installed from the machine's package registries.
# Idempotent: each step checks first and does nothing when the dependency is already there.
# `make deps` runs it, then the client fetch below (in the venv, which `make deps` also needs);
# `make test` depends on `make deps`. `make run` never needs it.
#
#   PostgreSQL server binaries (Debian's `postgresql`): the storage suite, the node tests, the
#   chaos suite and the benchmarks start private clusters of their own (initdb into a temp dir,
#   a free port on 127.0.0.1); no server is started or configured system-wide.
#   Chromium (Debian's `chromium`) for the console's browser tests, driven by Playwright.
#   Java 17 + Maven and Node.js + npm (Debian's packages when missing). The clients the suite
#   drives come after, from the Makefile: `python -m tests.support.fetch_deps` fetches them into
#   ignored folders (Apache Kafka's consumer and kafka-consumer-groups in tests/java, its broker
#   in tests/broker, kafkajs in tests/js); each step does nothing when its folder is newer than
#   the files that pin it.
set -euo pipefail

say() { printf '[deps] %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else say "need root for: $*"; return 1
    fi
}

APT_UPDATED=""
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        say "apt-get not found: install $* by hand (or set the variables the README names)"
        return 1
    fi
    if [ -z "$APT_UPDATED" ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

pg_bin() {
    if [ -n "${PG_BIN:-}" ]; then echo "$PG_BIN"; return; fi
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
            echo "$d"; return
        fi
    done
}

postgresql() {
    if [ -n "${COORD_TEST_PG_DSN:-}" ]; then
        say "PostgreSQL: using the server at COORD_TEST_PG_DSN"
        return
    fi
    if [ -n "$(pg_bin)" ]; then
        say "PostgreSQL: $(pg_bin)"
        return
    fi
    say "PostgreSQL: installing Debian's postgresql (server binaries for private test clusters)"
    # the package would create and start a system-wide cluster on 5432; the suite never uses it
    as_root mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" |
        as_root tee /etc/postgresql-common/createcluster.d/coordinator-tests.conf >/dev/null
    apt_install postgresql
    if [ -z "$(pg_bin)" ]; then
        say "PostgreSQL: installed, but no initdb/pg_ctl/postgres under /usr/lib/postgresql/*/bin"
        exit 1
    fi
    say "PostgreSQL: $(pg_bin)"
}

toolchains() {
    local missing=()
    command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
    command -v mvn >/dev/null 2>&1 || missing+=(maven)
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    command -v npm >/dev/null 2>&1 || missing+=(npm)
    # the console's browser tests drive Debian's chromium through Playwright (executable_path)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]} (the Java, kafkajs and console tests)"
        apt_install "${missing[@]}"
    fi
    say "Java: $(java -version 2>&1 | head -1); $(mvn -B -v 2>/dev/null | head -1); Node $(node --version)"
}

postgresql
toolchains
