# Helpers for the broker's black-box tests (docs/BROKER.md). Source after lib.sh and
# agent_common.sh. Every upstream listens on 127.0.0.1 and is allowed by
# broker.allow_private_cidrs ["127.0.0.1/32"]; refusals are proved with other loopback forms.
#
#   upstream_start NAME          starts tests/broker_upstream.py; sets UP_PORT; log $TEST_TMP/NAME.up
#   broker_server MODELS [BROKER] [PRICES]
#                                writes the config (with broker.*) and starts ephemerald
#   upstream_requests NAME       the upstream's requests, as one JSON array
#   shell_call ID COMMAND        a tool call of the fake model running COMMAND

upstream_start() { # NAME
    : >"$TEST_TMP/$1.up"
    python3 "$TOP/tests/broker_upstream.py" --log "$TEST_TMP/$1.up" --max-seconds 240 \
        >"$TEST_TMP/$1.port" 2>>"$TEST_TMP/$1.err" &
    local pid=$!
    _pids+=("$pid")
    UP_PORT=
    for _ in $(seq 200); do
        UP_PORT=$(head -n 1 "$TEST_TMP/$1.port" 2>/dev/null)
        [ -n "$UP_PORT" ] && break
        kill -0 "$pid" 2>/dev/null || fail "upstream $1 exited"
        sleep 0.05
    done
    [ -n "$UP_PORT" ] || fail "upstream $1 did not start"
}

broker_server() { # MODELS [BROKER JSON] [PRICES JSON]
    local broker=${2:-} prices=${3:-}
    [ -n "$broker" ] || broker='{"allow_private_cidrs": ["127.0.0.1/32"]}'
    [ -n "$prices" ] || prices='{}'
    jq -n --argjson models "$1" --argjson broker "$broker" --argjson prices "$prices" \
        --arg key "$TEST_TMP/secret.key" \
        '{default_model: $models[0].id, models: $models, broker: $broker,
          secret_key_file: $key} + (if $prices == {} then {} else {prices: $prices} end)' \
        >"$TEST_TMP/config.json" || fail "config"
    start_server --config "$TEST_TMP/config.json" \
        ${EPHEMERAL_TEST_SANDBOX:+--sandbox "$EPHEMERAL_TEST_SANDBOX"}
}

upstream_requests() { jq -s . "$TEST_TMP/$1.up"; }

shell_call() { # ID COMMAND
    jq -nc --arg id "$1" --arg c "$2" '{id: $id, name: "shell", arguments: ({command: $c} | tojson)}'
}
