#!/bin/bash
# The tools through the real server (docs/AGENT.md, docs/API.md files): the request's files are in the
# scratch directory before the first turn; write_file, read_file and shell see the same file; a
# path with '..' or an absolute path is refused as a tool error; malformed arguments, an unknown
# tool and an unexpected argument come back to the model as tool errors and the run goes on to
# complete. OpenAI (plain) and Anthropic (streaming).
# All five tools in one run (docs/AGENT.md): a script written executable and run, edited (one match;
# two matches and none refused) and run again with its mode kept, a long output kept as head and
# tail, a command's own timeout, read_file by range, web_fetch through the broker, a rejected call;
# every call is an event whose data holds the call, the exact result the model got and the turn,
# and every answered model call records its turn, request digest and response (docs/AGENT.md).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
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
upstream_start up
five_script() {
    jq -nc --arg u "http://127.0.0.1:$UP_PORT/html" \
        --argjson w "$(call v1 write_file '{"path": "bin/run.sh", "content": "#!/bin/sh\necho first-$1\n", "executable": true}')" \
        --argjson x "$(call v2 shell '{"command": "bin/run.sh a"}')" \
        --argjson long "$(call v3 shell '{"command": "seq 1 20000"}')" \
        --argjson slow "$(call v4 shell '{"command": "echo started; sleep 30", "timeout_seconds": 1}')" \
        --argjson rd "$(call v5 read_file '{"path": "bin/run.sh", "offset": 10, "limit": 5}')" \
        --argjson e0 "$(call v6 edit_file '{"path": "bin/run.sh", "old": "no such text", "new": "x"}')" \
        --argjson e2 "$(call v7 edit_file '{"path": "bin/run.sh", "old": "i", "new": "x"}')" \
        --argjson e1 "$(call v8 edit_file '{"path": "bin/run.sh", "old": "first", "new": "second"}')" \
        --argjson bad "$(call v9 read_file '{"path": "bin/run.sh", "mode": "fast"}')" \
        '[{tool_calls: [$w, $x, $long, $slow, $rd, $e0, $e2, $e1, $bad,
                        {id: "v10", name: "web_fetch", arguments: ({url: $u} | tojson)}]},
          {tool_calls: [{id: "v11", name: "shell", arguments: ({command: "bin/run.sh b; stat -c %a bin/run.sh"} | tojson)}]},
          {text: "five ok"}]'
}
fake_start five "$(five_script)"
fake_start bad_oa "$(bad_script m)"
fake_start bad_an "$(bad_script toolu_m)"
agent_server "$(jq -s . <(fake_model files openai files) <(fake_model bad-oa openai bad_oa) \
    <(fake_model bad-an anthropic bad_an '{"stream": true}') <(fake_model five openai five))" \
    '' '{"broker": {"web_private_cidrs": ["127.0.0.1/32"]}}'

files_id=$(run_create "$(jq -nc '{prompt: "use the files", model: "files", max_cost_micros: 100000,
    files: [{path: "input.txt", content: "hello from the request\n"},
            {path: "sub/data.bin", content_base64: "AAEC/w=="}]}')")
bad_oa_id=$(run_create '{"prompt": "be sloppy", "model": "bad-oa", "max_cost_micros": 100000}')
bad_an_id=$(run_create '{"prompt": "be sloppy", "model": "bad-an", "max_cost_micros": 100000}')
five_id=$(run_create '{"prompt": "use every tool", "model": "five", "web": true, "max_cost_micros": 200000}')

# ---- files ----
run=$(run_wait "$files_id")
assert_eq "$(jq -r .status <<<"$run")" completed "files status ($(jq -c .error <<<"$run"))"
check_settled "$run"
# The model's first command already sees the request's files, text and binary.
assert_eq "$(tool_result files 1 f1 | jq -r .stdout)" "hello from the request
 00 01 02 ff" "files placed before the first turn"
