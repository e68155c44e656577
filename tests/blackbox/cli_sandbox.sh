#!/bin/bash
# `ephemeral sandbox` against the real server (docs/CLI.md, "ephemeral sandbox"): create waits
# until ready (metadata, time limits, --json, an idempotency key making one sandbox); exec passes
# the command's stdout, stderr and exit status through (a signal as 128+N, a timeout), quotes the
# words after --, runs in --cwd and in the background, and shows the output under zero data
# retention too; its output streams as it comes (seen while the command still runs); cp uploads
# and downloads every byte value, from and to files, directories and standard streams; ls, list
# (filters, pages), get, rm and watch (the live timeline to the end, exit 1 for a sandbox the idle
# timeout ended); and each bad input has its message and exit status: unknown sandbox 6, ended 7,
# busy 8, a path refused 9, no such file 10, an upload over the cap 11, usage errors 2.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
cd "$TOP"
[ -d "$EPHEMERAL_IMAGE" ] || skip "no sandbox image at $EPHEMERAL_IMAGE (make image)"
export NO_COLOR=1
test_deadline 600

cat >"$TEST_TMP/config.json" <<JSON
{"secret_key_file": "$TEST_TMP/secret.key", "shutdown_grace_seconds": 1,
 "sandbox": {"backend": "namespaces"},
 "sandboxes": {"max_upload_bytes": 1048576}}
JSON
start_server --config "$TEST_TMP/config.json"

# run_eph NAME ARGS...: runs the client; its stdout, stderr and status in $TEST_TMP/NAME.{out,err,rc}.
run_eph() {
    local name=$1; shift
    "$EPH" "$@" >"$TEST_TMP/$name.out" 2>"$TEST_TMP/$name.err"
    echo $? >"$TEST_TMP/$name.rc"
}
out_of() { cat "$TEST_TMP/$1.out"; }
err_of() { cat "$TEST_TMP/$1.err"; }
rc_of() { cat "$TEST_TMP/$1.rc"; }
# expect NAME STATUS MESSAGE ARGS...: the client exits STATUS with MESSAGE on stderr.
expect() {
    local name=$1 status=$2 msg=$3; shift 3
    run_eph "$name" "$@"
    assert_eq "$(rc_of "$name")" "$status" "$name: exit status ($(err_of "$name"))"
    assert_contains "$(err_of "$name")" "$msg" "$name: message"
}

# ---- create, get ----
run_eph create sandbox create --budget 0.05 --metadata team=qa --metadata n=1 --timeout 600 \
    --idle-timeout 120
assert_eq "$(rc_of create)" 0 "create ($(err_of create))"
sbx=$(out_of create)
[[ $sbx =~ ^sbx_[0-9a-f]{32}$ ]] || fail "create printed '$sbx', not a sandbox id"
run_eph get sandbox get "$sbx" --json
assert_eq "$(out_of get | jq -c '[.status, .metadata, .permissions.timeout_seconds, .permissions.idle_timeout_seconds]')" \
    '["ready",{"team":"qa","n":"1"},600,120]' "create: ready, with its flags"
run_eph gettext sandbox get "$sbx"
assert_eq "$(rc_of gettext)" 0 "get"
assert_contains "$(out_of gettext)" "$sbx · Ready" "get: heading"
assert_contains "$(out_of gettext)" "Idle limit   120 s" "get: idle limit"
assert_contains "$(out_of gettext)" "Metadata     team=qa, n=1" "get: metadata"
assert_not_contains "$(out_of gettext)" "Model" "get: a sandbox has no model"
run_eph createjson sandbox create --budget 0.02 --json --idempotency-key "cli-sbx-$$"
assert_eq "$(out_of createjson | jq -r .status)" ready "create --json: the object, ready"
second=$(out_of createjson | jq -r .id)
run_eph again sandbox create --budget 0.02 --idempotency-key "cli-sbx-$$"
assert_eq "$(out_of again)" "$second" "the same idempotency key: the same sandbox"

