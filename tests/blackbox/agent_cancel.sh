#!/bin/bash
# Cancel during a slow model call through the real server (docs/API.md): the fake model takes 30 s
# to answer (OpenAI: before any byte; Anthropic: a stream that stalls after its first event).
# POST /v1/runs/{id}/cancel answers within a few seconds with the run cancelled: the model call
# was abandoned, the sandbox destroyed, the money settled. The abandoned attempt went out whole,
# so the provider may bill it, and it reported no final usage: it is charged the worst case
# earmarked for it, and its model.call event says "cancelled" and "usage_missing".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

fake_start oa '[{"text": "too late", "delay": 30}]'
fake_start an '[{"text": "too late", "stall_after": 30, "usage": {"input": 1000, "output": 100}}]'
agent_server "$(jq -s . <(fake_model oa openai oa) <(fake_model an anthropic an '{"stream": true}'))"

for m in oa an; do
    id=$(run_create "{\"prompt\": \"wait\", \"model\": \"$m\", \"max_cost_micros\": 100000}")
    # Wait until the model call is in flight: the request is in the fake server's log, and for
    # the stream its first event is on the wire.
    for _ in $(seq 200); do [ -s "$TEST_TMP/$m.log" ] && break; sleep 0.05; done
    [ -s "$TEST_TMP/$m.log" ] || fail "$m: the model was never called"
    if [ "$m" = an ]; then
        for _ in $(seq 200); do [ -s "$TEST_TMP/$m.log.progress" ] && break; sleep 0.05; done
        [ -s "$TEST_TMP/$m.log.progress" ] || fail "$m: the stream never started"
    fi
    assert_eq "$(api GET "/v1/runs/$id" | head -n 1 | jq -r .status)" running "$m running before the cancel"
    t0=$(date +%s%3N)
    out=$(api POST "/v1/runs/$id/cancel" --max-time 20)
    t1=$(date +%s%3N)
    assert_eq "${out##*HTTP }" 200 "$m cancel answer"
    run=$(head -n 1 <<<"$out")
    assert_eq "$(jq -r .status <<<"$run")" cancelled "$m status in the cancel answer"
    # Far below the model's 30 s: the call was abandoned, not waited for (generous bounds, so a
    # loaded machine does not decide the outcome).
    [ $((t1 - t0)) -lt 10000 ] || fail "$m: cancel took $((t1 - t0)) ms"
    created=$(ms_of "$(jq -r .created_at <<<"$run")")
    finished=$(ms_of "$(jq -r .finished_at <<<"$run")")
    [ $((finished - created)) -lt 25000 ] || fail "$m: the run lasted $((finished - created)) ms"
    check_settled "$run"
    ev=$(run_events "$id")
    assert_eq "$(jq -r '[.data[] | .type] | index("sandbox.destroyed") != null' <<<"$ev")" true "$m sandbox destroyed"
    assert_eq "$(jq -r '.data[-2].type' <<<"$ev")" run.cancelled "$m run event"
    assert_eq "$(wc -l <"$TEST_TMP/$m.log")" 1 "$m: one model request"
    call=$(jq -c '[.data[] | select(.type == "model.call")][0].data' <<<"$ev")
    assert_eq "$(jq -r .outcome <<<"$call")" cancelled "$m: the attempt's outcome"
    assert_eq "$(jq .usage_missing <<<"$call")" true "$m: no final usage"
    earmark=$(jq .earmark_micros <<<"$call")
    [ "$earmark" -gt 0 ] || fail "$m: no earmark ($call)"
    assert_eq "$(jq .cost_micros <<<"$call")" "$earmark" "$m: the worst case is charged"
    assert_eq "$(jq .cost.model_micros <<<"$run")" "$earmark" "$m: the run's model cost"
    if [ "$m" = an ]; then
        # message_start reported 1000 input tokens before the stall: shown, but not the whole
        assert_eq "$(jq .input_tokens <<<"$call")" 1000 "$m: the reported input is shown"
    fi
    # Idempotent: cancelling again answers the same settled run.
    again=$(api POST "/v1/runs/$id/cancel" --max-time 20)
    assert_eq "${again##*HTTP }" 200 "$m second cancel"
    assert_eq "$(head -n 1 <<<"$again" | jq -c .cost)" "$(jq -c .cost <<<"$run")" "$m second cancel, same money"
done
echo "cancel ok"
