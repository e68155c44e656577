#!/bin/bash
# Compute exhausting the budget through the real server (docs/MONEY.md): at 100 000 micros per
# sandbox-second a 300 000 micro budget buys about 3 s of sandbox. The model asks for a command
# that sleeps far longer; the sandbox is destroyed at the instant compute would exhaust the
# budget, the run ends budget_exhausted, compute is capped at what model and web leave, and
# charged never passes the reservation.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

price=100000
reserved=300000
marker="30.0$$"
fake_start burn "$(jq -nc --arg c "sleep $marker" '[
    {tool_calls: [{id: "b1", name: "shell", arguments: ({command: $c} | tojson)}],
     usage: {input: 1000, output: 100}},
    {text: "never asked"}]')"
agent_server "$(jq -s . <(fake_model burn openai burn))" "{\"compute_micros_per_second\": $price}"

id=$(run_create "{\"prompt\": \"burn\", \"max_cost_micros\": $reserved, \"timeout_seconds\": 60}")
run=$(run_wait "$id" 30)
assert_eq "$(jq -r .status <<<"$run")" budget_exhausted "status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .error.code <<<"$run")" budget_exhausted "error code"
assert_eq "$(jq -r .error.type <<<"$run")" budget_error "error type"
check_settled "$run"
model=$(jq .cost.model_micros <<<"$run")
web=$(jq .cost.web_micros <<<"$run")
compute=$(jq .cost.compute_micros <<<"$run")
assert_eq "$model" 1200 "model cost"
[ "$compute" -le $((reserved - model - web)) ] || fail "compute $compute over what model and web leave"
# The sandbox lived until compute reached what was left: the whole rest is compute.
assert_eq "$compute" $((reserved - model - web)) "compute up to the limit"
assert_eq "$(jq .cost.charged_micros <<<"$run")" "$reserved" "charged exactly the reservation"

ev=$(run_events "$id")
# The instant compute exhausts the budget: (reserved - model) / price after the sandbox started.
limit_ms=$(((reserved - model) * 1000 / price))
lifetime=$(jq '.data[] | select(.type == "sandbox.destroyed") | .data.lifetime_ms' <<<"$ev")
[ -n "$lifetime" ] || fail "no sandbox.destroyed event"
[ "$lifetime" -ge $((limit_ms - 50)) ] || fail "sandbox destroyed at ${lifetime} ms, before the ${limit_ms} ms compute limit"
[ "$lifetime" -le $((limit_ms + 1000)) ] || fail "sandbox destroyed at ${lifetime} ms, well past the ${limit_ms} ms compute limit"
assert_eq "$(jq -r '[.data[] | select(.type == "shell.command")][0].data.timed_out' <<<"$ev")" true \
    "the command was stopped at the limit"
assert_eq "$(wc -l <"$TEST_TMP/burn.log")" 1 "no model call on an exhausted budget"
if [ "$(jq -r .sandbox.backend <<<"$run")" = namespaces ]; then
    for _ in $(seq 40); do pgrep -f "sleep $marker" >/dev/null || break; sleep 0.05; done
    pgrep -f "sleep $marker" >/dev/null && fail "the command outlived its sandbox"
fi
echo "compute ok ($(jq -r .sandbox.backend <<<"$run")): sandbox destroyed after ${lifetime} ms (limit ${limit_ms} ms)"
