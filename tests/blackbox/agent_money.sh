#!/bin/bash
# Money honest to the cent (docs/AGENT.md, issue 14) through the real server, with the fake model
# server scripted as an adversary, on both wire formats (streaming). For each scenario: the final
# status, every attempt's model.call event, charged <= reserved (settled, in the ledger too), and
# what the fake server received (how many requests, with what max_tokens) never more than the
# budget allowed (check_attempts):
#   cut1      a stream cut after a few events, then a whole one: the cut attempt (sent, no usage)
#             is charged its earmark, the run completes with the second answer
#   cutall    (openai) the stream is always cut: four attempts, each charged its earmark, failed
#   held      a complete answer, then the connection held open for a minute: completed at once,
#             one request (the answer ends at [DONE] / message_stop)
#   slow      one event a second, longer than the 2 s idle timeout: completed, one request
#   quota     429 insufficient_quota: not retried, failed, nothing charged
#   length    finish_reason length forever: continued up to the turn limit (3), then failed
#             model_output_truncated; the continuation carries the cut text and asks for more
#   lenbudget length forever on a budget that lowers max_tokens: budget_exhausted
#   refusal   a refusal: failed model_refused with the refusal's text
#   filter    (openai) finish_reason content_filter: failed model_refused
#   above     a usage far above the bound: charged what was left, the event says above_bound
#   interleave (openai) two tool calls whose deltas alternate between indices: both assembled,
#             each result reaches the model under its id
#   overload  (anthropic) 529 overloaded_error then an answer: retried, the 529 not charged
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

u='"usage": {"input": 100, "output": 10}'
declare -A script
script[cut1]="[{\"text\": \"a long partial answer\", \"pieces\": 6, \"cut_after\": 3, $u},
               {\"text\": \"whole\", $u}]"
script[cutall]="[$(for _ in 1 2 3 4; do printf '{"text": "never whole", "pieces": 6, "cut_after": 3, %s},' "$u"; done)
                 {\"text\": \"never\"}]"
script[held]="[{\"text\": \"held open\", \"hold_open\": 60, $u}]"
script[slow]="[{\"text\": \"one two three four five\", \"pieces\": 5, \"chunk_delay\": 1, $u}]"
script[quota]='[{"status": 429, "error": "You exceeded your current quota", "error_type": "insufficient_quota"},
                {"text": "never"}]'
script[refusal]="[{\"refusal\": \"I will not help with that.\", $u}]"
script[filter]="[{\"text\": \"\", \"finish_reason\": \"content_filter\", $u}]"
script[above]='[{"text": "expensive", "usage": {"input": 1000000000000, "output": 1000000000000}}]'
script[interleave]="[{\"tool_calls\": [{\"id\": \"ca\", \"name\": \"shell\", \"arguments\": \"{\\\"command\\\": \\\"echo alpha\\\"}\"},
                                       {\"id\": \"cb\", \"name\": \"shell\", \"arguments\": \"{\\\"command\\\": \\\"echo beta\\\"}\"}],
                     \"interleave\": true, $u},
                    {\"text\": \"done\", $u}]"
script[overload]="[{\"status\": 529, \"error\": \"Overloaded\", \"error_type\": \"overloaded_error\"},
                   {\"text\": \"after the overload\", $u}]"
length_entry() { # FORMAT: the provider's word for a cut answer
    local w=length
    [ "$1" = anthropic ] && w=max_tokens
    printf '[%s]' "$(for i in 1 2 3 4 5; do printf '{"text": "piece %s, ", "finish_reason": "%s", %s}' "$i" "$w" "$u"; [ $i -lt 5 ] && printf ,; done)"
}

cases=()
models=()
for f in openai anthropic; do
    short=${f:0:2}
    for c in cut1 cutall held slow quota length lenbudget refusal filter above interleave overload; do
        case $f:$c in anthropic:cutall | anthropic:filter | anthropic:interleave | openai:overload) continue ;; esac
        name=${c}_$short
        case $c in length | lenbudget) fake_start "$name" "$(length_entry "$f")" ;;
        *) fake_start "$name" "${script[$c]}" ;;
        esac
        extra='{"stream": true, "input_micros_per_mtok": 1000000, "output_micros_per_mtok": 2000000}'
        case $c in
        slow) extra='{"stream": true, "timeout_seconds": 2}' ;;
        lenbudget) extra='{"stream": true, "input_micros_per_mtok": 0, "output_micros_per_mtok": 1000000, "max_output_tokens": 4096}' ;;
        esac
        models+=("$(fake_model "$name" "$f" "$name" "$extra")")
        cases+=("$name")
    done
done
# Compute at 24 micros a second, so a slow sandbox start on a loaded machine does not decide the
# small budgets; three turns at most.
agent_server "$(printf '%s\n' "${models[@]}" | jq -s .)" '{"compute_micros_per_second": 24}' \
    '{"turn_limit": 3}'

declare -A ids
for name in "${cases[@]}"; do
    budget=200000
    case $name in lenbudget_*) budget=3000 ;; above_*) budget=50000 ;; esac
    ids[$name]=$(run_create "{\"prompt\": \"money $name\", \"model\": \"$name\", \"max_cost_micros\": $budget}")
done

