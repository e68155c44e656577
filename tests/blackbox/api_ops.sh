#!/bin/bash
# Operations (docs/CONFIG.md): the configuration comes from the JSON file, the environment overrides the
# file and a flag overrides the environment; an unknown key is refused with a clear error;
# --log-format json writes lines that are each a JSON object with time, level, component and
# message, and no log line holds an API key, a prompt (a canary) or a credential; on SIGTERM the
# server refuses new runs with 503, cancels and settles the running one after the grace period,
# and exits 0.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 120
have_image || skip "no sandbox image (make image)"
DB=$TEST_TMP/ephemeral.db
ADMIN=$("$EPHD" admin init --db "$DB" 2>/dev/null) || fail "admin init"
export EPHEMERAL_API_KEY=$ADMIN

healthy() { curl -fsS "http://$1/healthz" >/dev/null 2>&1; }
# serve_bg LOG [env...] -- [args...]: starts a server in the background; SRV is its PID.
serve_bg() {
    local log=$1
    shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$EPHD" serve --db "$DB" "$@" >>"$log" 2>&1 &
    SRV=$!
    _pids+=("$SRV")
}
wait_healthy() { # ADDR
    for _ in $(seq 300); do
        healthy "$1" && return 0
        kill -0 "$SRV" 2>/dev/null || { cat "$2" >&2; fail "server exited"; }
        sleep 0.05
    done
    fail "server on $1 not healthy"
}
stop_srv() {
    kill -TERM "$SRV"
    wait "$SRV"
}

# Precedence: file < environment < flag, seen through the address the server listens on.
p_file=$(free_port) p_env=$(free_port) p_flag=$(free_port)
api_config "$TEST_TMP/config.json" "\"listen\": \"127.0.0.1:$p_file\""
serve_bg "$TEST_TMP/p1.log" -- --config "$TEST_TMP/config.json"
wait_healthy "127.0.0.1:$p_file" "$TEST_TMP/p1.log"
stop_srv
serve_bg "$TEST_TMP/p2.log" "EPHEMERALD_LISTEN=127.0.0.1:$p_env" -- --config "$TEST_TMP/config.json"
wait_healthy "127.0.0.1:$p_env" "$TEST_TMP/p2.log"
healthy "127.0.0.1:$p_file" && fail "the file's address was used despite the environment"
stop_srv
serve_bg "$TEST_TMP/p3.log" "EPHEMERALD_LISTEN=127.0.0.1:$p_env" -- --config "$TEST_TMP/config.json" \
    --listen "127.0.0.1:$p_flag"
wait_healthy "127.0.0.1:$p_flag" "$TEST_TMP/p3.log"
healthy "127.0.0.1:$p_env" && fail "the environment's address was used despite the flag"
stop_srv
# EPHEMERALD_CONFIG names the file when --config does not.
serve_bg "$TEST_TMP/p4.log" "EPHEMERALD_CONFIG=$TEST_TMP/config.json" --
wait_healthy "127.0.0.1:$p_file" "$TEST_TMP/p4.log"
stop_srv

# Unknown keys, at the top and nested, and bad values: refused at start with a clear message.
for bad in '{"listen": "127.0.0.1:1", "lisen": "x"}' '{"sandbox": {"memroy_mib": 5}}' \
    '{"models": [{"id": "m", "provider": "replay", "temprature": 1}]}' '{"retention_days": "30"}' \
    '{"listen": ' '{"default_model": "nope"}'; do
    printf '%s' "$bad" >"$TEST_TMP/bad.json"
    "$EPHD" serve --db "$DB" --config "$TEST_TMP/bad.json" 2>"$TEST_TMP/bad.err" &
    pid=$!
    _pids+=("$pid")
    wait "$pid"
    rc=$?
    assert_eq "$rc" 2 "exit status for $bad"
    err=$(cat "$TEST_TMP/bad.err")
    assert_contains "$err" "ephemerald: config" "message for $bad"
done
printf '{"lisen": "x"}' >"$TEST_TMP/bad.json"
"$EPHD" serve --db "$DB" --config "$TEST_TMP/bad.json" 2>"$TEST_TMP/bad.err"
assert_contains "$(cat "$TEST_TMP/bad.err")" "unknown key 'lisen'" "the unknown key is named"
printf '{"sandbox": {"memroy_mib": 5}}' >"$TEST_TMP/bad.json"
"$EPHD" serve --db "$DB" --config "$TEST_TMP/bad.json" 2>"$TEST_TMP/bad.err"
assert_contains "$(cat "$TEST_TMP/bad.err")" "unknown key 'sandbox.memroy_mib'" "the nested key is named"

