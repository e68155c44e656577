#!/bin/bash
# Sandboxes a caller drives (docs/SANDBOXES.md) through the real server. On every backend this
# host has: created and waited on until ready, a command's exit code, output, cwd, env and stdin,
# a file put, read back byte for byte and listed, deleted (stopped, charged + released = reserved,
# the sandbox's processes gone). On namespaces, the rules: a second command while one runs is
# 409 sandbox_busy; a command streams its output as Server-Sent Events; paths that leave the
# writable areas, or pass through a symlink out of them, are 400; an upload over the cap is 413;
# unknown, other-org and ended sandboxes are 404 and 409; a budget below the minimum is 402 with
# nothing reserved; the idle timeout, the time limit and the budget each end a sandbox (the budget
# cuts a running command); an idempotent create makes one sandbox; a zero-data-retention
# sandbox's command, output and file are nowhere in the database; a server that stops ends its
# sandboxes (server_shutdown); background commands run beside
# others, are followed by id, streamed, and killed with their whole group; and kill -9 of the server
# settles a live sandbox worker_lost at the next start, destroyed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/api_common.sh"
cd "$TOP"
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"
export EPHEMERAL_MICROVM_ALLOW_TCG=1
J=(-H 'Content-Type: application/json')

# sbx_create BODY [curl args]: creates a sandbox, waits until it is ready; prints its object.
sbx_create() {
    local out
    out=$(api POST /v1/sandboxes "${J[@]}" -H 'Prefer: wait=120' -d "$1" "${@:2}")
    [ "$(code_of "$out")" = 201 ] || fail "create: $out"
    body_of "$out"
}
# sbx_exec ID BODY: a command, waited for; prints the answer and its status.
sbx_exec() { api POST "/v1/sandboxes/$1/commands" "${J[@]}" -H 'Prefer: wait=120' -d "$2"; }
sbx_get() { api GET "/v1/sandboxes/$1" | sed '$d'; }
sbx_status_is() { [ "$(sbx_get "$1" | jq -r .status)" = "$2" ]; }
sbx_events() { api GET "/v1/sandboxes/$1/events" | sed '$d'; }

config() { # extra top-level JSON
    cat >"$TEST_TMP/config.json" <<JSON
{"secret_key_file": "$TEST_TMP/secret.key", "shutdown_grace_seconds": 1,
 "prices": {"compute_micros_per_second": 100},
 "sandboxes": {"max_upload_bytes": 1048576, "max_live_per_org": 4}${1:+, $1}}
JSON
}

