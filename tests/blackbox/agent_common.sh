# Helpers for the agent's black-box tests: the real ephemerald, a real sandbox, and the fake model
# server (tests/fake_model_server.py) as the model, speaking the real OpenAI or Anthropic wire
# format. Source it after lib.sh:
#   . "$(dirname "$0")/lib.sh"; . "$(dirname "$0")/agent_common.sh"
#
#   fake_start NAME 'JSON script'      starts a fake server (its PID cleaned up on exit); sets
#                                      FAKE_PORT; its request log is $TEST_TMP/NAME.log
#   fake_model ID PROVIDER NAME [JSON] a "models" entry pointing at fake server NAME (prices and
#                                      other keys merged from the JSON object)
#   agent_server 'MODELS JSON ARRAY' ['PRICES JSON'] ['EXTRA CONFIG JSON']
#                                      writes the config and starts ephemerald with it (on the
#                                      backend $EPHEMERAL_TEST_SANDBOX when set, else auto)
#   run_create 'BODY JSON'             POST /v1/runs; prints the run id
#   run_wait ID [SECONDS]              the run once terminal (Prefer: wait), or fails
#   run_events ID                      the timeline (the JSON list)
#   fake_requests NAME                 the fake server's requests, as one JSON array
#   ms_of ISO-TIME                     milliseconds since the epoch
#   tool_result NAME REQ CALL_ID       the tool result content the model got for CALL_ID in
#                                      request REQ (0-based), in either wire format
set -u
[ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ] || skip "no sandbox image (make image)"
command -v python3 >/dev/null || skip "python3 is needed for the fake model server"
command -v jq >/dev/null || skip "jq is needed"

export FAKE_KEY="fake-key-$RANDOM$RANDOM"

fake_start() { # NAME SCRIPT
    local name=$1 script=$2
    printf '%s\n' "$script" >"$TEST_TMP/$name.script.json"
    : >"$TEST_TMP/$name.log"
    python3 "$TOP/tests/fake_model_server.py" --script "$TEST_TMP/$name.script.json" \
        --log "$TEST_TMP/$name.log" --key "$FAKE_KEY" --max-seconds 180 \
        >"$TEST_TMP/$name.port" 2>>"$TEST_TMP/$name.err" &
    local pid=$!
    _pids+=("$pid")
    for _ in $(seq 200); do
        FAKE_PORT=$(head -n 1 "$TEST_TMP/$name.port" 2>/dev/null)
        [ -n "$FAKE_PORT" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$TEST_TMP/$name.err" >&2; fail "fake server $name exited"; }
        sleep 0.05
    done
    [ -n "$FAKE_PORT" ] || fail "fake server $name did not start"
    eval "FAKE_PORT_$name=$FAKE_PORT"
}

fake_model() { # ID PROVIDER NAME [EXTRA JSON]
    local port extra=${4:-}
    [ -n "$extra" ] || extra='{}'
    eval "port=\$FAKE_PORT_$3"
    jq -nc --arg id "$1" --arg p "$2" --arg url "http://127.0.0.1:$port/v1" \
        --argjson extra "$extra" \
        '{id: $id, provider: $p, base_url: $url, api_key_env: "FAKE_KEY",
          upstream_model: "fake-upstream", input_micros_per_mtok: 1000000,
          output_micros_per_mtok: 2000000, max_output_tokens: 1024, timeout_seconds: 60} + $extra'
}

agent_server() { # MODELS [PRICES] [EXTRA TOP-LEVEL CONFIG]
    local prices=${2:-} extra=${3:-}
    [ -n "$prices" ] || prices='{}'
    [ -n "$extra" ] || extra='{}'
    jq -n --argjson models "$1" --argjson prices "$prices" --argjson extra "$extra" \
        '{default_model: $models[0].id, models: $models} + (if $prices == {} then {} else {prices: $prices} end) + $extra' \
        >"$TEST_TMP/config.json" || fail "config"
    # EPHEMERAL_TEST_SANDBOX=namespaces (or gvisor...) runs the agent's tests on that backend.
    start_server --config "$TEST_TMP/config.json" \
        ${EPHEMERAL_TEST_SANDBOX:+--sandbox "$EPHEMERAL_TEST_SANDBOX"}
}

run_create() { # BODY
    local out
    out=$(api POST /v1/runs -H 'Content-Type: application/json' -d "$1")
    [ "${out##*HTTP }" = 201 ] || fail "create run: $out"
    head -n 1 <<<"$out" | jq -r .id
}

run_wait() { # ID [SECONDS]
    local secs=${2:-60} run status
    local end=$((SECONDS + secs))
    while [ $SECONDS -le $end ]; do
        run=$(api GET "/v1/runs/$1" -H "Prefer: wait=$((end - SECONDS > 0 ? end - SECONDS : 1))" | head -n 1)
        status=$(jq -r .status <<<"$run")
        case $status in completed | failed | timed_out | budget_exhausted | cancelled)
            printf '%s\n' "$run"; return 0 ;;
        esac
    done
    fail "run $1 not finished after ${secs}s (status $status)"
}

