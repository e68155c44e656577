#!/bin/bash
# EPHEMERAL_RUNSC_DEBUG_DIR makes runsc write every command and its output to disk (--debug
# --strace). With it on, the server says so loudly, and a zero-data-retention run is refused
# before any sandbox exists (failed, sandbox_error), leaving nothing of its prompt in the debug
# directory.
. "$(dirname "$0")/gvisor_common.sh"
cd "$TOP"
export EPHEMERAL_RUNSC_DEBUG_DIR=$TEST_TMP/runsc-debug
mkdir -p "$EPHEMERAL_RUNSC_DEBUG_DIR"
start_server --sandbox gvisor
grep -q 'sandbox backend: gvisor' "$SERVER_LOG" || fail "the server did not choose gvisor: $(cat "$SERVER_LOG")"
assert_contains "$(cat "$SERVER_LOG")" "EPHEMERAL_RUNSC_DEBUG_DIR is set: runsc writes every command" "the warning"
EPHEMERAL_API_KEY=$("$EPHD" admin key create --db "$DB" --org default --role member) ||
    fail "member key"
export EPHEMERAL_API_KEY

marker="zdr-debug-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
# The marked prompt has no recording of its own: the run names the seed's recording, so that the
# replay model takes it (a prompt it cannot answer is refused at create).
body=$(jq --arg m "$marker" '.zero_data_retention = true | .prompt = .prompt + " " + $m |
    .metadata = {transcript: "sandbox-proof"}' examples/sandbox-proof/request.json)
out=$(curl -X POST "$EPHEMERAL_URL/v1/runs" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
    -H "Content-Type: application/json" -H "Idempotency-Key: $(uuidgen)" \
    -d "$body" -sS -w '\nHTTP %{http_code}')
assert_eq "${out##*HTTP }" 201 "create status"
id=$(jq -r .id <<<"${out%$'\n'HTTP *}")
run=$(curl -sS "$EPHEMERAL_URL/v1/runs/$id" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
    -H 'Prefer: wait=90')
echo "$run" | jq -c '{status, error}'
assert_eq "$(jq -r .status <<<"$run")" failed "the zero-data-retention run"
assert_eq "$(jq -r .error.code <<<"$run")" sandbox_error "its error code"
assert_contains "$(jq -r .error.message <<<"$run")" "zero data retention is refused" "its error"
events=$(curl -sS "$EPHEMERAL_URL/v1/runs/$id/events" -H "Authorization: Bearer $EPHEMERAL_API_KEY")
assert_eq "$(jq '[.data[] | select(.type == "sandbox.ready")] | length' <<<"$events")" 0 \
    "a sandbox for the refused run"
if grep -rqs -- "$marker" "$EPHEMERAL_RUNSC_DEBUG_DIR"; then
    fail "the refused run's prompt reached the runsc debug directory"
fi
echo ok
