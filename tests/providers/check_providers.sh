#!/bin/bash
# make check-providers: one short run against each real provider whose key is in the environment
# (OPENAI_API_KEY, ANTHROPIC_API_KEY), plain and streaming, through the real server and a real
# sandbox. Not part of make test: it needs keys, costs a few cents and talks to the internet.
# Without any key it says so and succeeds.
#
# For each run: completed with the word asked for; every attempt's model.call event reports the
# provider's whole usage (no worst case charged), its input within the bound the budget assumed
# (docs/MONEY.md: the request's bytes plus the overhead) and its output within max_tokens; the
# cost is the usage at the configured prices; the money is settled and adds up.
#
#   CHECK_OPENAI_MODEL (gpt-4.1-mini), CHECK_ANTHROPIC_MODEL (claude-haiku-4-5) and the prices
#   CHECK_*_PRICES ('{"input_micros_per_mtok": N, "output_micros_per_mtok": N}') pick the models;
#   CHECK_OPENAI_BASE_URL / CHECK_ANTHROPIC_BASE_URL a gateway (default: the provider's API).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
export TOP=$top BUILD=${BUILD:-$top/build}
BUILD=$(cd "$BUILD" && pwd)
have=()
[ -n "${OPENAI_API_KEY:-}" ] && have+=(openai)
[ -n "${ANTHROPIC_API_KEY:-}" ] && have+=(anthropic)
if [ ${#have[@]} -eq 0 ]; then
    echo "check-providers: skipped: neither OPENAI_API_KEY nor ANTHROPIC_API_KEY is set"
    exit 0
fi
TEST_TMP=$(mktemp -d /tmp/ephemeral-providers.XXXXXX)
export TEST_TMP
trap 'rm -rf "$TEST_TMP"' EXIT
. "$top/tests/blackbox/lib.sh"
trap '_cleanup; rm -rf "$TEST_TMP"' EXIT
[ -e "${EPHEMERAL_IMAGE:-$top/var/images/default}/bin/sh" ] || fail "no sandbox image: run make image"
. "$top/tests/blackbox/agent_common.sh"

models=()
for p in "${have[@]}"; do
    case $p in
    openai)
        name=${CHECK_OPENAI_MODEL:-gpt-4.1-mini} key=OPENAI_API_KEY url=${CHECK_OPENAI_BASE_URL:-}
        prices=${CHECK_OPENAI_PRICES:-'{"input_micros_per_mtok": 400000, "cached_input_micros_per_mtok": 100000, "output_micros_per_mtok": 1600000}'} ;;
    anthropic)
        name=${CHECK_ANTHROPIC_MODEL:-claude-haiku-4-5} key=ANTHROPIC_API_KEY url=${CHECK_ANTHROPIC_BASE_URL:-}
        prices=${CHECK_ANTHROPIC_PRICES:-'{"input_micros_per_mtok": 1000000, "cached_input_micros_per_mtok": 100000, "output_micros_per_mtok": 5000000}'} ;;
    esac
    for stream in false true; do
        models+=("$(jq -nc --arg id "$p-$stream" --arg p "$p" --arg m "$name" --arg k "$key" \
            --argjson s "$stream" --argjson prices "$prices" --arg url "$url" \
            '{id: $id, provider: $p, upstream_model: $m, api_key_env: $k, stream: $s,
              max_output_tokens: 256, timeout_seconds: 60} + $prices
             + (if $url == "" then {} else {base_url: $url} end)')")
    done
done
agent_server "$(printf '%s\n' "${models[@]}" | jq -s .)"

ok=0
for m in "${models[@]}"; do
    id=$(jq -r .id <<<"$m")
    run_id=$(run_create "{\"prompt\": \"Reply with the single word: ready. Do not use any tool.\", \"model\": \"$id\", \"max_cost_micros\": 50000, \"shell\": false}")
    run=$(run_wait "$run_id" 180)
    check_settled "$run"
    assert_eq "$(jq -r .status <<<"$run")" completed "$id status ($(jq -c .error <<<"$run"))"
    assert_contains "$(jq -r .result <<<"$run" | tr 'A-Z' 'a-z')" ready "$id result"
    ev=$(run_events "$run_id" | jq -c '[.data[] | select(.type == "model.call") | .data]')
    assert_eq "$(jq '[.[] | select(.outcome == "ok")] | length' <<<"$ev")" 1 "$id: one answered attempt"
    assert_eq "$(jq '[.[] | select(.usage_missing)] | length' <<<"$ev")" 0 "$id: the provider reported its usage"
    assert_eq "$(jq '[.[] | select(.above_bound or .input_tokens > .input_bound_tokens or .output_tokens > .max_tokens)] | length' <<<"$ev")" 0 \
        "$id: usage within the bound the budget assumed ($ev)"
    assert_eq "$(jq '[.[] | .cost_micros] | add' <<<"$ev")" "$(jq .cost.model_micros <<<"$run")" "$id model cost"
    echo "check-providers: $id ok: $(jq -c '[.[] | {outcome, input_tokens, input_bound_tokens, output_tokens, max_tokens, cost_micros}]' <<<"$ev")"
    ok=$((ok + 1))
done
echo "check-providers: $ok runs ok (${have[*]})"