finished() { # NAME: the settled run, its attempts checked; sets RUN and EV
    RUN=$(run_wait "${ids[$1]}" 120)
    check_settled "$RUN"
    EV=$(check_attempts "$1" "${ids[$1]}") || exit 1
}
status_is() { # NAME STATUS [CODE]
    assert_eq "$(jq -r .status <<<"$RUN")" "$2" "$1 status ($(jq -c .error <<<"$RUN"))"
    [ -z "${3:-}" ] || assert_eq "$(jq -r .error.code <<<"$RUN")" "$3" "$1 error code"
}
outcomes() { jq -c '[.[] | .outcome]' <<<"$EV"; }

for f in op an; do
    n=cut1_$f
    finished "$n"
    status_is "$n" completed
    assert_eq "$(jq -r .result <<<"$RUN")" whole "$n result"
    assert_eq "$(outcomes)" '["cut","ok"]' "$n outcomes"
    assert_eq "$(jq '.[0].usage_missing' <<<"$EV")" true "$n: the cut attempt's usage is missing"
    assert_eq "$(jq '.[0].cost_micros == .[0].earmark_micros' <<<"$EV")" true "$n: charged its earmark"
    assert_eq "$(jq '[.[] | .cost_micros] | add' <<<"$EV")" "$(jq .cost.model_micros <<<"$RUN")" "$n: model cost"
    assert_eq "$(jq .usage.model_calls <<<"$RUN")" 1 "$n: one call in usage"
    assert_eq "$(jq .usage.model_attempts <<<"$RUN")" 2 "$n: both attempts in usage"

    n=held_$f
    finished "$n"
    status_is "$n" completed
    assert_eq "$(jq -r .result <<<"$RUN")" "held open" "$n result"
    assert_eq "$(outcomes)" '["ok"]' "$n: one attempt"
    created=$(ms_of "$(jq -r .created_at <<<"$RUN")")
    done_at=$(ms_of "$(jq -r .finished_at <<<"$RUN")")
    [ $((done_at - created)) -lt 45000 ] || fail "$n: waited for the held connection ($((done_at - created)) ms)"

    n=slow_$f
    finished "$n"
    status_is "$n" completed
    assert_eq "$(jq -r .result <<<"$RUN")" "one two three four five" "$n result"
    assert_eq "$(outcomes)" '["ok"]' "$n: one attempt, never cut by the idle timeout"
    [ "$(jq '.[0].latency_ms' <<<"$EV")" -gt 2000 ] || fail "$n: the stream was not longer than the idle timeout"

    n=quota_$f
    finished "$n"
    status_is "$n" failed model_error
    assert_contains "$(jq -r .error.message <<<"$RUN")" "quota" "$n message"
    assert_eq "$(outcomes)" '["http_error"]' "$n: not retried"
    assert_eq "$(jq .cost.model_micros <<<"$RUN")" 0 "$n: nothing charged"

    n=length_$f
    finished "$n"
    status_is "$n" failed model_output_truncated
    assert_eq "$(outcomes)" '["ok","ok","ok"]' "$n: three turns"
    assert_eq "$(jq -r '.[] | .finish_reason' <<<"$EV" | sort -u)" length "$n finish reasons"
    second=$(fake_requests "$n" | jq -c '.[1].body')
    assert_contains "$second" "piece 1, " "$n: the cut text goes back to the model"
    assert_contains "$second" "Continue exactly where it stopped" "$n: the model is asked to continue"
    assert_eq "$(jq .result <<<"$RUN")" null "$n: no result"

    n=lenbudget_$f
    finished "$n"
    status_is "$n" budget_exhausted budget_exhausted
    [ "$(jq '[.[] | .max_tokens] | max' <<<"$EV")" -lt 4096 ] || fail "$n: max_tokens was not lowered"
    assert_eq "$(jq .result <<<"$RUN")" null "$n: a cut answer is never a result"

    n=refusal_$f
    finished "$n"
    status_is "$n" failed model_refused
    assert_contains "$(jq -r .error.message <<<"$RUN")" "I will not help with that." "$n message"

    n=above_$f
    finished "$n"
    status_is "$n" completed
    assert_eq "$(jq '.[0].above_bound' <<<"$EV")" true "$n: the event says above the bound"
    assert_eq "$(jq '.[0].capped_at_reservation' <<<"$EV")" true "$n: capped"
    assert_eq "$(jq .cost.charged_micros <<<"$RUN")" 50000 "$n: everything, never more"
done

n=cutall_op
finished "$n"
status_is "$n" failed model_error
assert_eq "$(outcomes)" '["cut","cut","cut","cut"]' "$n: four attempts"
assert_eq "$(jq '[.[] | select(.cost_micros != .earmark_micros)] | length' <<<"$EV")" 0 "$n: each charged its earmark"
assert_eq "$(jq '[.[] | .cost_micros] | add' <<<"$EV")" "$(jq .cost.model_micros <<<"$RUN")" "$n: model cost"

n=filter_op
finished "$n"
status_is "$n" failed model_refused
assert_contains "$(jq -r .error.message <<<"$RUN")" "content filter" "$n message"

n=interleave_op
finished "$n"
status_is "$n" completed
assert_eq "$(tool_result "$n" 1 ca | jq -r .stdout)" alpha "$n: call a's result"
assert_eq "$(tool_result "$n" 1 cb | jq -r .stdout)" beta "$n: call b's result"

n=overload_an
finished "$n"
status_is "$n" completed
assert_eq "$(outcomes)" '["http_error","ok"]' "$n outcomes"
assert_eq "$(jq '.[0].http_status' <<<"$EV")" 529 "$n status"
assert_eq "$(jq '.[0].cost_micros' <<<"$EV")" 0 "$n: the 529 is not charged"
echo "money ok"