# ---- exec: output, exit status, quoting, cwd, timeout, background ----
run_eph exec1 sandbox exec "$sbx" -- sh -c 'echo to-out; echo to-err >&2; exit 7'
assert_eq "$(rc_of exec1)" 7 "exec: the command's exit status"
assert_eq "$(out_of exec1)" to-out "exec: stdout to stdout"
assert_eq "$(err_of exec1)" to-err "exec: stderr to stderr"
run_eph sig sandbox exec "$sbx" 'kill -KILL $$'
assert_eq "$(rc_of sig)" 137 "exec: killed by signal 9 is 128+9"
run_eph words sandbox exec "$sbx" -- printf '%s|' 'a b' "it's" '$HOME' ''
assert_eq "$(out_of words)" "a b|it's|\$HOME||" "exec: each word after -- reaches the command as it is"
run_eph line sandbox exec "$sbx" 'mkdir -p data/sub && echo "$((6 * 7))"'
assert_eq "$(out_of line)" 42 "exec: one argument is a command line for the shell"
run_eph cwd sandbox exec "$sbx" --cwd=data/sub pwd
assert_contains "$(out_of cwd)" "/data/sub" "exec --cwd"
run_eph timeout sandbox exec "$sbx" --timeout 1 -- sleep 100
assert_eq "$(rc_of timeout)" 137 "exec --timeout: the command killed"
assert_contains "$(err_of timeout)" "timed out" "exec --timeout: said"
run_eph bg sandbox exec "$sbx" --background 'echo from-background > bg.txt'
assert_eq "$(rc_of bg)" 0 "exec --background"
[[ $(out_of bg) =~ ^cmd_[0-9a-f]{24}$ ]] || fail "exec --background printed '$(out_of bg)', not a command id"
assert_eq "$(api GET "/v1/sandboxes/$sbx/commands/$(out_of bg)" | sed '$d' | jq -r .background)" true \
    "the background command exists on the server"
run_eph bgdone sandbox exec "$sbx" 'while [ ! -s bg.txt ]; do sleep 0.05; done; cat bg.txt'
assert_eq "$(out_of bgdone)" from-background "the background command ran"

# ---- cp both ways, every byte value; ls ----
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 3 + b"\r\n\0end")' >"$TEST_TMP/all.bin"
run_eph up sandbox cp "$TEST_TMP/all.bin" "$sbx:data/all.bin"
assert_eq "$(rc_of up)" 0 "cp up ($(err_of up))"
run_eph sum sandbox exec "$sbx" -- sha256sum data/all.bin
assert_eq "$(out_of sum | cut -d' ' -f1)" "$(sha256sum <"$TEST_TMP/all.bin" | cut -d' ' -f1)" \
    "the uploaded bytes, in the sandbox"
"$EPH" sandbox cp "$sbx:data/all.bin" - >"$TEST_TMP/down.bin" || fail "cp down to stdout"
cmp "$TEST_TMP/all.bin" "$TEST_TMP/down.bin" || fail "cp to stdout changed the bytes"
mkdir "$TEST_TMP/dir"
"$EPH" sandbox cp "$sbx:data/all.bin" "$TEST_TMP/dir" || fail "cp down into a directory"
cmp "$TEST_TMP/all.bin" "$TEST_TMP/dir/all.bin" || fail "cp into a directory changed the bytes"
[ -z "$(find "$TEST_TMP/dir" -name 'all.bin.*')" ] || fail "a temporary file was left behind"
"$EPH" sandbox cp - "$sbx:/tmp/stdin.bin" <"$TEST_TMP/all.bin" || fail "cp up from stdin"
"$EPH" sandbox cp "$sbx:/tmp/stdin.bin" "$TEST_TMP/back.bin" || fail "cp down to a file"
cmp "$TEST_TMP/all.bin" "$TEST_TMP/back.bin" || fail "an absolute /tmp path, from stdin: bytes changed"
: >"$TEST_TMP/empty"
"$EPH" sandbox cp "$TEST_TMP/empty" "$sbx:data/empty" || fail "cp an empty file"
"$EPH" sandbox cp "$sbx:data/empty" "$TEST_TMP/empty.back" || fail "cp an empty file back"
[ -f "$TEST_TMP/empty.back" ] && [ ! -s "$TEST_TMP/empty.back" ] || fail "the empty file came back wrong"
run_eph ls sandbox ls "$sbx" data
assert_eq "$(rc_of ls)" 0 "ls"
assert_contains "$(out_of ls)" "file                774  data/all.bin" "ls: a file, its size"
assert_contains "$(out_of ls)" "directory             0  data/sub" "ls: a directory"
assert_not_contains "$(out_of ls)" "bg.txt" "ls DIR: only that directory"
run_eph lsjson sandbox ls "$sbx" --json
assert_eq "$(out_of lsjson | jq -r '.data[] | select(.path == "bg.txt") | .size')" 16 "ls --json"