assert_eq "$(tool_result files 2 f2)" '{"ok":true,"bytes":21,"mode":"0644"}' "write_file"
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
# ---- all five tools, and the record ----
run=$(run_wait "$five_id" 90)
assert_eq "$(jq -r .status <<<"$run")" completed "five status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .result <<<"$run")" "five ok" "five result"
check_settled "$run"
assert_eq "$(tool_result five 1 v1 | jq -c .)" '{"ok":true,"bytes":24,"mode":"0755"}' "write_file executable"
assert_eq "$(tool_result five 1 v2 | jq -r .stdout)" "first-a" "the written script runs"
long=$(tool_result five 1 v3 | jq -r .stdout)
assert_contains "$long" "$(printf '1\n2\n3\n')" "long output: the head"
assert_contains "$long" "$(printf '19999\n20000')" "long output: the tail"
assert_contains "$long" "bytes cut …]" "long output: what was cut"
assert_eq "$(tool_result five 1 v4 | jq -c '[.timed_out, .stdout]')" '[true,"started\n"]' "timeout_seconds"
assert_eq "$(tool_result five 1 v5 | jq -c '[.content, .size, .more, .next_offset]')" '["echo ",24,true,15]' "read_file range"
assert_contains "$(tool_result five 1 v6 | jq -r .error)" "not found" "edit_file without a match"
assert_contains "$(tool_result five 1 v7 | jq -r .error)" "appears 2 times" "edit_file with two matches"
assert_eq "$(tool_result five 1 v8 | jq -r .ok)" true "edit_file"
assert_contains "$(tool_result five 1 v9 | jq -r .error)" "unexpected argument 'mode'" "rejected call"
assert_contains "$(tool_result five 1 v10 | jq -r .text)" "Hello & welcome" "web_fetch"
assert_eq "$(tool_result five 2 v11 | jq -r .stdout)" "second-b
755" "the edited script runs, its mode kept"

ev=$(run_events "$five_id")
for c in v1 v2 v3 v4 v5 v6 v7 v8 v9 v10 v11; do
    e=$(jq -c --arg c "$c" '[.data[] | select((.data.call | type) == "object" and .data.call.id == $c)]' <<<"$ev")
    assert_eq "$(jq length <<<"$e")" 1 "one event for $c"
    assert_eq "$(jq -r '.[0].data.result' <<<"$e")" "$(tool_result five "$(jq '.[0].data.turn' <<<"$e")" "$c")" "$c: the recorded result is what the model got"
    assert_eq "$(jq -r '.[0].data.call.arguments' <<<"$e")" \
        "$(fake_requests five | jq -r --arg c "$c" '[.[].body.messages[] | select(.role == "assistant") | .tool_calls[]? | select(.id == $c) | .function.arguments][0]')" \
        "$c: the recorded arguments are the model's"
done
assert_eq "$(jq -c '[.data[] | select((.data.call | type) == "object") | .data.turn]' <<<"$ev")" '[1,1,1,1,1,1,1,1,1,1,2]' "turns"
assert_eq "$(jq -c '[.data[] | select((.data.call | type) == "object") | .type]' <<<"$ev")" \
    '["file.write","shell.command","shell.command","shell.command","file.read","file.edit","file.edit","file.edit","tool.rejected","web.request","shell.command"]' "event types"
assert_eq "$(jq -r '.data[] | select((.data.call | type) == "object" and .data.call.id == "v1") | .message' <<<"$ev")" "wrote bin/run.sh · 24 bytes · executable" "file.write message"
assert_eq "$(jq -r '.data[] | select((.data.call | type) == "object" and .data.call.id == "v5") | .message' <<<"$ev")" "read bin/run.sh · 5 of 24 bytes" "file.read message"
assert_eq "$(jq -r '.data[] | select((.data.call | type) == "object" and .data.call.id == "v8") | .message' <<<"$ev")" "edited bin/run.sh" "file.edit message"
assert_eq "$(jq -r '.data[] | select((.data.call | type) == "object" and .data.call.id == "v9") | .message' <<<"$ev")" "rejected read_file: unexpected argument 'mode'" "tool.rejected message"
mc=$(jq -c '[.data[] | select(.type == "model.call") | .data]' <<<"$ev")
assert_eq "$(jq -c '[.[].turn]' <<<"$mc")" '[1,2,3]' "model.call turns"
assert_eq "$(jq -c '[.[].request_digest | test("^[0-9a-f]{64}$")]' <<<"$mc")" '[true,true,true]' "request digests"
assert_eq "$(jq -c '[(.[0].response.tool_calls | length), .[2].response.text, .[2].response.finish_reason]' <<<"$mc")" '[10,"five ok","stop"]' "recorded responses"
# The digest is of the messages as the agent kept them (before the provider's translation): the
# first turn's holds the system prompt, which states the permissions truthfully.
sys=$(fake_requests five | jq -r '.[0].body.messages[0].content')
assert_contains "$sys" "edit_file, web_fetch" "the prompt names the tools"
assert_contains "$sys" "HTTP_PROXY" "the prompt says how the web is reached"
assert_contains "$sys" "model turns" "the prompt states the turn limit"
echo "tools ok"
