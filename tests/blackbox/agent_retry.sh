#!/bin/bash
# Retries through the real server (docs/AGENT.md): every attempt is a model.call event and counts
# in usage. A provider 500 then a success: two attempts, the 500 not billed (providers do not bill
# an error status), the success charged its usage. An Anthropic stream that fails with an
# overloaded error event after message_start: the provider may bill the broken attempt and did
# not say how much, so it is charged the worst case earmarked for it (the event says so), then
# the second attempt its usage. A provider that keeps failing: four attempts, then failed
# (model_error), nothing charged, settled.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

fake_start oa '[{"status": 500, "error": "upstream hiccup"},
                {"text": "after the retry", "usage": {"input": 1000, "output": 100}}]'
fake_start an '[{"text": "cut", "stream_error": "Overloaded", "usage": {"input": 1000, "output": 100}},
                {"text": "second attempt", "usage": {"input": 1000, "output": 100}}]'
fake_start down '[{"status": 503, "error": "down"}, {"status": 503, "error": "down"},
                  {"status": 503, "error": "down"}, {"status": 503, "error": "down"},
                  {"text": "never"}]'
agent_server "$(jq -s . <(fake_model oa openai oa) <(fake_model an anthropic an '{"stream": true}') \
    <(fake_model down openai down))"

oa_id=$(run_create '{"prompt": "hello", "model": "oa", "max_cost_micros": 100000}')
an_id=$(run_create '{"prompt": "hello", "model": "an", "max_cost_micros": 100000}')
down_id=$(run_create '{"prompt": "hello", "model": "down", "max_cost_micros": 100000}')

attempts() { run_events "$1" | jq -c '[.data[] | select(.type == "model.call") | .data]'; }

run=$(run_wait "$oa_id")
assert_eq "$(jq -r .status <<<"$run")" completed "oa status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .result <<<"$run")" "after the retry" "oa result"
assert_eq "$(wc -l <"$TEST_TMP/oa.log")" 2 "oa requests"
ev=$(attempts "$oa_id")
assert_eq "$(jq length <<<"$ev")" 2 "oa: one event per attempt"
assert_eq "$(jq -c '[.[] | [.call, .attempt, .outcome]]' <<<"$ev")" '[[1,1,"http_error"],[1,2,"ok"]]' "oa attempts"
assert_eq "$(jq '.[0].http_status' <<<"$ev")" 500 "oa: the first attempt's status"
assert_eq "$(jq '.[0].cost_micros' <<<"$ev")" 0 "oa: an error status is not charged"
# The success: 1000 in at $1/Mtok + 100 out at $2/Mtok.
assert_eq "$(jq '.[1].cost_micros' <<<"$ev")" 1200 "oa cost"
assert_eq "$(jq .cost.model_micros <<<"$run")" 1200 "oa model cost"
assert_eq "$(jq .usage.model_calls <<<"$run")" 1 "oa: one call in usage"
assert_eq "$(jq .usage.model_attempts <<<"$run")" 2 "oa: both attempts in usage"
check_settled "$run"

run=$(run_wait "$an_id")
assert_eq "$(jq -r .status <<<"$run")" completed "an status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .result <<<"$run")" "second attempt" "an result"
assert_eq "$(wc -l <"$TEST_TMP/an.log")" 2 "an requests"
ev=$(attempts "$an_id")
assert_eq "$(jq -c '[.[] | [.attempt, .outcome]]' <<<"$ev")" '[[1,"cut"],[2,"ok"]]' "an attempts"
first=$(jq -c '.[0]' <<<"$ev")
assert_eq "$(jq .usage_missing <<<"$first")" true "an: the cut attempt says its usage is missing"
# Its worst case: the input bound at the dearest input price (1-hour cache writes: twice the
# input price, $2/Mtok) + max_tokens at $2/Mtok, rounded up.
max=$(fake_requests an | jq '.[0].body.max_tokens')
bound=$(jq .input_bound_tokens <<<"$first")
want=$(((bound * 2000000 + max * 2000000 + 999999) / 1000000))
assert_eq "$(jq .max_tokens <<<"$first")" "$max" "an: the event says the max_tokens sent"
assert_eq "$(jq .earmark_micros <<<"$first")" "$want" "an: the earmark is the worst case"
assert_eq "$(jq .cost_micros <<<"$first")" "$want" "an: the cut attempt is charged its earmark"
assert_contains "$(run_events "$an_id" | jq -r '[.data[] | select(.type == "model.call")][0].message')" \
    "worst case charged" "an: the message says so"
# The input bound is never below the truth: at least the request's bytes.
body_bytes=$(fake_requests an | jq -c '.[0].body' | wc -c)
[ "$bound" -ge $((body_bytes - 1)) ] || fail "an: input bound $bound below the body's $body_bytes bytes"
assert_eq "$(jq '.[1].cost_micros' <<<"$ev")" 1200 "an: the second attempt, its usage"
assert_eq "$(jq .cost.model_micros <<<"$run")" "$((want + 1200))" "an model cost"
check_settled "$run"

run=$(run_wait "$down_id")
assert_eq "$(jq -r .status <<<"$run")" failed "down status"
assert_eq "$(jq -r .error.code <<<"$run")" model_error "down error"
assert_contains "$(jq -r .error.message <<<"$run")" "http 503" "down message"
assert_contains "$(jq -r .error.message <<<"$run")" "after 4 attempts" "down attempts"
assert_eq "$(wc -l <"$TEST_TMP/down.log")" 4 "down requests"
ev=$(attempts "$down_id")
assert_eq "$(jq -c '[.[] | .outcome] | unique' <<<"$ev")" '["http_error"]' "down: four http errors"
assert_eq "$(jq length <<<"$ev")" 4 "down: four events"
assert_eq "$(jq .cost.model_micros <<<"$run")" 0 "down: nothing billed, nothing charged"
assert_eq "$(jq .usage.model_calls <<<"$run")" 1 "down: one call in usage"
assert_eq "$(jq .usage.model_attempts <<<"$run")" 4 "down: four attempts in usage"
assert_contains "$(run_events "$down_id" | jq -r '.data[] | select(.type == "run.failed") | .message')" \
    "1 model call (4 attempts)" "down: the closing event counts them apart"
check_settled "$run"
echo "retries ok"