# ---- bad paths, sizes, files ----
ln_out=$("$EPH" sandbox exec "$sbx" 'ln -s /etc etclink && echo linked') || fail "ln: $ln_out"
for p in /etc/x ../x a/../../x etclink/x; do
    expect "path$RANDOM" 9 "ephemeral: " sandbox cp "$TEST_TMP/all.bin" "$sbx:$p"
done
expect pathdown 9 "the path cannot be used" sandbox cp "$sbx:etclink/passwd" "$TEST_TMP/passwd"
[ ! -e "$TEST_TMP/passwd" ] || fail "a refused download left a file"
expect nofile 10 "no such file" sandbox cp "$sbx:nothing-here" "$TEST_TMP/nothing"
[ ! -e "$TEST_TMP/nothing" ] || fail "a missing file left a local file"
head -c 1048577 /dev/zero >"$TEST_TMP/big"
expect big 11 "over the limit of 1048576 bytes" sandbox cp "$TEST_TMP/big" "$sbx:big"
expect bigstdin 11 "over the limit" sandbox cp - "$sbx:big" <"$TEST_TMP/big"
head -c 1048576 /dev/zero >"$TEST_TMP/cap"
run_eph cap sandbox cp "$TEST_TMP/cap" "$sbx:cap"
assert_eq "$(rc_of cap)" 0 "an upload at the cap ($(err_of cap))"

# ---- streaming, busy, deleted under a command ----
# The command prints, then waits for ever: what the client shows before we end the sandbox was
# streamed while the command ran.
"$EPH" sandbox exec "$sbx" 'echo first; echo first-err >&2; exec sleep 1000' \
    >"$TEST_TMP/live.out" 2>"$TEST_TMP/live.err" &
live=$!
_pids+=("$live")
seen() { grep -q '^first$' "$TEST_TMP/live.out" && grep -q '^first-err$' "$TEST_TMP/live.err"; }
wait_until "the output of the running command" 600 seen
kill -0 "$live" 2>/dev/null || fail "exec ended before the sandbox did"
expect busy 8 "a command is already running" sandbox exec "$sbx" true
run_eph rm sandbox rm "$sbx"
assert_eq "$(out_of rm)" "$sbx stopped" "rm: the id and the status"
wait "$live"
assert_eq "$?" 7 "exec of a sandbox deleted under it: the sandbox ended"
assert_contains "$(cat "$TEST_TMP/live.err")" "ended while the command ran" "exec: said"
run_eph rm2 sandbox rm "$sbx"
assert_eq "$(rc_of rm2)" 0 "rm again (idempotent)"
expect ended 7 "has ended" sandbox exec "$sbx" true
expect endedcp 7 "has ended" sandbox cp "$TEST_TMP/all.bin" "$sbx:x"
expect endedls 7 "has ended" sandbox ls "$sbx"

