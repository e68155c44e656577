#!/bin/bash
# The tools through the real server (SPEC 8.1, 8.2, 3.1 files): the request's files are in the
# scratch directory before the first turn; write_file, read_file and shell see the same file; a
# path with '..' or an absolute path is refused as a tool error; malformed arguments, an unknown
# tool and an unexpected argument come back to the model as tool errors and the run goes on to
# complete. OpenAI (plain) and Anthropic (streaming).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
cd "$TOP"

call() { jq -nc --arg id "$1" --arg n "$2" --arg a "$3" '{id: $id, name: $n, arguments: $a}'; }
fake_start files "$(jq -nc --argjson c1 "$(call f1 shell '{"command": "cat input.txt; od -An -tx1 sub/data.bin"}')" \
    --argjson w "$(call f2 write_file '{"path": "out.txt", "content": "written by the model\n"}')" \
    --argjson r "$(call f3 read_file '{"path": "out.txt"}')" \
    --argjson c2 "$(call f4 shell '{"command": "cat out.txt; stat -c %U:%s out.txt"}')" \
    --argjson up "$(call f5 read_file '{"path": "../../../etc/passwd"}')" \
    --argjson up2 "$(call f6 write_file '{"path": "sub/../../escape.txt", "content": "x"}')" \
    --argjson abs "$(call f7 read_file '{"path": "/etc/passwd"}')" \
    --argjson c3 "$(call f8 shell '{"command": "ls ..; test -e ../escape.txt && echo ESCAPED; true"}')" \
    '[{tool_calls: [$c1]}, {tool_calls: [$w, $r, $c2, $up, $up2, $abs, $c3]}, {text: "files ok"}]')"

bad_script() { # ID_PREFIX
    jq -nc --argjson m1 "$(call "${1}1" shell '{"command": "echo hi')" \
        --argjson m2 "$(call "${1}2" launch_missiles '{"target": "moon"}')" \
        --argjson m3 "$(call "${1}3" shell '{"cmd": "ls"}')" \
        --argjson m4 "$(call "${1}4" shell '["echo", "array"]')" \
        --argjson m5 "$(call "${1}5" shell '{"command": 42}')" \
        --argjson m6 "$(call "${1}6" web_fetch '{"url": "https://example.com"}')" \
        --argjson ok "$(call "${1}7" shell '{"command": "echo recovered-$((40+2))"}')" \
        '[{tool_calls: [$m1, $m2, $m3, $m4, $m5, $m6]}, {tool_calls: [$ok]}, {text: "recovered"}]'
}
fake_start bad_oa "$(bad_script m)"
fake_start bad_an "$(bad_script toolu_m)"
agent_server "$(jq -s . <(fake_model files openai files) <(fake_model bad-oa openai bad_oa) \
    <(fake_model bad-an anthropic bad_an '{"stream": true}'))"

files_id=$(run_create "$(jq -nc '{prompt: "use the files", model: "files", max_cost_micros: 100000,
    files: [{path: "input.txt", content: "hello from the request\n"},
            {path: "sub/data.bin", content_base64: "AAEC/w=="}]}')")
bad_oa_id=$(run_create '{"prompt": "be sloppy", "model": "bad-oa", "max_cost_micros": 100000}')
bad_an_id=$(run_create '{"prompt": "be sloppy", "model": "bad-an", "max_cost_micros": 100000}')

# ---- files ----
run=$(run_wait "$files_id")
assert_eq "$(jq -r .status <<<"$run")" completed "files status ($(jq -c .error <<<"$run"))"
check_settled "$run"
# The model's first command already sees the request's files, text and binary.
assert_eq "$(tool_result files 1 f1 | jq -r .stdout)" "hello from the request
 00 01 02 ff" "files placed before the first turn"
assert_eq "$(tool_result files 2 f2)" '{"ok":true}' "write_file"
assert_eq "$(tool_result files 2 f3 | jq -r .content)" "written by the model" "read_file"
assert_eq "$(tool_result files 2 f4 | jq -r .stdout)" "written by the model
worker:21" "shell sees the written file"
for c in f5 f6 f7; do
    r=$(tool_result files 2 "$c")
    assert_contains "$(jq -r .error <<<"$r")" "invalid path" "$c refused"
done
r=$(tool_result files 2 f8 | jq -r .stdout)
assert_not_contains "$r" "ESCAPED" "nothing written outside the scratch directory"
assert_contains "$r" "scratch" "ls .."
assert_eq "$(jq .usage.shell_commands <<<"$run")" 3 "files shell commands"

# ---- malformed calls ----
for m in bad-oa bad-an; do
    name=${m/-/_}
    p=m
    [ "$m" = bad-an ] && p=toolu_m
    id=$bad_oa_id
    [ "$m" = bad-an ] && id=$bad_an_id
    run=$(run_wait "$id")
    assert_eq "$(jq -r .status <<<"$run")" completed "$m status ($(jq -c .error <<<"$run"))"
    assert_eq "$(jq -r .result <<<"$run")" recovered "$m result"
    assert_eq "$(jq .usage.model_calls <<<"$run")" 3 "$m model calls"
    # Only the valid call ran.
    assert_eq "$(jq .usage.shell_commands <<<"$run")" 1 "$m shell commands"
    check_settled "$run"
    assert_contains "$(tool_result "$name" 1 "${p}1" | jq -r .error)" "arguments are not valid JSON" "$m malformed"
    assert_contains "$(tool_result "$name" 1 "${p}2" | jq -r .error)" "unknown tool 'launch_missiles'" "$m unknown tool"
    assert_contains "$(tool_result "$name" 1 "${p}3" | jq -r .error)" "unexpected argument 'cmd'" "$m unexpected argument"
    assert_contains "$(tool_result "$name" 1 "${p}4" | jq -r .error)" "must be a JSON object" "$m not an object"
    assert_contains "$(tool_result "$name" 1 "${p}5" | jq -r .error)" "must be a string" "$m wrong type"
    assert_contains "$(tool_result "$name" 1 "${p}6" | jq -r .error)" "unknown tool 'web_fetch'" "$m web off"
    assert_eq "$(tool_result "$name" 2 "${p}7" | jq -r .stdout)" "recovered-42" "$m recovered"
    if [ "$m" = bad-an ]; then
        # Tool errors say so in Anthropic's format; a real result does not.
        assert_eq "$(fake_requests "$name" | jq -c '[.[1].body.messages[] | select(.role == "user") | .content[] | select(.type == "tool_result") | .is_error]')" \
            '[true,true,true,true,true,true]' "$m is_error on tool errors"
        assert_eq "$(fake_requests "$name" | jq -c '[.[2].body.messages[-1].content[] | select(.tool_use_id == "toolu_m7") | has("is_error")]')" \
            '[false]' "$m no is_error on a result"
        # tool_use.input must be an object: the malformed call comes back as {} (docs/MODELS.md).
        assert_eq "$(fake_requests "$name" | jq -c '[.[1].body.messages[] | select(.role == "assistant") | .content[] | select(.id == "toolu_m1") | .input]')" \
            '[{}]' "$m malformed input sent back as {}"
    else
        # OpenAI keeps the raw arguments string as the model wrote it.
        assert_eq "$(fake_requests "$name" | jq -r '.[1].body.messages[] | select(.role == "assistant") | .tool_calls[] | select(.id == "m1") | .function.arguments')" \
            '{"command": "echo hi' "$m raw arguments sent back"
    fi
done
echo "tools ok"
