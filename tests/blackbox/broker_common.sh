# Helpers for the broker's black-box tests (docs/BROKER.md). Source after lib.sh and
# agent_common.sh. Every upstream listens on 127.0.0.1 and is allowed by
# broker.allow_private_cidrs (connections) and broker.web_private_cidrs (web), both
# ["127.0.0.1/32"], unless the test says otherwise; refusals are proved with other loopback forms.
#
#   upstream_start NAME          starts tests/broker_upstream.py; sets UP_PORT; log $TEST_TMP/NAME.up
#   broker_server MODELS [BROKER] [PRICES]
#                                writes the config (with broker.*) and starts ephemerald
#   upstream_requests NAME       the upstream's requests, as one JSON array
#   shell_call ID COMMAND        a tool call of the fake model running COMMAND

upstream_start() { # NAME [upstream args...]
    local name=$1
    shift
    : >"$TEST_TMP/$name.up"
    python3 "$TOP/tests/broker_upstream.py" --log "$TEST_TMP/$name.up" --max-seconds 240 "$@" \
        >"$TEST_TMP/$name.port" 2>>"$TEST_TMP/$name.err" &
    local pid=$!
    _pids+=("$pid")
    UP_PORT=
    for _ in $(seq 200); do
        UP_PORT=$(head -n 1 "$TEST_TMP/$name.port" 2>/dev/null)
        [ -n "$UP_PORT" ] && break
        kill -0 "$pid" 2>/dev/null || fail "upstream $name exited"
        sleep 0.05
    done
    [ -n "$UP_PORT" ] || fail "upstream $name did not start"
}

# A test CA and a certificate for 127.0.0.1 signed by it: $TEST_TMP/ca.pem, server.pem, server.key.
make_test_ca() {
    command -v openssl >/dev/null || skip "openssl is needed for the HTTPS upstream"
    (cd "$TEST_TMP" &&
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=ephemeral test CA" \
            -keyout ca.key -out ca.pem 2>/dev/null &&
        openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key \
            -out server.csr 2>/dev/null &&
        printf 'subjectAltName=IP:127.0.0.1\n' >san.ext &&
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile san.ext -out server.pem 2>/dev/null) || fail "cannot make the test CA"
}

broker_server() { # MODELS [BROKER JSON] [PRICES JSON] [MORE TOP-LEVEL CONFIG JSON]
    local broker=${2:-} prices=${3:-} more=${4:-"{}"}
    [ -n "$broker" ] || broker='{"allow_private_cidrs": ["127.0.0.1/32"], "web_private_cidrs": ["127.0.0.1/32"]}'
    [ -n "$prices" ] || prices='{}'
    jq -n --argjson models "$1" --argjson broker "$broker" --argjson prices "$prices" \
        --argjson more "$more" --arg key "$TEST_TMP/secret.key" \
        '{default_model: $models[0].id, models: $models, broker: $broker,
          secret_key_file: $key} + (if $prices == {} then {} else {prices: $prices} end) + $more' \
        >"$TEST_TMP/config.json" || fail "config"
    start_server --config "$TEST_TMP/config.json" \
        ${EPHEMERAL_TEST_SANDBOX:+--sandbox "$EPHEMERAL_TEST_SANDBOX"}
}

upstream_requests() { jq -s . "$TEST_TMP/$1.up"; }

shell_call() { # ID COMMAND
    jq -nc --arg id "$1" --arg c "$2" '{id: $id, name: "shell", arguments: ({command: $c} | tojson)}'
}