run_events() { api GET "/v1/runs/$1/events" | head -n 1; }

fake_requests() { jq -s . "$TEST_TMP/$1.log"; }

ms_of() { date -d "$1" +%s%3N; }

tool_result() { # NAME REQ CALL_ID
    fake_requests "$1" | jq -r --argjson n "$2" --arg id "$3" '
        .[$n].body.messages[] |
        if .role == "tool" and .tool_call_id == $id then .content
        elif .role == "user" and (.content | type) == "array" then
            (.content[] | select(.type == "tool_result" and .tool_use_id == $id) |
             if (.content | type) == "string" then .content else (.content | map(.text) | join("")) end)
        else empty end'
}

# The settled money of a run, checked on the run object and in the ledger (sqlite3 on the test's
# database): charged + released = reserved, charged = model + web + compute, charged <= reserved,
# and the ledger holds one reserve, one charge and one release that say the same.
check_settled() { # RUN_JSON
    local run=$1 id reserved charged released
    id=$(jq -r .id <<<"$run")
    reserved=$(jq .cost.reserved_micros <<<"$run")
    charged=$(jq .cost.charged_micros <<<"$run")
    released=$(jq .cost.released_micros <<<"$run")
    assert_eq "$((charged + released))" "$reserved" "charged + released of $id"
    assert_eq "$(jq '.cost.model_micros + .cost.web_micros + .cost.compute_micros' <<<"$run")" \
        "$charged" "charged split of $id"
    [ "$charged" -le "$reserved" ] || fail "charged $charged over the reservation $reserved"
    [ "$charged" -ge 0 ] && [ "$released" -ge 0 ] || fail "negative money in $id"
    command -v sqlite3 >/dev/null || return 0
    assert_eq "$(sqlite3 "$DB" "SELECT micros FROM ledger WHERE run_id = '$id' AND kind = 'reserve'")" \
        "$reserved" "ledger reserve of $id"
    assert_eq "$(sqlite3 "$DB" "SELECT COALESCE(SUM(micros), 0) FROM ledger WHERE run_id = '$id' AND kind = 'charge'")" \
        "$charged" "ledger charge of $id"
    assert_eq "$(sqlite3 "$DB" "SELECT COALESCE(SUM(micros), 0) FROM ledger WHERE run_id = '$id' AND kind = 'release'")" \
        "$released" "ledger release of $id"
}

# Every request the fake server NAME received is one attempt of run ID, in order, and each went
# out within what the budget allowed at that moment: one model.call event per request, the
# max_tokens the server received is the event's, its worst case (earmark) fits what was left when
# it was authorised, and it was charged no more than that unless the provider reported past the
# bound (above_bound). Prints the events (a JSON array).
check_attempts() { # NAME RUN_ID
    local ev reqs n
    ev=$(run_events "$2" | jq -c '[.data[] | select(.type == "model.call") | .data]')
    reqs=$(fake_requests "$1")
    n=$(jq length <<<"$reqs")
    assert_eq "$(jq length <<<"$ev")" "$n" "$1: one model.call event per request received"
    assert_eq "$(jq -c '[.[] | .body.max_tokens // .body.max_completion_tokens]' <<<"$reqs")" \
        "$(jq -c '[.[] | .max_tokens]' <<<"$ev")" "$1: max_tokens received = authorised"
    assert_eq "$(jq '[.[] | select(.earmark_micros > .available_micros)] | length' <<<"$ev")" 0 \
        "$1: every attempt's worst case fitted what was left"
    assert_eq "$(jq '[.[] | select(.cost_micros > .earmark_micros and (.above_bound | not))] | length' <<<"$ev")" 0 \
        "$1: no attempt charged past its earmark within the bound"
    assert_eq "$(jq -c '[.[] | .attempt]' <<<"$ev")" \
        "$(jq -c '[foreach .[] as $e ({}; .[$e.call | tostring] += 1; .[$e.call | tostring])]' <<<"$ev")" \
        "$1: attempts numbered within each call"
    printf '%s\n' "$ev"
}

# host_backends: the backends this host can run, one word each: namespaces always; gvisor with
# runsc; microvm with QEMU and its disk (then under emulation where there is no KVM).
host_backends() {
    local b="namespaces"
    command -v runsc >/dev/null 2>&1 && b="$b gvisor"
    if command -v qemu-system-x86_64 >/dev/null 2>&1 &&
        [ -f "$(dirname "$(readlink -f "$EPHEMERAL_IMAGE")")/microvm/complete" ]; then
        b="$b microvm"
    fi
    echo "$b"
}

# stop_server: stops the server start_server started and waits for it to exit.
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$SERVER_PID" 2>/dev/null || return 0; sleep 0.05; done
    fail "the server did not stop"
}
