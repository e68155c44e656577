#!/bin/bash
# The run's deadline through the real server (docs/API.md timeout_seconds, 6.1): the model asks for
# a command that sleeps far past a 6 s limit; the run ends timed_out within a second or two of
# the deadline (a correctness bound on the deadline, measured on the run's own timestamps), the
# command is killed, the sandbox destroyed, the money settled, and the model is not called again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

marker="30.0$$" # sleep 30.0<pid>: a command line no other test has
fake_start slow "$(jq -nc --arg c "sleep $marker" '[
    {tool_calls: [{id: "s1", name: "shell", arguments: ({command: $c} | tojson)}]},
    {text: "never asked"}]')"
agent_server "$(jq -s . <(fake_model slow openai slow))"

id=$(run_create '{"prompt": "sleep", "max_cost_micros": 100000, "timeout_seconds": 6}')
# With the namespaces backend the sandbox's processes are the host's: the command really runs
# (bounded wait, until it shows or the run is over). Other backends hide them in their kernel.
seen=false backend=
for _ in $(seq 200); do
    pgrep -f "sleep $marker" >/dev/null && { seen=true; break; }
    now=$(api GET "/v1/runs/$id" | head -n 1)
    backend=$(jq -r '.sandbox.backend // empty' <<<"$now")
    [ -n "$backend" ] && [ "$backend" != namespaces ] && break
    [ "$(jq -r .finished_at <<<"$now")" != null ] && break
    sleep 0.05
done
[ "$backend" != namespaces ] || $seen || fail "the command never ran on the host"

run=$(run_wait "$id" 20)
assert_eq "$(jq -r .status <<<"$run")" timed_out "status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .error.code <<<"$run")" timeout "error code"
assert_eq "$(jq -r .error.type <<<"$run")" timeout_error "error type"
created=$(ms_of "$(jq -r .created_at <<<"$run")")
finished=$(ms_of "$(jq -r .finished_at <<<"$run")")
took=$((finished - created))
[ "$took" -ge 6000 ] || fail "the run ended before its deadline: ${took} ms"
[ "$took" -lt 8500 ] || fail "the run ended ${took} ms after its creation, past the 6 s deadline + 2.5 s"
check_settled "$run"
assert_eq "$(wc -l <"$TEST_TMP/slow.log")" 1 "the model is not called past the deadline"

ev=$(run_events "$id")
cmd=$(jq -c '[.data[] | select(.type == "shell.command")][0].data' <<<"$ev")
assert_eq "$(jq -r .timed_out <<<"$cmd")" true "the command was killed at the deadline ($cmd)"
[ "$(jq .duration_ms <<<"$cmd")" -lt 6500 ] || fail "the command ran past the deadline: $cmd"
assert_eq "$(jq -r '[.data[] | .type] | index("sandbox.destroyed") != null' <<<"$ev")" true "sandbox destroyed"
assert_eq "$(jq -r '.data[-2].type' <<<"$ev")" run.timed_out "run event"
if [ "$(jq -r .sandbox.backend <<<"$run")" = namespaces ]; then
    for _ in $(seq 40); do pgrep -f "sleep $marker" >/dev/null || break; sleep 0.05; done
    pgrep -f "sleep $marker" >/dev/null && fail "the command outlived its sandbox"
fi
echo "deadline ok ($(jq -r .sandbox.backend <<<"$run")): timed out after ${took} ms"
