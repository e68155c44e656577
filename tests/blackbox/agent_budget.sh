#!/bin/bash
# The hard limit through the real server (docs/MONEY.md), checked on the run object and in the ledger:
#  - a model that reports absurd usage (10^12 tokens) is charged what was left, never more: the
#    event says capped, nothing more runs, the run ends budget_exhausted;
#  - when even a minimal call cannot fit, no request reaches the model at all;
#  - an answer without usage is charged the worst case that was earmarked for it (max_tokens at
#    the output price, with a free input price so the test can compute it), and the event says so;
#  - max_tokens sent to the model is lowered to what the budget allows, leaving compute for the
#    call itself: checked as a rule against what was left at that moment (read from the event),
#    never as a number that depends on the machine's speed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

fake_start huge '[{"tool_calls": [{"id": "h1", "name": "shell", "arguments": "{\"command\": \"echo never > /dev/null\"}"}],
                   "usage": {"input": 1000000000000, "output": 1000000000000}},
                  {"text": "never asked"}]'
fake_start tiny '[{"text": "never asked"}]'
fake_start nousage '[{"tool_calls": [{"id": "n1", "name": "shell", "arguments": "{\"command\": \"echo counted\"}"}],
                      "usage": null},
                     {"text": "done", "usage": null}]'
fake_start lowered '[{"text": "short", "usage": {"input": 10, "output": 10}}]'
agent_server "$(jq -s . <(fake_model huge openai huge) \
    <(fake_model tiny anthropic tiny '{"input_micros_per_mtok": 1000000000, "output_micros_per_mtok": 1000000000}') \
    <(fake_model nousage openai nousage '{"stream": true, "input_micros_per_mtok": 0, "output_micros_per_mtok": 3000000}') \
    <(fake_model lowered openai lowered '{"input_micros_per_mtok": 0, "output_micros_per_mtok": 1000000, "max_output_tokens": 4096}'))" \
    '{"compute_micros_per_second": 24}'
# (compute at 24 micros a second: the 1000 micros of "lowered" last 40 s of sandbox, so a slow
# sandbox start on a loaded machine does not use them up before the first call)

# Not even a minimal first call fits: refused at create, before anything is reserved (checked
# before any other run exists, so that the balance can move only by the refusal).
before=$(api GET /v1/balance | head -n 1)
out=$(api POST /v1/runs -H 'Content-Type: application/json' \
    -d '{"prompt": "too poor", "model": "tiny", "max_cost_micros": 100}')
assert_eq "${out##*HTTP }" 402 "tiny: refused"
assert_eq "$(head -n 1 <<<"$out" | jq -r .error.code)" budget_too_small "tiny: error code"
assert_eq "$(head -n 1 <<<"$out" | jq -r .error.param)" max_cost_micros "tiny: error param"
assert_contains "$(head -n 1 <<<"$out" | jq -r .error.message)" "costs at least \$" "tiny: the minimum"
least=$(head -n 1 <<<"$out" | jq -r .error.message | sed -n 's/.*(\([0-9]*\) micros.*/\1/p')
[ -n "$least" ] && [ "$least" -gt 100 ] || fail "tiny: the minimum in micros: $out"
assert_eq "$(api GET /v1/balance | head -n 1)" "$before" "tiny: nothing reserved"
# One micro below the minimum is refused too.
out=$(api POST /v1/runs -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"too poor\", \"model\": \"tiny\", \"max_cost_micros\": $((least - 1))}")
assert_eq "${out##*HTTP }" 402 "tiny: one micro short"

huge_id=$(run_create '{"prompt": "spend it all", "model": "huge", "max_cost_micros": 50000}')
nousage_id=$(run_create '{"prompt": "no usage", "model": "nousage", "max_cost_micros": 100000}')
lowered_id=$(run_create '{"prompt": "little money", "model": "lowered", "max_cost_micros": 1000}')