# JSON logs, and what never appears in them. A create with a canary prompt (no recording: it is
# refused, and says why), a member key made over the API, a connection with a credential.
CANARY=prompt-canary-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
CRED=cred-canary-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(free_port)
export EPHEMERAL_URL=http://127.0.0.1:$port
API_GRACE=3 api_config "$TEST_TMP/run.json" '"max_concurrent_runs": 2'
LOG=$TEST_TMP/json.log
serve_bg "$LOG" -- --config "$TEST_TMP/run.json" --listen "127.0.0.1:$port" --log-format json \
    --log-level debug
wait_healthy "127.0.0.1:$port" "$LOG"
SERVER_PID=$SRV
out=$(create_run "$CANARY: do nothing" 20000 -H 'Prefer: wait=30')
assert_eq "$(body_of "$out" | jq -r .error.code)" no_recording "canary run (no recording)"
out=$(api POST /v1/keys -H "Content-Type: application/json" -d '{"role": "member"}')
member=$(body_of "$out" | jq -r .key)
as "$member" api GET /v1/balance >/dev/null
as "eph_$(head -c 40 /dev/zero | tr '\0' Z)" api GET /v1/balance >/dev/null
out=$(api POST /v1/connections -H "Content-Type: application/json" -d "{\"name\": \"c\", \"base_url\": \"https://x.example\", \"headers\": {\"Authorization\": \"$CRED\"}}")
assert_eq "$(code_of "$out")" 201 "connection"
api POST /v1/connections -H "Content-Type: application/json" -d "{\"name\": \"Bad\", \"base_url\": \"https://x.example\", \"headers\": {\"Authorization\": \"$CRED\"}}" >/dev/null

# Graceful shutdown: one run blocked in its command, then SIGTERM.
running=$(new_run "$SLOW_PROMPT" 40000)
wait_command_running "$running"
kill -TERM "$SRV"
# New runs are refused while the server winds down (the grace period is 3 s).
saw503=""
for _ in $(seq 100); do
    out=$(create_run "$QUICK_PROMPT" 1000 -D "$TEST_TMP/503.headers" 2>/dev/null)
    case $(code_of "$out") in
    503)
        saw503=yes
        assert_error "$out" 503 api_error
        grep -qi '^Retry-After: [0-9]' "$TEST_TMP/503.headers" || fail "503 without Retry-After"
        break
        ;;
    201) api POST "/v1/runs/$(body_of "$out" | jq -r .id)/cancel" >/dev/null ;;
    *) fail "during shutdown: $out" ;;
    esac
    sleep 0.02
done
[ -n "$saw503" ] || fail "no 503 while shutting down"
health=$(curl -s -w '\n%{http_code}' "$EPHEMERAL_URL/healthz")
assert_eq "$(tail -n 1 <<<"$health")" 503 "healthz while shutting down"
assert_eq "$(head -n 1 <<<"$health" | jq -r .shutting_down)" true "healthz says why"
wait "$SRV"
rc=$?
assert_eq "$rc" 0 "exit status after SIGTERM"

# Every line is one JSON object with the four fields.
n=0
while IFS= read -r line; do
    n=$((n + 1))
    jq -e 'type == "object" and (.time | type == "string") and (.level | IN("debug","info","warn","error"))
           and (.component | type == "string") and (.message | type == "string")' \
        <<<"$line" >/dev/null 2>&1 || fail "log line $n is not a JSON log object: $line"
done <"$LOG"
[ "$n" -gt 10 ] || fail "only $n log lines"
grep -q "$CANARY" "$LOG" && fail "the prompt is in the log"
grep -q "$CRED" "$LOG" && fail "a credential is in the log"
grep -q "$ADMIN" "$LOG" && fail "the admin key is in the log"
grep -q "$member" "$LOG" && fail "a member key is in the log"
grep -q "eph_ZZZZ" "$LOG" && fail "an unknown key is in the log"
grep -q "${member:8:20}" "$LOG" && fail "part of a member key is in the log"
grep -q "shutting down (grace" "$LOG" || fail "no shutdown line"

# After the restart: the running run was cancelled and settled, nothing is held.
port=$(free_port)
export EPHEMERAL_URL=http://127.0.0.1:$port
serve_bg "$TEST_TMP/after.log" -- --config "$TEST_TMP/run.json" --listen "127.0.0.1:$port"
wait_healthy "127.0.0.1:$port" "$TEST_TMP/after.log"
run=$(api GET "/v1/runs/$running" | sed '$d')
assert_eq "$(jq -r .status <<<"$run")" cancelled "the running run after shutdown"
# A shutdown is not the user's cancel, nor a server error: its own type and code.
assert_eq "$(jq -r '.error.type + " " + .error.code' <<<"$run")" "cancelled_error server_shutdown" \
    "the error of a run cancelled by a shutdown"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 40000 "settled"
assert_eq "$(api GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "nothing reserved"
grep -q "worker_lost" "$TEST_TMP/after.log" && fail "the run was left for recovery"
echo "ops: ok"
