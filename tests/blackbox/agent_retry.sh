#!/bin/bash
# Retries through the real server (SPEC 8.3): a provider 500 then a success is retried, the
# model.call event shows attempts 2, and every attempt's reported cost is counted: an Anthropic
# stream that reports its input usage and then fails with an error event is paid for as well as
# the attempt that succeeds. A provider that keeps failing fails the run (model_error), settled.
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

run=$(run_wait "$oa_id")
assert_eq "$(jq -r .status <<<"$run")" completed "oa status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .result <<<"$run")" "after the retry" "oa result"
assert_eq "$(wc -l <"$TEST_TMP/oa.log")" 2 "oa requests"
ev=$(run_events "$oa_id" | jq -c '.data[] | select(.type == "model.call") | .data')
assert_eq "$(jq -s length <<<"$ev")" 1 "oa one model call"
assert_eq "$(jq .attempts <<<"$ev")" 2 "oa attempts"
# The 500 reported nothing; the success 1000 in at $1/Mtok + 100 out at $2/Mtok.
assert_eq "$(jq .cost_micros <<<"$ev")" 1200 "oa cost"
assert_eq "$(jq .cost.model_micros <<<"$run")" 1200 "oa model cost"
check_settled "$run"

run=$(run_wait "$an_id")
assert_eq "$(jq -r .status <<<"$run")" completed "an status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .result <<<"$run")" "second attempt" "an result"
assert_eq "$(wc -l <"$TEST_TMP/an.log")" 2 "an requests"
ev=$(run_events "$an_id" | jq -c '.data[] | select(.type == "model.call") | .data')
assert_eq "$(jq .attempts <<<"$ev")" 2 "an attempts"
# First attempt: message_start reported 1000 in and 1 out, then the error event. Second: 1000 in,
# 100 out. Both are paid: 2000 in, 101 out = 2000 + 202 micros.
assert_eq "$(jq .input_tokens <<<"$ev")" 2000 "an input tokens of both attempts"
assert_eq "$(jq .output_tokens <<<"$ev")" 101 "an output tokens of both attempts"
assert_eq "$(jq .cost_micros <<<"$ev")" 2202 "an cost of both attempts"
assert_eq "$(jq .cost.model_micros <<<"$run")" 2202 "an model cost"
check_settled "$run"

run=$(run_wait "$down_id")
assert_eq "$(jq -r .status <<<"$run")" failed "down status"
assert_eq "$(jq -r .error.code <<<"$run")" model_error "down error"
assert_contains "$(jq -r .error.message <<<"$run")" "http 503" "down message"
assert_contains "$(jq -r .error.message <<<"$run")" "after 4 attempts" "down attempts"
assert_eq "$(wc -l <"$TEST_TMP/down.log")" 4 "down requests"
assert_eq "$(jq .cost.model_micros <<<"$run")" 0 "down: nothing reported, nothing charged"
check_settled "$run"
echo "retries ok"
