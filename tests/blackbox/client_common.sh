# Sourced by the clients' tests (client_python.sh, client_typescript.sh), after lib.sh and
# api_common.sh.
# Provides: start_client_server, which starts a loopback ephemerald on SQLite with the replay
# model and exports what the clients' suites read: EPHEMERAL_URL, EPHEMERAL_API_KEY (a member
# key), EPHEMERAL_ADMIN_KEY, EPHEMERAL_SEED (the seed example's request) and EPHEMERAL_OPENAPI.
# Webhooks may target 127.0.0.1 (a suite's own receiver) and are retried after 300 ms.

start_client_server() {
    cat >"$TEST_TMP/client-config.json" <<JSON
{"secret_key_file": "$TEST_TMP/secret.key",
 "webhooks": {"allow_private_cidrs": ["127.0.0.1/32"], "retry_base_ms": 300}}
JSON
    start_server --config "$TEST_TMP/client-config.json"
    EPHEMERAL_ADMIN_KEY=$EPHEMERAL_API_KEY
    EPHEMERAL_API_KEY=$("$EPHD" admin key create --db "$DB" --org default --role member) ||
        fail "member key"
    export EPHEMERAL_ADMIN_KEY EPHEMERAL_API_KEY
    export EPHEMERAL_SEED=$TOP/examples/sandbox-proof/request.json
    export EPHEMERAL_OPENAPI=$TOP/docs/openapi.yaml
}