# ---- every backend: the life of a sandbox ----
for b in $(host_backends); do
    # No warm pool: its idle guests would be counted as outliving the sandbox below.
    config "\"sandbox\": {\"backend\": \"$b\", \"warm_pool\": 0}"
    start_server --config "$TEST_TMP/config.json"
    sbx=$(sbx_create '{"max_cost_micros": 200000, "metadata": {"team": "qa"}}')
    id=$(jq -r .id <<<"$sbx")
    [[ $id =~ ^sbx_[0-9a-f]{32}$ ]] || fail "$b: id $id"
    assert_eq "$(jq -r .object <<<"$sbx")" sandbox "$b: object"
    assert_eq "$(jq -r .status <<<"$sbx")" ready "$b: ready once the wait returns"
    assert_eq "$(jq -r .sandbox.backend <<<"$sbx")" "$b" "$b: backend"
    assert_eq "$(jq -r .permissions.idle_timeout_seconds <<<"$sbx")" 300 "$b: idle default"
    assert_eq "$(jq -r .permissions.timeout_seconds <<<"$sbx")" 300 "$b: time default"
    jq -e '.ready_at != null and (has("prompt") | not) and (has("model") | not)' <<<"$sbx" >/dev/null ||
        fail "$b: shape: $sbx"

    out=$(sbx_exec "$id" '{"command": "echo out-$FOO; echo err >&2; pwd; id -u; exit 3", "env": {"FOO": "bar"}}')
    assert_eq "$(code_of "$out")" 200 "$b: command answered"
    res=$(body_of "$out")
    assert_eq "$(jq -r .exit_code <<<"$res")" 3 "$b: exit code"
    assert_eq "$(jq -r .stdout <<<"$res" | head -n 1)" out-bar "$b: stdout and env"
    assert_eq "$(jq -r .stderr <<<"$res")" err "$b: stderr"
    [ "$(jq -r .stdout <<<"$res" | sed -n 3p)" != 0 ] || fail "$b: a command ran as root"
    scratch=$(jq -r .stdout <<<"$res" | sed -n 2p)
    metrics=$(curl -fsS "$EPHEMERAL_URL/metrics")
    assert_contains "$metrics" "ephemeral_sandboxes_live 1" "$b: /metrics counts the live sandbox"
    assert_contains "$metrics" 'ephemeral_runs{status="running"} 0' "$b: a sandbox is not a run in /metrics"
    assert_contains "$metrics" 'route="/v1/sandboxes/{id}/commands"' "$b: command requests by route"

    # A file: put (bytes with a NUL and a newline), read back, listed; used by a command.
    printf 'a\0b\nline two\n' >"$TEST_TMP/up.bin"
    out=$(api PUT "/v1/sandboxes/$id/files/data/up.bin" --data-binary "@$TEST_TMP/up.bin")
    assert_eq "$(code_of "$out")" 200 "$b: put ($out)"
    assert_eq "$(body_of "$out" | jq -r .size)" 13 "$b: put size"
    curl -sS -o "$TEST_TMP/down.bin" "$EPHEMERAL_URL/v1/sandboxes/$id/files/data/up.bin" \
        -H "Authorization: Bearer $EPHEMERAL_API_KEY"
    cmp "$TEST_TMP/up.bin" "$TEST_TMP/down.bin" || fail "$b: the bytes came back changed"
    out=$(api GET "/v1/sandboxes/$id/files?path=data")
    assert_eq "$(body_of "$out" | jq -c '[.data[] | [.path, .type, .size]]')" '[["data/up.bin","file",13]]' "$b: listing"
    out=$(sbx_exec "$id" '{"command": "cat; wc -l < up.bin; echo more >> up.bin", "cwd": "data", "stdin": "from stdin\n"}')
    assert_eq "$(body_of "$out" | jq -r .stdout)" "$(printf 'from stdin\n2')" "$b: stdin, cwd, the uploaded file"
    assert_eq "$(body_of "$out" | jq -r .exit_code)" 0 "$b: the worker may change an uploaded file"
    out=$(api GET "/v1/sandboxes/$id/files/$scratch/data/up.bin")
    assert_eq "$(code_of "$out")" 200 "$b: an absolute path in the scratch directory"

    # Delete: stopped, settled, destroyed; idempotent; nothing left running.
    out=$(api DELETE "/v1/sandboxes/$id")
    assert_eq "$(code_of "$out")" 200 "$b: delete"
    wait_until "$b: $id to stop" 400 sbx_status_is "$id" stopped
    final=$(sbx_get "$id")
    jq -e '.error == null and .finished_at != null and .usage.shell_commands == 2' <<<"$final" >/dev/null ||
        fail "$b: stopped: $final"
    check_settled "$final"
    [ "$(jq .cost.compute_micros <<<"$final")" -gt 0 ] || fail "$b: no compute charged: $final"
    types=$(sbx_events "$id" | jq -r '[.data[].type | select(. != "shell.output")] | join(" ")')
    assert_eq "$types" "sandbox.created sandbox.ready worker.started shell.command file.written shell.command sandbox.destroyed sandbox.stopped worker.destroyed" "$b: timeline"
    # The same source as a run's file events (src/agent/tools.c: file.read, file.write, file.edit).
    assert_eq "$(sbx_events "$id" | jq -r '[.data[] | select(.type == "file.written") | .source] | join(" ")')" file \
        "$b: file.written's source is a run's file events' source"
    assert_eq "$(code_of "$(api DELETE "/v1/sandboxes/$id")")" 200 "$b: a second delete"
    assert_error "$(sbx_exec "$id" '{"command": "true"}')" 409 invalid_request_error
    [ -z "$(server_guests "$SERVER_PID")" ] || fail "$b: a guest outlived its sandbox"
    assert_contains "$(curl -fsS "$EPHEMERAL_URL/metrics")" "ephemeral_sandboxes_live 0" "$b: none live after"
    stop_server
    rm -f "$DB"*
