# A PostgreSQL 15 server for one test, sourced after lib.sh: pg_start starts it in $TEST_TMP as
# the `postgres` user on a free loopback port and exports PG_URL (a URI ending in '/', a database
# name to append); it is stopped by its PID when the test exits. pg_createdb NAME makes a database.
# Debian's binaries are found at run time (pg_config, then Debian's versioned layout); a pg_ctl
# elsewhere on PATH is not used.
pg_bindir() {
    local d
    d=$(pg_config --bindir 2>/dev/null)
    if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
    for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    done
    return 1
}

pg_start() {
    PG_BIN=$(pg_bindir) || skip "PostgreSQL server binaries not installed (scripts/setup-deps.sh test)"
    getent passwd postgres >/dev/null || skip "no postgres user (Debian postgresql package)"
    PG_DIR="$TEST_TMP/pg"
    mkdir -p "$PG_DIR"
    chown postgres: "$PG_DIR"
    chmod 700 "$PG_DIR"
    # $TEST_TMP itself must be traversable by the postgres user.
    chmod o+x "$TEST_TMP"
    as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U postgres --no-sync -E UTF8 \
        >"$TEST_TMP/initdb.log" 2>&1 || { cat "$TEST_TMP/initdb.log" >&2; fail "initdb failed"; }
    PG_PORT=$(free_port)
    # The postmaster itself (exec'd, so its PID is ours to stop); loopback only, a socket in our
    # directory; durability off, as the server and its data are thrown away after the test.
    pg_spawn >"$TEST_TMP/postgres.log" 2>&1
    _pids+=("$PG_PID")
    PG_URL="postgresql://postgres@127.0.0.1:$PG_PORT/"
    export PG_URL PG_PID PG_PORT PG_BIN
    pg_wait_ready || { cat "$TEST_TMP/postgres.log" >&2; fail "PostgreSQL did not start"; }
}

# The postmaster, started in the background with setpriv exec'ing it: $! is the postmaster's PID
# itself (a shell function run with & would fork a subshell and hide it). Sets PG_PID.
pg_spawn() {
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$PG_BIN/postgres" \
        -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR" -c listen_addresses=127.0.0.1 \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 \
        -c log_lock_waits=on -c deadlock_timeout=1s -c log_min_duration_statement=1000 &
    PG_PID=$!
}

as_pg() {
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
}

pg_wait_ready() {
    for _ in $(seq 300); do
        "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && return 0
        kill -0 "$PG_PID" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

pg_sql() { # DB SQL
    "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 "${PG_URL}$1" -c "$2"
}

pg_createdb() {
    pg_sql postgres "CREATE DATABASE $1" >/dev/null
}

# Stops the server (fast shutdown) and waits for its PID to end.
pg_stop() {
    kill -INT "$PG_PID" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.05; done
    wait "$PG_PID" 2>/dev/null
}

# Starts it again on the same port and data (after pg_stop).
pg_restart_same() {
    pg_spawn >>"$TEST_TMP/postgres.log" 2>&1
    _pids+=("$PG_PID")
    pg_wait_ready || fail "PostgreSQL did not restart"
}
export -f pg_sql
