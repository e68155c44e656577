#!/bin/bash
# POST /v1/runs/{id}/cancel (docs/API.md): a run blocked in a long command (the fixture runs
# `sleep 60.123`) is stopped and settled within seconds: status cancelled, the sandbox destroyed, the
# timeline closed, charged + released = reserved and nothing left reserved. Cancelling again, or
# cancelling a finished run, changes nothing. A run still queued behind a busy worker is
# cancelled at once, all of its budget released.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 180
have_image || skip "no sandbox image (make image)"
start_api_server '"max_concurrent_runs": 1'

id=$(new_run "$SLOW_PROMPT" 40000)
wait_command_running "$id"
backend=$(run_field "$id" .sandbox.backend)
# With the namespaces backend the sandbox's processes are host processes: the command really is
# blocked (so that its disappearance below means something). Other backends keep their processes
# out of the host's sight; there the sandbox.destroyed event is the proof.
if [ "$backend" = namespaces ]; then
    wait_until "the command's sleep" 200 pgrep -f '^sleep 60.123$'
fi
t0=$(date +%s%N)
out=$(api POST "/v1/runs/$id/cancel")
t1=$(date +%s%N)
ms=$(((t1 - t0) / 1000000))
echo "cancel answered in $ms ms"
assert_eq "$(code_of "$out")" 200 "cancel"
run=$(body_of "$out")
assert_eq "$(jq -r .status <<<"$run")" cancelled "status in the answer"
[ "$ms" -lt 5000 ] || fail "cancel took $ms ms"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 40000 "charged + released"
assert_eq "$(jq '.cost.model_micros + .cost.web_micros + .cost.compute_micros == .cost.charged_micros' <<<"$run")" true "charged split"
[ "$(jq .cost.charged_micros <<<"$run")" -gt 0 ] || fail "nothing charged for a model call and a sandbox"
assert_eq "$(jq -r .error.code <<<"$run")" cancelled "error code"
assert_eq "$(jq -r .error.type <<<"$run")" cancelled_error "error type: not a request or server error"
[ "$(jq -r .finished_at <<<"$run")" != null ] || fail "no finished_at"
types=$(api GET "/v1/runs/$id/events" | sed '$d' | jq -r '[.data[].type] | join(" ")')
assert_contains "$types" "sandbox.destroyed run.cancelled worker.destroyed" "closing events"
[[ $types == *"worker.destroyed" ]] || fail "timeline does not end with worker.destroyed: $types"
bal=$(api GET /v1/balance | sed '$d')
assert_eq "$(jq .reserved_micros <<<"$bal")" 0 "nothing reserved"
charged=$(jq .cost.charged_micros <<<"$run")
assert_eq "$(jq .balance_micros <<<"$bal")" $((100000000 - charged)) "balance"

# No sandbox process of the run is left (its `sleep 60.123` included).
if [ "$backend" = namespaces ]; then
    wait_until "the sandbox's processes to go" 100 bash -c "! pgrep -f '^sleep 60.123\$' >/dev/null"
fi

# Cancelling again: the same run, nothing changes.
out=$(api POST "/v1/runs/$id/cancel")
assert_eq "$(code_of "$out")" 200 "cancel again"
assert_eq "$(body_of "$out" | jq -c '[.status, .cost, .finished_at]')" \
    "$(jq -c '[.status, .cost, .finished_at]' <<<"$run")" "second cancel"
assert_eq "$(api GET /v1/balance | sed '$d')" "$bal" "balance after the second cancel"

# A finished run: cancel changes nothing.
done_id=$(new_run "$QUICK_PROMPT" 20000)
api GET "/v1/runs/$done_id" -H 'Prefer: wait=30' >/dev/null
before=$(run_field "$done_id" '[.status, .cost, .finished_at, .result] | tostring')
assert_eq "$(jq -r '.[0]' <<<"$before")" completed "quick run"
bal=$(api GET /v1/balance | sed '$d')
out=$(api POST "/v1/runs/$done_id/cancel")
assert_eq "$(code_of "$out")" 200 "cancel a completed run"
assert_eq "$(body_of "$out" | jq -r '[.status, .cost, .finished_at, .result] | tostring')" "$before" "completed run unchanged"
assert_eq "$(api GET /v1/balance | sed '$d')" "$bal" "balance unchanged"
assert_eq "$(api GET "/v1/runs/$done_id/events" | sed '$d' | jq '[.data[] | select(.type == "run.cancelled")] | length')" 0 "no cancel event"

# A queued run (the one worker is busy): cancelled at once, everything released.
busy=$(new_run "$SLOW_PROMPT" 40000)
wait_command_running "$busy"
queued=$(new_run "$QUICK_PROMPT" 20000)
assert_eq "$(run_field "$queued" .status)" queued "behind the busy worker"
t0=$(date +%s%N)
out=$(api POST "/v1/runs/$queued/cancel")
ms=$((($(date +%s%N) - t0) / 1000000))
assert_eq "$(body_of "$out" | jq -r .status)" cancelled "queued run cancelled"
[ "$ms" -lt 2000 ] || fail "cancelling a queued run took $ms ms"
assert_eq "$(body_of "$out" | jq -c '[.cost.charged_micros, .cost.released_micros]')" '[0,20000]' "queued run released"
assert_eq "$(run_field "$busy" .status)" running "the busy run is untouched"
api POST "/v1/runs/$busy/cancel" >/dev/null

# Cancelled while its files are being placed: cancelled (it was failed, files_error). Ten MiB of
# files take a while to place; the cancel is sent the moment the stream shows worker.started, the
# event just before the files are written. Should it land after them, the run is in its long
# command and a cancel there must give the same answer; the message says which moment it hit.
# tests/unit/test_worker_files.c holds the window open with a fake backend, so that moment is
# proved there every time.
python3 - "$TEST_TMP/files.json" "$SLOW_PROMPT" <<'PY'
import base64, json, os, sys
files = [{"path": f"data/f{i}", "content_base64": base64.b64encode(os.urandom(100 * 1024)).decode()}
         for i in range(100)]
json.dump({"prompt": sys.argv[2], "max_cost_micros": 20000, "files": files}, open(sys.argv[1], "w"))
PY
out=$(api POST /v1/runs -H 'Content-Type: application/json' --data-binary "@$TEST_TMP/files.json")
assert_eq "$(code_of "$out")" 201 "a run with ten MiB of files"
placing=$(body_of "$out" | jq -r .id)
while IFS= read -r line; do
    case $line in
    "event: worker.started"*) api POST "/v1/runs/$placing/cancel" >"$TEST_TMP/placing.out"; break ;;
    "event: worker.destroyed"*) break ;;
    esac
done < <(curl -sN --max-time 60 "$EPHEMERAL_URL/v1/runs/$placing/events" \
    -H "Authorization: Bearer $EPHEMERAL_API_KEY" -H 'Accept: text/event-stream')
run=$(api GET "/v1/runs/$placing" -H 'Prefer: wait=30' | sed '$d')
echo "cancelled $(jq -r .error.message <<<"$run")"
assert_eq "$(jq -r '.status + " " + .error.type + " " + .error.code' <<<"$run")" \
    "cancelled cancelled_error cancelled" "a run cancelled while its files were placed ($(jq -c .error <<<"$run"))"
assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 20000 "settled"
assert_eq "$(api GET /v1/balance | sed '$d' | jq .reserved_micros)" 0 "nothing reserved at the end"
echo "cancel: ok"
