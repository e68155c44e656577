#!/bin/bash
# GET /v1/models, and the runs refused at create because they cannot succeed (docs/API.md, "Runs
# that cannot succeed"): a prompt the replay model has no recording of (422 no_recording, naming
# the recordings), a model whose key variable is unset (503 model_unavailable; /healthz lists it
# and stays ready), an unknown model (400 naming the models). Each refusal reserves nothing,
# stores no run, and leaves an idempotency key free.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 90
have_image || skip "no sandbox image (make image)"

unset EPH_TEST_NO_SUCH_KEY
export EPH_TEST_MODEL_KEY=not-a-real-key
cat >"$TEST_TMP/config.json" <<JSON
{"default_model": "replay",
 "models": [
   {"id": "replay", "provider": "replay", "transcripts": "$FIXTURES",
    "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000, "max_output_tokens": 512},
   {"id": "keyless", "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
    "api_key_env": "EPH_TEST_NO_SUCH_KEY",
    "input_micros_per_mtok": 150000, "output_micros_per_mtok": 600000},
   {"id": "keyed", "provider": "anthropic", "base_url": "http://127.0.0.1:9",
    "api_key_env": "EPH_TEST_MODEL_KEY",
    "input_micros_per_mtok": 3000000, "output_micros_per_mtok": 15000000, "max_output_tokens": 4096}]}
JSON
start_server --config "$TEST_TMP/config.json"

# The list: every model, its provider, prices and limit, whether it is available, no key.
out=$(api GET /v1/models)
assert_eq "$(code_of "$out")" 200 "models"
b=$(body_of "$out")
assert_eq "$(jq -r '[.data[].id] | join(",")' <<<"$b")" "replay,keyless,keyed" "model ids"
assert_eq "$(jq -r '[.data[] | .object] | unique | join(",")' <<<"$b")" model "objects"
assert_eq "$(jq -c '[.data[] | select(.default) | .id]' <<<"$b")" '["replay"]' "the default"
assert_eq "$(jq -c '[.data[] | select(.available) | .id]' <<<"$b")" '["replay","keyed"]' "available"
assert_contains "$(jq -r '.data[1].unavailable_reason' <<<"$b")" "EPH_TEST_NO_SUCH_KEY is not set" \
    "why keyless is unavailable"
assert_eq "$(jq -c '.data[2].prices | [.input_micros_per_mtok, .output_micros_per_mtok]' <<<"$b")" \
    "[3000000,15000000]" "prices"
assert_eq "$(jq .data[2].max_output_tokens <<<"$b")" 4096 "limit"
assert_not_contains "$b" "not-a-real-key" "a key in the list"
assert_eq "$(code_of "$(EPHEMERAL_API_KEY=eph_wrong api GET /v1/models)")" 401 "models need a key"

# Readiness reports the keyless model and stays ready for the others.
h=$(curl -sS "$EPHEMERAL_URL/healthz" -w '\nHTTP %{http_code}\n')
assert_eq "$(code_of "$h")" 200 "healthz"
assert_eq "$(body_of "$h" | jq -c '[.models_unavailable[].id]')" '["keyless"]' "healthz models"

before=$(api GET /v1/balance | sed '$d')
refused() { # what status code body [idempotency key]
    local out
    out=$(api POST /v1/runs -H 'Content-Type: application/json' ${5:+-H "Idempotency-Key: $5"} -d "$4")
    assert_eq "$(code_of "$out")" "$2" "$1: status"
    assert_eq "$(body_of "$out" | jq -r .error.code)" "$3" "$1: code"
    body_of "$out" | jq -r .error.message
}
msg=$(refused "no recording" 422 no_recording \
    "$(jq -n '{prompt: "a prompt nobody recorded", max_cost_micros: 20000}')" key-1)
assert_contains "$msg" "has no recording of this prompt" "no recording: message"
for name in quick slow ticker; do
    assert_contains "$msg" "$name" "no recording names the recording '$name'"
done
assert_contains "$msg" "docs/MODELS.md" "no recording points to the docs"
# The same key again: refused again (the first stored nothing), not 409 and not a replay.
refused "no recording, same key" 422 no_recording \
    "$(jq -n '{prompt: "a prompt nobody recorded", max_cost_micros: 20000}')" key-1 >/dev/null
# A run that names a recording (metadata "transcript") that does not exist.
msg=$(refused "no such recording" 422 no_recording \
    "$(jq -n --arg p "$QUICK_PROMPT" '{prompt: $p, max_cost_micros: 20000, metadata: {transcript: "nope"}}')")
assert_contains "$msg" "no recording named 'nope'" "no such recording: message"

msg=$(refused "keyless" 503 model_unavailable \
    "$(jq -n --arg p "$QUICK_PROMPT" '{prompt: $p, model: "keyless", max_cost_micros: 20000}')")
assert_contains "$msg" "EPH_TEST_NO_SUCH_KEY is not set" "keyless: message"

msg=$(refused "unknown model" 400 invalid_parameter \
    "$(jq -n --arg p "$QUICK_PROMPT" '{prompt: $p, model: "gpt-nope", max_cost_micros: 20000}')")
assert_contains "$msg" "'replay', 'keyless', 'keyed'" "unknown model names the models"

assert_eq "$(api GET /v1/balance | sed '$d')" "$before" "nothing reserved by the refusals"
assert_eq "$(api GET /v1/runs | sed '$d' | jq '.data | length')" 0 "no run stored"

# A recorded prompt on the same server is taken.
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Idempotency-Key: key-1' \
    -d "$(jq -n --arg p "$QUICK_PROMPT" '{prompt: $p, max_cost_micros: 20000}')")
assert_eq "$(code_of "$out")" 201 "a recorded prompt, with the key the refusals left free"

# Models from a key: with a provider's key set and no "models" in the configuration, the server
# offers that provider's models beside the replay model, and says so. (Nothing is called: the
# list is all this looks at.)
TEST_TMP=$TEST_TMP/keyed
mkdir -p "$TEST_TMP"
OPENAI_API_KEY=sk-test-not-real start_server
out=$(api GET /v1/models)
b=$(body_of "$out")
assert_eq "$(jq -r '[.data[].id] | join(",")' <<<"$b")" \
    "openai/gpt-6-luna,openai/gpt-4.1,openai/gpt-4.1-mini" "models from OPENAI_API_KEY"
assert_eq "$(jq -r '[.data[] | select(.id | startswith("openai/gpt-4")) | .provider, .available] | unique | join(",")' <<<"$b")" \
    "true,openai" "the key's models are openai models, available"
assert_eq "$(jq -r '.data[] | select(.default) | .id' <<<"$b")" openai/gpt-6-luna \
    "the replay model stays the default"
assert_contains "$(cat "$SERVER_LOG")" "OPENAI_API_KEY is set: offering the model 'openai/gpt-4.1-mini'" \
    "start-up says so"
assert_not_contains "$(cat "$SERVER_LOG")$b" "sk-test-not-real" "the key in the log or the list"
# A configuration with models is the operator's: nothing is added to it.
TEST_TMP=$TEST_TMP/configured
mkdir -p "$TEST_TMP"
ANTHROPIC_API_KEY=sk-ant-not-real OPENAI_API_KEY=sk-test-not-real \
    start_server --config "$(dirname "$TEST_TMP")/../config.json"
assert_eq "$(api GET /v1/models | sed '$d' | jq -r '[.data[].id] | join(",")')" "replay,keyless,keyed" \
    "a configuration's models alone"
echo ok
