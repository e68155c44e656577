# Several ephemerald nodes on one PostgreSQL, for the multi-node tests. Source after lib.sh,
# api_common.sh and pg_common.sh. Not executable: tests/run.sh runs only executable scripts.
#
#   multinode_setup [extra config JSON]  PostgreSQL, a database, the config, an admin key
#   start_node NAME [serve args...]      a node named NAME (its lease owner id) on that database
#   napi NAME METHOD PATH [curl args]    api() against one node
#   stop_node NAME / kill_node NAME      SIGTERM (waits) / SIGKILL

multinode_setup() {
    pg_start
    pg_createdb eph_nodes
    DB="${PG_URL}eph_nodes"
    export DB
    # The API fixtures, with a long command of its own (a marker no other test uses), and short
    # leases so that a lost node is noticed within seconds.
    FIXTURES=$TOP/tests/fixtures/multinode
    MARKER="sleep 61.417"
    api_config "$TEST_TMP/config.json" \
        "\"lease_seconds\": ${LEASE:-10}, \"lease_renew_seconds\": 1${1:+, $1}"
    EPHEMERAL_API_KEY=$("$EPHD" admin init --db "$DB") || fail "admin init on PostgreSQL"
    export EPHEMERAL_API_KEY
}

start_node() {
    local name=$1
    shift
    local port
    port=$(free_port)
    EPHEMERALD_NODE_ID=$name "$EPHD" serve --listen "127.0.0.1:$port" --db "$DB" \
        --config "$TEST_TMP/config.json" --sandbox namespaces "$@" \
        >>"$TEST_TMP/node-$name.log" 2>&1 &
    local pid=$!
    _pids+=("$pid")
    printf -v "NODE_URL_$name" '%s' "http://127.0.0.1:$port"
    printf -v "NODE_PID_$name" '%s' "$pid"
    for _ in $(seq 400); do
        curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$TEST_TMP/node-$name.log" >&2; fail "node $name exited"; }
        sleep 0.05
    done
    cat "$TEST_TMP/node-$name.log" >&2
    fail "node $name did not become healthy"
}

node_url() { local v="NODE_URL_$1"; echo "${!v}"; }
node_pid() { local v="NODE_PID_$1"; echo "${!v}"; }

napi() {
    local n=$1
    shift
    EPHEMERAL_URL=$(node_url "$n") api "$@"
}

stop_node() {
    local pid
    pid=$(node_pid "$1")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    wait "$pid" 2>/dev/null
}

kill_node() {
    local pid
    pid=$(node_pid "$1")
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

# Sandboxed commands of the multi-node fixtures still running on this host.
# (Called in this shell: a `bash -c` with the marker in its own command line would count itself.)
sleepers() { pgrep -f "$MARKER" | wc -l; }
no_sleepers() { [ "$(sleepers)" -eq 0 ]; }

# The node that holds (or held) a run's lease.
run_node() { pg_sql eph_nodes "SELECT COALESCE(node_id, '') FROM runs WHERE id = '$1'"; }

# Every run's ledger has exactly one reserve, and a settled one exactly one charge and one
# release; the org's running totals equal the sums over its ledger.
assert_ledger_consistent() {
    assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM (SELECT run_id, kind FROM ledger WHERE run_id IS NOT NULL GROUP BY run_id, kind HAVING COUNT(*) > 1) d")" \
        0 "doubled ledger entries"
    assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM runs r WHERE status IN ('completed','failed','timed_out','budget_exhausted','cancelled') AND (SELECT COUNT(*) FROM ledger l WHERE l.run_id = r.id) <> 3")" \
        0 "settled runs without exactly reserve, charge and release"
    assert_eq "$(pg_sql eph_nodes "SELECT COUNT(*) FROM orgs o WHERE balance_micros <> (SELECT COALESCE(SUM(CASE kind WHEN 'credit' THEN micros WHEN 'charge' THEN -micros ELSE 0 END), 0) FROM ledger WHERE org_id = o.id) OR reserved_micros <> (SELECT COALESCE(SUM(CASE kind WHEN 'reserve' THEN micros WHEN 'credit' THEN 0 ELSE -micros END), 0) FROM ledger WHERE org_id = o.id)")" \
        0 "running totals that disagree with the ledger"
}