done

# ---- namespaces: the rules ----
config '"sandbox": {"backend": "namespaces", "command_timeout_seconds": 120}'
start_server --config "$TEST_TMP/config.json"
id=$(sbx_create '{"max_cost_micros": 500000}' | jq -r .id)

# One command at a time: a second while one runs is refused.
api POST "/v1/sandboxes/$id/commands" "${J[@]}" -H 'Prefer: wait=120' \
    -d '{"command": "echo started; sleep 100"}' >"$TEST_TMP/long.out" &
long=$!
_pids+=("$long")
started() { sbx_events "$id" | jq -e '[.data[] | select(.type == "shell.output" and (.data.text | test("started")))] | length > 0' >/dev/null; }
wait_until "the long command to start" 400 started
out=$(sbx_exec "$id" '{"command": "true"}')
assert_error "$out" 409 invalid_request_error
assert_eq "$(body_of "$out" | jq -r .error.code)" sandbox_busy "busy"
# Files go on meanwhile? No: one call at a time, in order; they wait for the command. Delete ends it.
api DELETE "/v1/sandboxes/$id" >/dev/null
wait "$long" || true
assert_contains "$(cat "$TEST_TMP/long.out")" "HTTP " "the waiting command was answered"
wait_until "$id to stop" 400 sbx_status_is "$id" stopped

id=$(sbx_create '{"max_cost_micros": 500000}' | jq -r .id)
# A command streamed as Server-Sent Events: each line as it comes, then exit with the result.
curl -sS -N "$EPHEMERAL_URL/v1/sandboxes/$id/commands" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
    "${J[@]}" -H 'Accept: text/event-stream' -d '{"command": "echo one; sleep 0.3; echo two >&2; exit 4"}' \
    >"$TEST_TMP/sse" || fail "stream"
