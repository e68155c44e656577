#!/bin/bash
# Crash safety (docs/STORE.md): runs blocked in long commands, the server killed with SIGKILL, a restart:
# every run is settled as failed (worker_lost) for what was measured, no reservation stays held,
# the ledger balances, and no sandbox process or cgroup of the dead server is left.
. "$(dirname "$0")/lib.sh"
[ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ] || skip "no sandbox image (make image)"
cd "$TOP"
# The fixture's long command carries a marker unique to this test run, so that the commands counted
# below are this test's and never those of another test or server on the host. The marker comes
# after the sleep, so that the shell stays (it cannot exec sleep in its place) with it in its
# command line.
marker="eph-crash-$$-$RANDOM$RANDOM"
mkdir -p "$TEST_TMP/sleepy/long"
cp tests/fixtures/sleepy/long/request.json "$TEST_TMP/sleepy/long/"
sed "s/sleep 300/sleep 300; echo $marker/" tests/fixtures/sleepy/long/transcript.jsonl \
    >"$TEST_TMP/sleepy/long/transcript.jsonl"
grep -q "$marker" "$TEST_TMP/sleepy/long/transcript.jsonl" || fail "the fixture has no sleep 300"
cat >"$TEST_TMP/config.json" <<JSON
{"default_model": "replay",
 "models": [{"id": "replay", "provider": "replay", "transcripts": "$TEST_TMP/sleepy",
             "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000}]}
JSON
# The namespaces backend: the checks below find the sandboxes' processes on the host, which
# under gvisor are inside the Sentry (gvisor_sandbox covers a killed caller there).
start_server --config "$TEST_TMP/config.json" --sandbox namespaces
prompt=$(jq -r .prompt tests/fixtures/sleepy/long/request.json)
ids=()
for i in 1 2 3; do
    out=$(api POST /v1/runs -H 'Content-Type: application/json' \
        -d "$(jq -n --arg p "$prompt" '{prompt: $p, max_cost_micros: 50000, timeout_seconds: 600}')")
    assert_eq "${out##*HTTP }" 201 "create $i"
    ids+=("$(head -n 1 <<<"$out" | jq -r .id)")
done
# Wait until every run's command is running in its sandbox (its shell event has not happened yet:
# the command sleeps, so we wait for the model call that issued it).
for id in "${ids[@]}"; do
    for _ in $(seq 200); do
        n=$(api GET "/v1/runs/$id/events" | head -n 1 | jq '[.data[] | select(.type=="model.call")] | length')
        [ "$n" -ge 1 ] && break
        sleep 0.05
    done
    [ "$n" -ge 1 ] || fail "run $id never reached its command"
done
# The model call comes just before its command starts: poll, bounded.
for _ in $(seq 200); do
    [ "$(pgrep -c -f "$marker")" -ge 3 ] && break
    sleep 0.05
done
assert_eq "$(pgrep -c -f "$marker")" 3 "this test's sleeping commands"
old_pid=$SERVER_PID
kill -KILL "$old_pid"
wait "$old_pid" 2>/dev/null
# The sandboxes die with their server (parent-death signal): poll, bounded.
for _ in $(seq 100); do
    [ "$(pgrep -c -f "$marker")" -eq 0 ] && break
    sleep 0.05
done
assert_eq "$(pgrep -c -f "$marker")" 0 "sandbox processes after the server died"

# Restart on the same database.
port=${EPHEMERAL_URL##*:}
"$EPHD" serve --listen "127.0.0.1:$port" --db "$DB" --config "$TEST_TMP/config.json" \
    --sandbox namespaces \
    >>"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
_pids+=("$SERVER_PID")
for _ in $(seq 300); do curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
for id in "${ids[@]}"; do
    run=$(api GET "/v1/runs/$id" | head -n 1)
    assert_eq "$(jq -r .status <<<"$run")" failed "status of $id"
    assert_eq "$(jq -r .error.code <<<"$run")" worker_lost "error of $id"
    assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 50000 "settled $id"
    # What was measured before the crash is charged: the first model call.
    [ "$(jq .cost.model_micros <<<"$run")" -gt 0 ] || fail "measured model cost of $id lost"
    last=$(api GET "/v1/runs/$id/events" | head -n 1 | jq -r '.data[-1].type')
    assert_eq "$last" worker.destroyed "last event of $id"
done
bal=$(api GET /v1/balance | head -n 1)
assert_eq "$(jq .reserved_micros <<<"$bal")" 0 "reservations held"
# The ledger: one reserve, one charge, one release per run; nothing doubled.
for id in "${ids[@]}"; do
    assert_eq "$(sqlite3 "$DB" "SELECT group_concat(kind, ',') FROM (SELECT kind FROM ledger WHERE run_id = '$id' ORDER BY kind)")" \
        "charge,release,reserve" "ledger entries of $id"
done
assert_eq "$(sqlite3 "$DB" "SELECT SUM(CASE kind WHEN 'credit' THEN micros WHEN 'charge' THEN -micros ELSE 0 END) FROM ledger")" \
    "$(jq .balance_micros <<<"$bal")" "balance derived from the ledger"
# No cgroup of the dead server remains (the new one removed them at start-up).
# Where this host keeps them is measured (v1 or v2), and must exist after namespaces sandboxes ran.
[ -n "$(sandbox_cgroup_parents)" ] || fail "no sandbox cgroup directory on this host"
assert_eq "$(server_cgroups "$old_pid" | wc -l)" 0 "cgroups of the dead server ($(cgroup_case))"
assert_eq "$(server_guests "$old_pid" | wc -l)" 0 "guests of the dead server"
grep -q 'worker_lost' "$SERVER_LOG" || grep -q 'recovery' "$SERVER_LOG" || fail "recovery not logged"
echo "3 runs settled after SIGKILL; $(cgroup_case) checked"
