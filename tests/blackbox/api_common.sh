# Helpers for the API contract tests (tests/blackbox/api_*.sh). Source after lib.sh:
#   . "$(dirname "$0")/lib.sh"; . "$(dirname "$0")/api_common.sh"
# Not executable: tests/run.sh runs only executable scripts.

cd "$TOP" || fail "no TOP"
FIXTURES=$TOP/tests/fixtures/api_examples
SLOW_PROMPT=$(jq -r .prompt "$FIXTURES/slow/request.json")
QUICK_PROMPT=$(jq -r .prompt "$FIXTURES/quick/request.json")
TICKER_PROMPT=$(jq -r .prompt "$FIXTURES/ticker/request.json")

have_image() {
    [ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ]
}

# A bound on the whole test: past it, the test fails instead of hanging the suite. The watchdog
# is killed (by PID) by lib.sh's cleanup.
test_deadline() { # seconds
    local me=$$
    # The watchdog's own sleep dies with it (the trap), so that no stray timer outlives the test.
    (
        trap 'kill "$sp" 2>/dev/null; exit 0' TERM
        sleep "$1" &
        sp=$!
        wait "$sp" || exit 0
        echo "FAIL: test took longer than $1 s" >&2
        kill -TERM "$me"
    ) &
    _pids+=("$!")
}

# api_config FILE [extra top-level JSON, e.g. '"max_body_bytes": 1024']: a config whose replay
# model reads the API fixtures, with a short shutdown grace ($API_GRACE, default 1 s) so that
# stopping a server with a run blocked in a fixture's long command is quick.
api_config() {
    local file=$1 extra=${2:-}
    [ -n "$extra" ] && extra=", $extra"
    cat >"$file" <<JSON
{"default_model": "openai/gpt-6-luna",
 "secret_key_file": "$TEST_TMP/secret.key",
 "shutdown_grace_seconds": ${API_GRACE:-1},
 "models": [{"id": "openai/gpt-6-luna", "provider": "replay", "transcripts": "$FIXTURES",
             "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000,
             "max_output_tokens": 256}]$extra}
JSON
}

# start_api_server [extra top-level JSON] [serve args...]: start_server with api_config.
start_api_server() {
    local extra=${1:-}
    shift || true
    api_config "$TEST_TMP/config.json" "$extra"
    start_server --config "$TEST_TMP/config.json" "$@"
}

# Splitting api's output: the body (all but the last line) and the status (the last line).
body_of() { sed '$d' <<<"$1"; }
code_of() { tail -n 1 <<<"$1" | sed 's/^HTTP //'; }

# create_run PROMPT MAX_COST [curl args...]: POST /v1/runs; prints api's output.
create_run() {
    local prompt=$1 cost=$2
    shift 2
    api POST /v1/runs -H 'Content-Type: application/json' \
        -d "$(jq -cn --arg p "$prompt" --argjson c "$cost" '{prompt: $p, max_cost_micros: $c}')" "$@"
}

# new_run PROMPT MAX_COST: creates a run (201 expected) and prints its id.
new_run() {
    local out
    out=$(create_run "$1" "$2")
    [ "$(code_of "$out")" = 201 ] || fail "create run: $out"
    body_of "$out" | jq -r .id
}

# run_field ID JQ: a field of the run object.
run_field() {
    api GET "/v1/runs/$1" | sed '$d' | jq -r "$2"
}

# wait_until DESCRIPTION TRIES CMD...: polls CMD every 50 ms until it succeeds.
wait_until() {
    local what=$1 tries=$2
    shift 2
    for _ in $(seq "$tries"); do
        "$@" && return 0
        sleep 0.05
    done
    fail "timed out waiting for $what"
}

run_has_event() { # ID TYPE
    api GET "/v1/runs/$1/events" | sed '$d' |
        jq -e --arg t "$2" '[.data[] | select(.type == $t)] | length > 0' >/dev/null
}

# Waits until the run's command is executing in its sandbox (the model asked for it).
wait_command_running() { # ID
    wait_until "run $1 to reach its command" 400 run_has_event "$1" model.call
    wait_until "run $1 to be running" 200 run_status_is "$1" running
}
run_status_is() { [ "$(run_field "$1" .status)" = "$2" ]; }

# assert_error OUTPUT STATUS TYPE [PARAM]: the answer has the docs/API.md error shape.
assert_error() {
    local out=$1 status=$2 type=$3 param=${4:-}
    local body
    body=$(body_of "$out")
    assert_eq "$(code_of "$out")" "$status" "status of: $body"
    jq -e '(.error | type == "object") and (.error.type | type == "string") and
           (.error.code | type == "string") and (.error.message | type == "string") and
           (.error.request_id | type == "string" and test("^req_[0-9a-f]{16}$")) and
           (keys == ["error"])' <<<"$body" >/dev/null || fail "error shape: $body"
    assert_eq "$(jq -r .error.type <<<"$body")" "$type" "error type of: $body"
    local msg
    msg=$(jq -r .error.message <<<"$body")
    # Lowercase, no full stop at the end (docs/API.md).
    [[ $msg != *. ]] || fail "message ends with a full stop: $msg"
    [ "${msg:0:1}" = "$(tr '[:upper:]' '[:lower:]' <<<"${msg:0:1}")" ] || fail "message not lowercase: $msg"
    if [ -n "$param" ]; then
        assert_eq "$(jq -r .error.param <<<"$body")" "$param" "error param of: $body"
    fi
}

# A second org with its own admin key: prints the key.
new_org() { # NAME [CREDIT_MICROS]
    if [ -n "${2:-}" ]; then
        "$EPHD" admin init --db "$DB" --org "$1" --credit-micros "$2" 2>/dev/null
    else
        "$EPHD" admin init --db "$DB" --org "$1" 2>/dev/null
    fi
}

# as KEY CMD...: runs CMD with another API key.
as() {
    local key=$1
    shift
    EPHEMERAL_API_KEY=$key "$@"
}
