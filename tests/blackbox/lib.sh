# Shared helpers for black-box tests. Source it: . "$(dirname "$0")/lib.sh"
# Provides: fail, assert_eq, assert_contains, assert_not_contains, start_server, api, and cleanup of
# every process the test started (by PID) on exit.
set -u
: "${BUILD:?run through tests/run.sh}"
: "${TEST_TMP:=$(mktemp -d /tmp/ephemeral-test.XXXXXX)}"
EPHD=$BUILD/ephemerald
# The image by its absolute path, so that a server started from another directory (store_full
# runs in $TEST_TMP) finds it: serve refuses to start without a usable image.
: "${EPHEMERAL_IMAGE:=${TOP:?run through tests/run.sh}/var/images/default}"
export EPHEMERAL_IMAGE
EPH=$BUILD/ephemeral
_pids=()

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skip: $*"; exit 77; }
assert_eq() { # actual expected what
    [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
}
assert_contains() { # haystack needle what
    case "$1" in *"$2"*) ;; *) fail "$3: '$2' not found in: $(printf '%s' "$1" | head -c 2000)" ;; esac
}
assert_not_contains() {
    case "$1" in *"$2"*) fail "$3: '$2' unexpectedly found" ;; *) ;; esac
}
# The logs in $TEST_TMP that hold a sanitizer's report (a build with SANITIZE=...): a server's
# error, undefined behaviour or leak fails the test that ran it, whatever the test asserted.
sanitizer_reports() {
    [ -d "${TEST_TMP:-}" ] || return 0
    grep -rIlE --include='*.log' -e 'ERROR: (Address|Leak|Thread|Memory)Sanitizer' \
        -e ': runtime error: ' "$TEST_TMP" 2>/dev/null
}
_cleanup() {
    for p in "${_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${_pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    local f reports
    reports=$(sanitizer_reports)
    if [ -n "$reports" ]; then
        for f in $reports; do
            echo "FAIL: a sanitizer report in ${f#"$TEST_TMP"/}:" >&2
            grep -E -A40 -e 'ERROR: (Address|Leak|Thread|Memory)Sanitizer' -e ': runtime error: ' \
                "$f" | head -n 120 >&2
        done
        exit 1
    fi
    return 0
}
trap _cleanup EXIT

# A free loopback port.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_server [extra serve args...]: starts ephemerald on a free loopback port with a fresh
# database in $TEST_TMP, creates an admin key, and exports EPHEMERAL_URL, EPHEMERAL_API_KEY,
# SERVER_PID and SERVER_LOG. Waits on /healthz (polling the server, not sleeping blindly).
start_server() {
    local port; port=$(free_port)
    export EPHEMERAL_URL="http://127.0.0.1:$port"
    export DB="$TEST_TMP/ephemeral.db"
    # Under api_postgres.sh: a database of this test on the PostgreSQL it started instead, the
    # same one each time the test starts a server (as the SQLite file is).
    if [ -n "${EPH_TEST_PG:-}" ]; then
        local name
        name="eph_$(printf '%s' "$TEST_TMP" | md5sum | cut -c1-12)"
        [ "$("$PG_BIN/psql" -X -A -t "${EPH_TEST_PG}postgres" \
            -c "SELECT 1 FROM pg_database WHERE datname = '$name'")" = 1 ] ||
            "$PG_BIN/psql" -X -q "${EPH_TEST_PG}postgres" -c "CREATE DATABASE $name" ||
            fail "cannot create a PostgreSQL database"
        DB="${EPH_TEST_PG}$name"
    fi
    SERVER_LOG="$TEST_TMP/server.log"
    EPHEMERAL_API_KEY=$("$EPHD" admin init --db "$DB") || fail "admin init failed"
    export EPHEMERAL_API_KEY
    "$EPHD" serve --listen "127.0.0.1:$port" --db "$DB" "$@" >>"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    _pids+=("$SERVER_PID")
    for _ in $(seq 600); do
        if curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1; then return 0; fi
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$SERVER_LOG" >&2; fail "server exited"; }
        sleep 0.05
    done
    cat "$SERVER_LOG" >&2
    fail "server did not become healthy"
}

# server_guests PID: the sandbox init processes (ephemeral-init) started by the server PID, found
# by their parent chain, one per line: only that server's, never another's on the same host.
server_guests() {
    local p a
    for p in $(pgrep -f ephemeral-init); do
        a=$p
        while [ "$a" -gt 1 ]; do
            [ "$a" = "$1" ] && { echo "$p"; break; }
            a=$(awk '/^PPid:/ {print $2}' "/proc/$a/status" 2>/dev/null || echo 1)
        done
    done
}

# sandbox_cgroup_parents: the directories this host keeps the namespaces backend's sandbox cgroups
# under (ephemeral/ in each cgroup file system mounted here: the cgroup2 mount with cgroup v2, the
# memory, pids and cpu hierarchies with v1), measured from /proc/self/mountinfo rather than
# assumed, one "TYPE DIRECTORY" per line (TYPE: cgroup or cgroup2). Empty until a sandbox has been
# made on this host.
sandbox_cgroup_parents() {
    local type mnt
    awk '{ for (i = 1; i <= NF; i++) if ($i == "-") {
               if ($(i+1) == "cgroup" || $(i+1) == "cgroup2") print $(i+1), $5; break } }' \
        /proc/self/mountinfo | sort -u | while read -r type mnt; do
        [ -d "$mnt/ephemeral" ] && echo "$type $mnt/ephemeral"
    done
}

# server_cgroups PID: the sandbox cgroups of the server PID that exist, one per line.
server_cgroups() {
    local type parent
    sandbox_cgroup_parents | while read -r type parent; do
        find "$parent" -mindepth 1 -maxdepth 1 -type d -name "*-$1-*"
    done
}

# cgroup_case: which layout the sandbox cgroups have on this host, for a test to say which case it
# checked: "cgroup v2 (DIR)", "cgroup v1 (DIR DIR DIR)", or "no sandbox cgroup".
cgroup_case() {
    local parents
    parents=$(sandbox_cgroup_parents)
    if grep -q '^cgroup2 ' <<<"$parents"; then
        echo "cgroup v2 ($(awk '$1 == "cgroup2" {print $2}' <<<"$parents" | tr '\n' ' ' | sed 's/ $//'))"
    elif [ -n "$parents" ]; then
        echo "cgroup v1 ($(awk '{print $2}' <<<"$parents" | tr '\n' ' ' | sed 's/ $//'))"
    else
        echo "no sandbox cgroup"
    fi
}

# api METHOD PATH [curl args...]: prints the body, then "HTTP <code>" on the last line.
api() {
    local m=$1 p=$2; shift 2
    curl -sS -X "$m" "$EPHEMERAL_URL$p" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
        -w '\nHTTP %{http_code}\n' "$@"
}