# ---- watch: the timeline of a finished one, and live to the end of one the idle timeout ends ----
run_eph watch sandbox watch "$sbx"
assert_eq "$(rc_of watch)" 0 "watch of a stopped sandbox"
assert_contains "$(out_of watch)" "Shell             \$ sh -c 'echo to-out; echo to-err >&2; exit 7'" "watch: a command"
assert_contains "$(out_of watch)" "│ to-out" "watch: its live output"
assert_contains "$(out_of watch)" "File              wrote data/all.bin" "watch: a file"
assert_contains "$(out_of watch)" "Stopped" "watch: the end"
assert_contains "$(out_of watch)" "Worker destroyed" "watch: the final event"
assert_contains "$(out_of watch)" "Web \$0.00 · Compute \$" "watch: the cost line"
idle=$("$EPH" sandbox create --budget 0.02 --idle-timeout 1) || fail "create idle"
run_eph watchidle sandbox watch "$idle"
assert_eq "$(rc_of watchidle)" 1 "watch: a sandbox that timed out"
assert_contains "$(out_of watchidle)" "Timed out" "watch: followed to its end"

# Zero data retention: no output events; the client writes the answer's output instead.
zdr=$("$EPH" sandbox create --budget 0.02 --zdr) || fail "create --zdr"
run_eph zdrexec sandbox exec "$zdr" -- sh -c 'echo zdr-out; echo zdr-err >&2; exit 3'
assert_eq "$(rc_of zdrexec):$(out_of zdrexec):$(err_of zdrexec)" "3:zdr-out:zdr-err" "exec under zero data retention"
"$EPH" sandbox rm "$zdr" >/dev/null || fail "rm zdr"

# ---- list ----
run_eph list sandbox list
assert_eq "$(rc_of list)" 0 "list"
assert_contains "$(out_of list)" "$sbx  stopped" "list: the stopped one"
run_eph listready sandbox list --status ready --json
assert_eq "$(out_of listready | jq -r '[.data[].id] | join(" ")')" "$second" "list --status ready"
run_eph listmd sandbox list --metadata team=qa --json
assert_eq "$(out_of listmd | jq -r '[.data[].id] | join(" ")')" "$sbx" "list --metadata"
run_eph page1 sandbox list --limit 1
more=$(out_of page1 | sed -n 's/^(more sandboxes: ephemeral sandbox list --after \(sbx_[0-9a-f]*\))$/\1/p')
[ -n "$more" ] || fail "list --limit 1: no next page: $(out_of page1)"
run_eph page2 sandbox list --limit 1 --after "$more" --json
assert_eq "$(out_of page2 | jq '.data | length')" 1 "list --after: the next page"
[ "$(out_of page2 | jq -r '.data[0].id')" != "$more" ] || fail "list --after repeated the page"

# ---- unknown sandboxes, usage errors ----
none=sbx_00000000000000000000000000000000
for c in "get $none" "exec $none true" "ls $none" "rm $none" "watch $none" "cp $none:x -"; do
    # shellcheck disable=SC2086
    expect "unknown$RANDOM" 6 "no such sandbox" sandbox $c
done
expect badid 2 "not a sandbox id" sandbox get run_00000000000000000000000000000000
expect nocmd 2 "a command is required" sandbox exec "$second"
expect both 2 "not both" sandbox exec "$second" 'true' -- true
expect bgtimeout 2 "no --timeout" sandbox exec "$second" --background --timeout 5 -- true
expect badtimeout 2 "--timeout must be from 1 to 86400" sandbox exec "$second" --timeout=0 true
expect nocwd 2 "needs a value" sandbox exec "$second" true --cwd
expect badcwd 4 "'cwd' must be a directory" sandbox exec "$second" --cwd ../.. true
expect cpnone 2 "neither is SANDBOX_ID:PATH" sandbox cp a b
expect cpboth 2 "one must be local" sandbox cp "$second:a" "$second:b"
expect cpempty 2 "empty" sandbox cp "$TEST_TMP/all.bin" "$second:"
expect prompt 2 "option of \`ephemeral run\`" sandbox create --prompt hi --budget 0.01
expect nobudget 2 "a budget is required" sandbox create
expect badstatus 2 "--status must be one of starting, ready" sandbox list --status running
expect nosub 2 "unknown subcommand" sandbox frobnicate
expect cpmissing 2 "cannot read" sandbox cp "$TEST_TMP/no-such-file" "$second:x"
run_eph rmsecond sandbox rm "$second"
assert_eq "$(rc_of rmsecond)" 0 "rm"
echo "ok: ephemeral sandbox"
