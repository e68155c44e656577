#!/bin/bash
# The seed scenario (docs/API.md) on a server whose sandbox is gvisor (`serve --sandbox gvisor`): the
# run completes with the real outputs of its four steps (worker, the scratch directory, curl's
# "Could not resolve host", `ls -l` of /tmp/proof.txt), the timeline names the backend
# ("gVisor sandbox ready" ... "gVisor sandbox destroyed"), and nothing of the sandbox is left.
. "$(dirname "$0")/gvisor_common.sh"
cd "$TOP"
start_server --sandbox gvisor
grep -q 'sandbox backend: gvisor' "$SERVER_LOG" || fail "the server did not choose gvisor: $(cat "$SERVER_LOG")"
EPHEMERAL_API_KEY=$("$EPHD" admin key create --db "$DB" --org default --role member) ||
    fail "member key"
export EPHEMERAL_API_KEY

cd examples/sandbox-proof
out=$(curl -X POST "$EPHEMERAL_URL/v1/runs" \
  -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
  -H "Content-Type: application/json" \
  -H "Idempotency-Key: $(uuidgen)" \
  -d @request.json -sS -w '\nHTTP %{http_code}')
cd "$TOP"
assert_eq "${out##*HTTP }" 201 "create status"
id=$(jq -r .id <<<"${out%$'\n'HTTP *}")
run=$(curl -sS "$EPHEMERAL_URL/v1/runs/$id" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
    -H 'Prefer: wait=90')
assert_eq "$(jq -r .status <<<"$run")" completed "final status ($(jq -c .error <<<"$run"))"

events=$(curl -sS "$EPHEMERAL_URL/v1/runs/$id/events" -H "Authorization: Bearer $EPHEMERAL_API_KEY")
assert_eq "$(jq -r '.data[] | select(.type=="sandbox.ready") | .message' <<<"$events")" \
    "gVisor sandbox ready" "sandbox.ready message"
assert_eq "$(jq -r '.data[] | select(.type=="sandbox.destroyed") | .message' <<<"$events")" \
    "gVisor sandbox destroyed" "sandbox.destroyed message"
shell_out=$(jq -r '.data[] | select(.type=="shell.command") | .data.stdout + .data.stderr' <<<"$events")
assert_contains "$shell_out" "worker" "whoami"
grep -qE '^/tmp/ephemeral-run-[A-Za-z0-9]{6}/scratch$' <<<"$shell_out" || fail "pwd: $shell_out"
assert_contains "$shell_out" "2 3 5 7 11 13 17 19 23 29 31 37 41 43 47" "primes"
assert_contains "$shell_out" "curl: (6) Could not resolve host: example.com" "no network"
grep -qE '^-rw-r--r-- 1 worker worker 14 .* /tmp/proof.txt$' <<<"$shell_out" || fail "ls: $shell_out"
result=$(jq -r .result <<<"$run")
assert_contains "$result" "/tmp/proof.txt created; ls -l: -rw-r--r-- 1 worker worker 14" "result ls"
assert_contains "$result" "The network call did not succeed." "result sentence"
# A command's live output (shell.output) comes before it ends, under its call; the shape is the
# seed's without them.
seq=$(jq -r '[.data[] | select(.source != "model" and .type != "shell.output") | .type] | join(" ")' <<<"$events")
jq -e '[.data[] | select(.type == "shell.output" or .type == "shell.command")] |
    all(.[] | select(.type == "shell.output"); .data.call as $c |
        any($ARGS.named.all[]; .type == "shell.command" and .data.call.id == $c))' \
    --argjson all "$(jq -c '[.data[] | select(.type == "shell.command")]' <<<"$events")" \
    <<<"$events" >/dev/null || fail "a shell.output of no command"
assert_eq "$seq" "run.queued sandbox.ready worker.started shell.command shell.command shell.command shell.command sandbox.destroyed run.completed worker.destroyed" "timeline"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 40000 "balance"

# Nothing of this server's sandbox is left while it still runs: no bundle, cgroup or runsc.
for d in /run/ephemeral/gvisor/*-"$SERVER_PID"-gv* /sys/fs/cgroup/*/ephemeral/*-"$SERVER_PID"-gv*; do
    [ -e "$d" ] && fail "left behind: $d"
done
if ps -eo args= | grep -v grep | grep -q "/run/ephemeral/gvisor/[a-z]*-$SERVER_PID-gv"; then
    fail "a runsc process of this server is still running"
fi
echo "seed run $id completed on gvisor: $(jq -c .cost <<<"$run")"
