#!/bin/bash
# The agent loop through the real server (docs/AGENT.md): a model on the fake server asks for two
# shell calls, then one, then answers. Each tool result reaches the model under the right
# tool_call_id / tool_use_id with the real output of the sandbox, the key reaches the provider,
# the money adds up from the reported usage. OpenAI and Anthropic, plain and streaming.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

# The commands print what only a real shell computes, so a recorded answer cannot pass.
script() { # ID_PREFIX
    jq -nc --arg p "$1" '[
      {tool_calls: [{id: ($p + "a"), name: "shell", arguments: "{\"command\": \"echo alpha-$((6*7))\"}"},
                    {id: ($p + "b"), name: "shell", arguments: "{\"command\": \"whoami; pwd\"}"}],
       usage: {input: 1000, output: 100}},
      {tool_calls: [{id: ($p + "c"), name: "shell", arguments: "{\"command\": \"echo gamma-$((2+3)) >&2; exit 3\"}"}],
       usage: {input: 1000, output: 100}},
      {text: "all done: alpha-42", usage: {input: 1000, output: 100}}]'
}
fake_start oa_plain "$(script call_)"
fake_start oa_stream "$(script call_)"
fake_start an_plain "$(script toolu_)"
fake_start an_stream "$(script toolu_)"
agent_server "$(jq -s . <(fake_model oa-plain openai oa_plain) \
    <(fake_model oa-stream openai oa_stream '{"stream": true}') \
    <(fake_model an-plain anthropic an_plain) \
    <(fake_model an-stream anthropic an_stream '{"stream": true}'))"

declare -A ids
for m in oa-plain oa-stream an-plain an-stream; do
    ids[$m]=$(run_create "$(jq -nc --arg m "$m" '{prompt: "compute things", model: $m,
        max_cost_micros: 100000, timeout_seconds: 60}')")
done

for m in oa-plain oa-stream an-plain an-stream; do
    name=${m/-/_}
    prefix=call_
    [[ $m == an-* ]] && prefix=toolu_
    run=$(run_wait "${ids[$m]}")
    assert_eq "$(jq -r .status <<<"$run")" completed "$m status ($(jq -c .error <<<"$run"))"
    assert_eq "$(jq -r .result <<<"$run")" "all done: alpha-42" "$m result"
    assert_eq "$(jq .usage.model_calls <<<"$run")" 3 "$m model calls"
    assert_eq "$(jq .usage.shell_commands <<<"$run")" 3 "$m shell commands"
    assert_eq "$(jq .usage.input_tokens <<<"$run")" 3000 "$m input tokens"
    assert_eq "$(jq .usage.output_tokens <<<"$run")" 300 "$m output tokens"
    # 1000 input tokens at $1/Mtok + 100 output tokens at $2/Mtok = 1200 micros a call.
    assert_eq "$(jq .cost.model_micros <<<"$run")" 3600 "$m model cost"
    check_settled "$run"

    reqs=$(fake_requests "$name")
    assert_eq "$(jq length <<<"$reqs")" 3 "$m requests"
    assert_eq "$(jq '[.[].auth_ok] | all' <<<"$reqs")" true "$m key sent"
    assert_eq "$(jq '[.[].body.model] | unique' -c <<<"$reqs")" '["fake-upstream"]' "$m upstream name"
    if [[ $m == *-stream ]]; then
        assert_eq "$(jq '[.[].body.stream] | all' <<<"$reqs")" true "$m asked for a stream"
    else
        assert_eq "$(jq '[.[].body | has("stream")] | any' <<<"$reqs")" false "$m plain"
    fi
    if [[ $m == oa-* ]]; then
        assert_eq "$(jq -r '.[0].body.messages[0].role' <<<"$reqs")" system "$m system prompt"
        assert_eq "$(jq -c '[.[0].body.tools[].function.name]' <<<"$reqs")" \
            '["shell","read_file","write_file","edit_file"]' "$m tools"
        # The assistant turn comes back with its calls, under their ids.
        assert_eq "$(jq -c '[.[1].body.messages[] | select(.role == "assistant") | .tool_calls[].id]' <<<"$reqs")" \
            '["call_a","call_b"]' "$m assistant calls"
    else
        assert_contains "$(jq -r '.[0].body.system' <<<"$reqs")" "sandbox" "$m system prompt"
        assert_eq "$(jq -c '[.[0].body.tools[].name]' <<<"$reqs")" \
            '["shell","read_file","write_file","edit_file"]' "$m tools"
        assert_eq "$(jq -c '[.[1].body.messages[] | select(.role == "assistant") | .content[] | select(.type == "tool_use") | [.id, .input.command]]' <<<"$reqs")" \
            '[["toolu_a","echo alpha-$((6*7))"],["toolu_b","whoami; pwd"]]' "$m assistant calls"
    fi
    # The real outputs, under the right ids.
    a=$(tool_result "$name" 1 "${prefix}a")
    assert_eq "$(jq -c . <<<"$a")" '{"exit_code":0,"stdout":"alpha-42\n","stderr":""}' "$m result a"
    b=$(tool_result "$name" 1 "${prefix}b")
    jq -e '.exit_code == 0 and (.stdout | test("^worker\n/tmp/ephemeral-run-[A-Za-z0-9]{6}/scratch\n$"))' \
        <<<"$b" >/dev/null || fail "$m result b: $b"
    assert_eq "$(tool_result "$name" 1 "${prefix}c")" "" "$m c not yet asked"
    c=$(tool_result "$name" 2 "${prefix}c")
    assert_eq "$(jq -c . <<<"$c")" '{"exit_code":3,"stdout":"","stderr":"gamma-5\n"}' "$m result c"
    # Earlier results are still in the conversation of the last call.
    assert_eq "$(tool_result "$name" 2 "${prefix}a" | jq -r .stdout)" "alpha-42" "$m history"

    ev=$(run_events "${ids[$m]}")
    assert_eq "$(jq -r '[.data[] | select(.type == "model.call" or .type == "shell.command") | .type] | join(" ")' <<<"$ev")" \
        "model.call shell.command shell.command model.call shell.command model.call" "$m timeline"
    assert_eq "$(jq -r '[.data[] | select(.type == "model.call") | .data.cost_micros] | add' <<<"$ev")" 3600 \
        "$m event costs"
    assert_eq "$(jq -r '[.data[] | select(.type == "model.call") | .data.replayed] | any' <<<"$ev")" false "$m not replayed"
    assert_eq "$(jq -r '[.data[] | select(.type == "shell.command") | .data.exit_code] | join(",")' <<<"$ev")" "0,0,3" "$m exit codes"
    assert_eq "$(jq -r '.data[-1].type' <<<"$ev")" worker.destroyed "$m last event"
    jq -e '[.data[].type] | index("sandbox.destroyed") != null' <<<"$ev" >/dev/null || fail "$m sandbox destroyed"
done
echo "tool loop ok: openai and anthropic, plain and streaming"
