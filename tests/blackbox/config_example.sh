#!/bin/bash
# ephemerald.example.json documents every configuration key: it must also be a configuration the
# server accepts as it is (flags still override it), and the seed example must run under it.
. "$(dirname "$0")/lib.sh"
[ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ] || skip "no sandbox image (make image)"
cd "$TOP"
# Every key of the file is known to the loader: a stray key would be refused, so compare with a
# copy that has one.
jq '. + {"no_such_key": 1}' ephemerald.example.json >"$TEST_TMP/bad.json"
if "$EPHD" serve --config "$TEST_TMP/bad.json" --listen "127.0.0.1:$(free_port)" \
    --db "$TEST_TMP/bad.db" >"$TEST_TMP/bad.log" 2>&1; then
    fail "an unknown key was accepted"
fi
assert_contains "$(cat "$TEST_TMP/bad.log")" "unknown key 'no_such_key'" "unknown key message"

# init_path in the example is relative to the repository root; the build directory may differ.
jq --arg init "$BUILD/ephemeral-init" '.sandbox.init_path = $init' ephemerald.example.json \
    >"$TEST_TMP/example.json"
start_server --config "$TEST_TMP/example.json"
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
    -d @examples/sandbox-proof/request.json)
assert_eq "${out##*HTTP }" 201 "create under the example configuration"
assert_eq "$(head -n 1 <<<"$out" | jq -r .status)" completed "the seed under the example configuration"
assert_eq "$(head -n 1 <<<"$out" | jq -r .model)" "openai/gpt-6-luna" "the example's default model"
echo "the example configuration serves the seed"