# ---- absurd usage: capped at the reservation ----
run=$(run_wait "$huge_id")
assert_eq "$(jq -r .status <<<"$run")" budget_exhausted "huge status ($(jq -c .error <<<"$run"))"
check_settled "$run"
assert_eq "$(jq .cost.charged_micros <<<"$run")" 50000 "huge: everything left is charged"
assert_eq "$(jq .cost.released_micros <<<"$run")" 0 "huge: nothing released"
assert_eq "$(jq .usage.output_tokens <<<"$run")" 1000000000000 "huge: usage as reported"
ev=$(run_events "$huge_id")
call=$(jq -c '[.data[] | select(.type == "model.call")][0]' <<<"$ev")
assert_eq "$(jq .data.capped_at_reservation <<<"$call")" true "huge: event says capped"
assert_contains "$(jq -r .message <<<"$call")" "capped at the reservation" "huge: message says capped"
assert_eq "$(jq '.data.cost_micros' <<<"$call")" "$(jq .cost.model_micros <<<"$run")" "huge: event cost"
assert_eq "$(wc -l <"$TEST_TMP/huge.log")" 1 "huge: the next call cannot fit"
assert_eq "$(jq .usage.shell_commands <<<"$run")" 0 "huge: no tool runs on a spent budget"

# ---- not even a minimal call fits: refused above, and nothing reached the model ----
assert_eq "$(wc -l <"$TEST_TMP/tiny.log")" 0 "tiny: no request reached the model"

# ---- no usage reported: the worst case ----
run=$(run_wait "$nousage_id")
assert_eq "$(jq -r .status <<<"$run")" completed "nousage status ($(jq -c .error <<<"$run"))"
check_settled "$run"
ev=$(run_events "$nousage_id")
reqs=$(fake_requests nousage)
assert_eq "$(jq length <<<"$reqs")" 2 "nousage requests"
total=0
for n in 0 1; do
    call=$(jq -c --argjson n "$n" '[.data[] | select(.type == "model.call")][$n]' <<<"$ev")
    max=$(jq --argjson n "$n" '.[$n].body.max_tokens' <<<"$reqs")
    [ "$max" -gt 0 ] || fail "nousage: max_tokens $max"
    # input is free here, so the worst case is max_tokens at $3/Mtok, rounded up.
    want=$(((max * 3000000 + 999999) / 1000000))
    assert_eq "$(jq .data.usage_missing <<<"$call")" true "nousage call $n: event says usage_missing"
    assert_eq "$(jq .data.cost_micros <<<"$call")" "$want" "nousage call $n: the worst case charged"
    assert_contains "$(jq -r .message <<<"$call")" "worst case charged" "nousage call $n: message"
    total=$((total + want))
done
assert_eq "$(jq .cost.model_micros <<<"$run")" "$total" "nousage model cost"

# ---- max_tokens lowered to what is left ----
run=$(run_wait "$lowered_id")
assert_eq "$(jq -r .status <<<"$run")" completed "lowered status ($(jq -c .error <<<"$run"))"
check_settled "$run"
max=$(fake_requests lowered | jq '.[0].body.max_tokens')
call=$(run_events "$lowered_id" | jq -c '[.data[] | select(.type == "model.call")][0].data')
# The rule, not a number (how much compute the sandbox used before the call depends on the
# machine): 1000 micros at $1/Mtok of output (input free), so not the model's 4096 tokens; the
# worst case of what was sent fits what was left at that moment (the event says how much), and
# since the sandbox's compute goes on during the call, at most half of what was left stays aside
# for it: the worst case is at least the other half.
avail=$(jq .available_micros <<<"$call")
earmark=$(jq .earmark_micros <<<"$call")
assert_eq "$(jq .max_tokens <<<"$call")" "$max" "lowered: the event says what was sent"
[ "$max" -ge 16 ] && [ "$max" -lt 1000 ] || fail "lowered: max_tokens $max not lowered"
# input is free and output costs 1 micro a token: the worst case is max_tokens micros
assert_eq "$earmark" "$max" "lowered: the earmark is the worst case of what was sent"
[ "$avail" -gt 0 ] && [ "$avail" -le 1000 ] || fail "lowered: available $avail"
[ "$earmark" -le "$avail" ] || fail "lowered: worst case $earmark over what was left, $avail"
[ $((2 * earmark + 1)) -ge "$avail" ] || fail "lowered: worst case $earmark below half of $avail"
echo "budget ok"