assert_contains "$(cat "$TEST_TMP/sse")" $'event: stdout\ndata: {"text":"one\\n","offset":0}' "stdout event"
assert_contains "$(cat "$TEST_TMP/sse")" $'event: stderr\ndata: {"text":"two\\n","offset":0}' "stderr event"
exitline=$(grep -A1 '^event: exit' "$TEST_TMP/sse" | sed -n 2p)
assert_eq "$(jq -r .exit_code <<<"${exitline#data: }")" 4 "exit event"
[ "$(grep -n '^event: exit' "$TEST_TMP/sse" | cut -d: -f1)" -gt "$(grep -n '^event: stderr' "$TEST_TMP/sse" | cut -d: -f1)" ] ||
    fail "exit came before the output: $(cat "$TEST_TMP/sse")"

# Background commands: answered at once, followed by id, streamed, killed (its whole group).
bm="bgmark-$RANDOM$RANDOM"
out=$(sbx_exec "$id" "{\"command\": \"echo a; sleep 0.5; echo b >&2; sleep 0.5; exit 5\", \"background\": true}")
assert_eq "$(code_of "$out")" 202 "background: answered at once"
bg=$(body_of "$out" | jq -r .id)
assert_eq "$(body_of "$out" | jq -r .status)" running "background: running"
out=$(sbx_exec "$id" '{"command": "echo alongside"}')
assert_eq "$(body_of "$out" | jq -r .stdout)" alongside "a command runs while a background one does"
curl -sS -N "$EPHEMERAL_URL/v1/sandboxes/$id/commands/$bg/events" -H "Authorization: Bearer $EPHEMERAL_API_KEY" >"$TEST_TMP/bg.sse" ||
    fail "background stream"
assert_contains "$(cat "$TEST_TMP/bg.sse")" $'event: stdout\ndata: {"text":"a\\n","offset":0}' "background stdout event"
assert_contains "$(cat "$TEST_TMP/bg.sse")" $'event: stderr\ndata: {"text":"b\\n","offset":0}' "background stderr event"
res=$(api GET "/v1/sandboxes/$id/commands/$bg" | sed '$d')
assert_eq "$(jq -c '[.status, .exit_code, .stdout, .stderr, .background]' <<<"$res")" '["exited",5,"a\n","b\n",true]' "background result"
out=$(sbx_exec "$id" "{\"command\": \"sleep 1000; echo $bm\", \"background\": true}")
long=$(body_of "$out" | jq -r .id)
assert_eq "$(api GET "/v1/sandboxes/$id/commands/$long" | sed '$d' | jq -r .status)" running "by id while it runs"
count_marks="printf 'bgm%s' '${bm#bgm}' > /tmp/pat; grep -lFf /tmp/pat /proc/[0-9]*/cmdline 2>/dev/null | wc -l"
assert_eq "$(sbx_exec "$id" "$(jq -nc --arg c "$count_marks" '{command: $c}')" | sed '$d' | jq -r .stdout)" 1 "the background command runs"
out=$(api POST "/v1/sandboxes/$id/commands/$long/kill")
assert_eq "$(code_of "$out")" 200 "kill"
assert_eq "$(body_of "$out" | jq -c '[.status, .signal]')" '["killed",9]' "killed"
assert_eq "$(sbx_exec "$id" "$(jq -nc --arg c "$count_marks" '{command: $c}')" | sed '$d' | jq -r .stdout)" 0 "its whole group is gone"
fg=$(sbx_exec "$id" '{"command": "true"}' | sed '$d' | jq -r .id)
assert_error "$(api POST "/v1/sandboxes/$id/commands/$fg/kill")" 409 invalid_request_error
assert_error "$(api GET "/v1/sandboxes/$id/commands/cmd_000000000000000000000000")" 404 not_found_error
assert_error "$(sbx_exec "$id" '{"command": "true", "background": true, "timeout_seconds": 5}')" 400 invalid_request_error timeout_seconds
assert_error "$(sbx_exec "$id" '{"command": "true", "background": 1}')" 400 invalid_request_error background
for i in $(seq 16); do
    assert_eq "$(code_of "$(sbx_exec "$id" '{"command": "sleep 1000", "background": true}')")" 202 "background $i"
done
out=$(sbx_exec "$id" '{"command": "sleep 1000", "background": true}')
assert_error "$out" 429 rate_limit_error
assert_eq "$(body_of "$out" | jq -r .error.code)" too_many_commands "the 17th"

# Paths: out of the writable areas, dot components, through a symlink out of them.
sbx_exec "$id" '{"command": "ln -s /etc etclink && ln -s /etc/hostname hostlink"}' >/dev/null
for p in '../x' 'a/../../x' './x' '/etc/x' '/tmp' 'a//b'; do
    out=$(api PUT "/v1/sandboxes/$id/files/$p" --data-binary x --path-as-is)
    assert_eq "$(code_of "$out")" 400 "path $p ($out)"
done
assert_error "$(api PUT "/v1/sandboxes/$id/files/etclink/x" --data-binary x)" 400 invalid_request_error path
assert_error "$(api GET "/v1/sandboxes/$id/files/hostlink")" 400 invalid_request_error path
assert_error "$(api GET "/v1/sandboxes/$id/files/etclink/passwd")" 400 invalid_request_error path
assert_error "$(api GET "/v1/sandboxes/$id/files/nothing-here")" 404 not_found_error path
head -c 1048577 /dev/zero >"$TEST_TMP/big"
assert_error "$(api PUT "/v1/sandboxes/$id/files/big" --data-binary "@$TEST_TMP/big")" 413 invalid_request_error
head -c 1048576 /dev/zero >"$TEST_TMP/cap"
assert_eq "$(code_of "$(api PUT "/v1/sandboxes/$id/files/cap" --data-binary "@$TEST_TMP/cap")")" 200 "an upload at the cap"
# Bad commands.
assert_error "$(sbx_exec "$id" '{"command": ""}')" 400 invalid_request_error command
assert_error "$(sbx_exec "$id" '{"command": "true", "shell": true}')" 400 invalid_request_error
assert_error "$(sbx_exec "$id" '{"command": "true", "env": {"A=B": "x"}}')" 400 invalid_request_error env
assert_error "$(sbx_exec "$id" '{"command": "true", "cwd": "../.."}')" 400 invalid_request_error cwd
assert_error "$(sbx_exec "$id" '{"command": "true", "timeout_seconds": 100000}')" 400 invalid_request_error timeout_seconds
# Unknown and other orgs' sandboxes.
assert_error "$(api GET /v1/sandboxes/sbx_00000000000000000000000000000000)" 404 not_found_error
assert_error "$(api GET /v1/sandboxes/run_00000000000000000000000000000000)" 404 not_found_error
other=$(new_org other)
assert_error "$(as "$other" api GET "/v1/sandboxes/$id")" 404 not_found_error
assert_error "$(as "$other" sbx_exec "$id" '{"command": "true"}')" 404 not_found_error
assert_error "$(as "$other" api DELETE "/v1/sandboxes/$id")" 404 not_found_error
assert_eq "$(as "$other" api GET /v1/sandboxes | sed '$d' | jq '.data | length')" 0 "other org lists none"
# A sandbox is not a run, nor a run a sandbox.
assert_error "$(api GET "/v1/runs/$id")" 404 not_found_error
assert_eq "$(api GET /v1/runs | sed '$d' | jq '[.data[] | select(.id | startswith("sbx_"))] | length')" 0 "runs list no sandbox"
# Lists and filters.
assert_eq "$(api GET '/v1/sandboxes?status=ready' | sed '$d' | jq -r '.data[0].id')" "$id" "list ready"
assert_eq "$(api GET '/v1/sandboxes?status=stopped' | sed '$d' | jq '.data | length')" 1 "list stopped"
assert_error "$(api GET '/v1/sandboxes?status=queued')" 400 invalid_request_error status
# A member key creates and drives one too.
member=$(api POST /v1/keys "${J[@]}" -d '{"role": "member"}' | sed '$d' | jq -r .key)
m=$(as "$member" sbx_create '{"max_cost_micros": 5000}' | jq -r .id)
assert_eq "$(as "$member" sbx_exec "$m" '{"command": "echo member"}' | sed '$d' | jq -r .stdout)" member "a member's command"
assert_eq "$(code_of "$(as "$member" api DELETE "/v1/sandboxes/$m")")" 200 "a member's delete"
# Bad creates: nothing reserved.
before=$(api GET /v1/balance | sed '$d' | jq .reserved_micros)
assert_error "$(api POST /v1/sandboxes "${J[@]}" -d '{"max_cost_micros": 999}')" 402 invalid_request_error max_cost_micros
assert_error "$(api POST /v1/sandboxes "${J[@]}" -d '{}')" 400 invalid_request_error max_cost_micros
assert_error "$(api POST /v1/sandboxes "${J[@]}" -d '{"max_cost_micros": 5000, "prompt": "x"}')" 400 invalid_request_error
assert_error "$(api POST /v1/sandboxes "${J[@]}" -d '{"max_cost_micros": 5000, "timeout_seconds": 86401}')" 400 invalid_request_error timeout_seconds
assert_error "$(api POST /v1/sandboxes "${J[@]}" -d '{"max_cost_micros": 5000, "image": "nope"}')" 400 invalid_request_error image
assert_error "$(api POST /v1/sandboxes "${J[@]}" -d '{"max_cost_micros": 999999999999}')" 402 insufficient_balance_error
assert_eq "$(api GET /v1/balance | sed '$d' | jq .reserved_micros)" "$before" "refused creates reserved nothing"
# An idempotent create makes one sandbox.
a=$(api POST /v1/sandboxes "${J[@]}" -H 'Idempotency-Key: sbx-key-1' -d '{"max_cost_micros": 5000}')
b2=$(api POST /v1/sandboxes "${J[@]}" -H 'Idempotency-Key: sbx-key-1' -d '{"max_cost_micros": 5000}')
assert_eq "$(body_of "$b2" | jq -r .id)" "$(body_of "$a" | jq -r .id)" "idempotent create"
assert_eq "$(code_of "$b2")" 200 "replayed"
api DELETE "/v1/sandboxes/$(body_of "$a" | jq -r .id)" >/dev/null
api DELETE "/v1/sandboxes/$id" >/dev/null

# Limits: the idle timeout, the time limit, the budget (which cuts a running command).
idle=$(sbx_create '{"max_cost_micros": 5000, "idle_timeout_seconds": 1}' | jq -r .id)
timed=$(sbx_create '{"max_cost_micros": 5000, "timeout_seconds": 2}' | jq -r .id)
wait_until "the idle sandbox to end" 600 sbx_status_is "$idle" timed_out
assert_eq "$(sbx_get "$idle" | jq -r .error.code)" idle_timeout "idle timeout"
wait_until "the time limit" 600 sbx_status_is "$timed" timed_out
assert_eq "$(sbx_get "$timed" | jq -r .error.code)" timeout "time limit"
check_settled "$(sbx_get "$idle")"
# 100 micros a second: 1,200 micros is 12 seconds of compute.
cut=$(sbx_create '{"max_cost_micros": 1200}' | jq -r .id)
out=$(sbx_exec "$cut" '{"command": "sleep 100", "timeout_seconds": 100}')
res=$(body_of "$out")
assert_eq "$(jq -r .sandbox_ended <<<"$res")" budget_exhausted "the command was cut by the budget ($res)"
wait_until "the budget's end" 400 sbx_status_is "$cut" budget_exhausted
final=$(sbx_get "$cut")
check_settled "$final"
assert_eq "$(jq .cost.charged_micros <<<"$final")" 1200 "charged the whole budget, no more"

# Zero data retention: the caller gets the output, the store keeps none of it.
zm="zdr-mark-$RANDOM$RANDOM"
z=$(sbx_create '{"max_cost_micros": 5000, "zero_data_retention": true}' | jq -r .id)
out=$(sbx_exec "$z" "{\"command\": \"echo ${zm:0:8}''${zm:8}\"}")
assert_eq "$(body_of "$out" | jq -r .stdout)" "$zm" "zdr: the caller gets the output"
printf '%s' "file-$zm" >"$TEST_TMP/z"
api PUT "/v1/sandboxes/$z/files/z-$zm" --data-binary "@$TEST_TMP/z" >/dev/null
assert_eq "$(api GET "/v1/sandboxes/$z/files/z-$zm" | sed '$d')" "file-$zm" "zdr: the file reads back"
api DELETE "/v1/sandboxes/$z" >/dev/null
wait_until "the zdr sandbox to stop" 400 sbx_status_is "$z" stopped
for f in "$DB"*; do
    ! grep -aq "$zm" "$f" || fail "zdr: the mark is in $f"
done
# A server that stops ends its live sandboxes: stopped, server_shutdown, settled.
# (A budget of 1,000 seconds' compute each: these two must outlive a server on a loaded host.)
sd=$(sbx_create '{"max_cost_micros": 100000}' | jq -r .id)
stop_server

# kill -9 with a live sandbox: the next start settles it worker_lost, and its sandbox is gone.
start_server --config "$TEST_TMP/config.json"
final=$(sbx_get "$sd")
assert_eq "$(jq -r '[.status, .error.code] | join(" ")' <<<"$final")" "stopped server_shutdown" "ended by the shutdown"
check_settled "$final"
lost=$(sbx_create '{"max_cost_micros": 100000}' | jq -r .id)
sbx_exec "$lost" '{"command": "true"}' >/dev/null
guests=$(server_guests "$SERVER_PID")
[ -n "$guests" ] || fail "no guest to lose"
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
start_server --config "$TEST_TMP/config.json"
final=$(sbx_get "$lost")
assert_eq "$(jq -r .status <<<"$final")" failed "lost: status"
assert_eq "$(jq -r .error.code <<<"$final")" worker_lost "lost: code"
check_settled "$final"
for g in $guests; do
    wait_until "the lost guest $g to go" 200 bash -c "! kill -0 $g 2>/dev/null"
done
echo "ok: sandboxes on $(host_backends | tr ' ' ',')"
