#!/bin/bash
# `ephemeral run` of the seed example against the real server: the timeline in the seed's order,
# the result, the cost line, exit 0; then get, list, balance, --json, --detach + watch, replay;
# usage errors exit 2; an unreachable server exits 3 with a clear message; the key is never shown.
. "$(dirname "$0")/lib.sh"
cd "$TOP" || fail "no TOP"
export NO_COLOR=1

start_server

out=$("$EPH" run examples/sandbox-proof/request.json 2>"$TEST_TMP/run.err")
rc=$?
cat "$TEST_TMP/run.err" >&2
printf '%s\n' "$out"
assert_eq "$rc" 0 "exit status of a completed run"

# The header names the run and the model.
run_id=$(printf '%s\n' "$out" | head -n 1 | grep -o 'run_[0-9a-f]\{32\}')
[ -n "$run_id" ] || fail "no run id in the header line: $(printf '%s\n' "$out" | head -n 1)"

# The timeline: "   t.tt  Label             message". Model calls may come between the others; the
# rest must have the seed's shape and order.
shape=$(printf '%s\n' "$out" | awk '
    /^ *[0-9]+\.[0-9][0-9]  / {
        if (!match($0, /^ *[0-9]+\.[0-9][0-9]  /)) next
        label = substr($0, RLENGTH + 1, 16); sub(/ +$/, "", label)
        msg = substr($0, RLENGTH + 19)
        if (label == "Model") next
        if (label == "Queued") t = "queued"
        else if (label == "Worker destroyed") t = "worker-destroyed"
        else if (label == "Completed") t = "completed"
        else if (label == "Shell") t = "shell"
        else if (msg ~ /^worker started/) t = "started"
        else if (msg ~ /ready$/) t = "ready"
        else if (msg ~ /destroyed$/) t = "destroyed"
        else t = "other(" label ")"
        printf "%s ", t
    }')
assert_eq "$shape" "queued ready started shell shell shell shell destroyed completed worker-destroyed " \
    "timeline order"

# t is right-aligned with two decimals and never goes back.
printf '%s\n' "$out" | awk '/^ *[0-9]+\.[0-9][0-9]  / { t = $1 + 0; if (t < last) exit 1; last = t }' ||
    fail "t goes back in the timeline"
assert_contains "$out" "   0.00  Queued            budget of \$0.04 reserved" "queued line"
assert_contains "$out" '$ pwd; whoami' "first shell command"
assert_contains "$out" "worker started · shell on · web off" "worker line"

# The result: the real output of the sandbox, and the cost line last.
assert_contains "$out" "1. Prime script output: 2 3 5 7 11 13 17 19 23 29 31 37 41 43 47" "primes"
assert_contains "$out" "whoami: worker" "whoami"
assert_contains "$out" "The network call did not succeed." "network sentence"
last=$(printf '%s\n' "$out" | tail -n 1)
[[ $last =~ ^Model\ \$[0-9]+\.[0-9]{2,5}\ ·\ Web\ \$[0-9]+\.[0-9]{2,5}\ ·\ Compute\ \$[0-9]+\.[0-9]{2,5}$ ]] ||
    fail "cost line: '$last'"

# The worker-destroyed line agrees with the run object: charged + released = reserved.
json=$("$EPH" get "$run_id" --json) || fail "get --json"
assert_eq "$(jq -r .status <<<"$json")" completed "status"
sum=$(jq '.cost.charged_micros + .cost.released_micros' <<<"$json")
assert_eq "$sum" 40000 "charged + released"
charged=$(jq -r .cost.charged_micros <<<"$json")
[ "$charged" -le 40000 ] || fail "charged over the budget"

summary=$("$EPH" get "$run_id") || fail "get"
assert_contains "$summary" "$run_id · Completed" "get header"
assert_contains "$summary" "Budget       \$0.04, hard limit" "get budget"
assert_contains "$summary" "of \$0.04 charged" "get cost bar"

list=$("$EPH" list --limit 5) || fail "list"
assert_contains "$list" "$run_id  completed" "list row"
list=$("$EPH" list --status failed) || fail "list --status"
assert_not_contains "$list" "$run_id" "list filtered by status"

bal=$("$EPH" balance) || fail "balance"
assert_contains "$bal" "Available  \$" "balance"

# --json: the final run object, nothing else, on stdout.
final=$("$EPH" run examples/sandbox-proof/request.json --json) || fail "run --json exit"
assert_eq "$(jq -r .status <<<"$final")" completed "run --json status"
assert_eq "$(jq -r .object <<<"$final")" run "run --json object"

# --detach, then watch the same run live.
id2=$("$EPH" run examples/sandbox-proof/request.json --detach) || fail "detach"
[[ $id2 =~ ^run_[0-9a-f]{32}$ ]] || fail "detach printed '$id2'"
watched=$("$EPH" watch "$id2"); rc=$?
assert_eq "$rc" 0 "watch exit"
assert_contains "$watched" "Worker destroyed" "watch reaches the final event"
assert_eq "$(printf '%s\n' "$watched" | grep -c '  Queued  ')" 1 "watch prints each event once"

# replay: the same timeline again, with its timing (the seed run lasts a few seconds here).
replayed=$("$EPH" replay "$run_id") || fail "replay"
assert_eq "$(printf '%s\n' "$replayed" | grep -c '  Shell  ')" 4 "replay shell lines"
assert_contains "$replayed" "Worker destroyed" "replay final event"

# The same idempotency key twice: one run.
k="cli-test-$RANDOM-$$"
a=$("$EPH" run examples/sandbox-proof/request.json --idempotency-key "$k" --detach) || fail "key 1"
b=$("$EPH" run examples/sandbox-proof/request.json --idempotency-key "$k" --detach) || fail "key 2"
assert_eq "$b" "$a" "idempotent run"

# Cancel a finished run: idempotent, prints its status.
c=$("$EPH" cancel "$run_id") || fail "cancel"
assert_eq "$c" "$run_id completed" "cancel of a finished run"

# Usage errors: exit 2, before anything is sent.
for args in "run --bogus" "run --budget abc --prompt x" "run --prompt x" "run --timeout 0 --prompt x --budget 1" \
    "get" "get not-a-run" "list --limit 0" "list --status nope" "watch" "frobnicate"; do
    # shellcheck disable=SC2086
    "$EPH" $args >/dev/null 2>"$TEST_TMP/usage.err"; rc=$?
    assert_eq "$rc" 2 "exit status of '$args'"
    assert_contains "$(cat "$TEST_TMP/usage.err")" "ephemeral: " "message for '$args'"
done
# --help: the command's usage on stdout, exit 0, like every other command.
for cmd in run "run --prompt x" get list watch cancel balance; do
    # shellcheck disable=SC2086
    out=$("$EPH" $cmd --help 2>"$TEST_TMP/help.err"); rc=$?
    assert_eq "$rc" 0 "exit status of '$cmd --help'"
    assert_contains "$out" "usage: ephemeral ${cmd%% *}" "usage of '$cmd --help'"
    assert_eq "$(cat "$TEST_TMP/help.err")" "" "stderr of '$cmd --help'"
done
# An amount error says which rule failed.
"$EPH" run --prompt x --budget 0.0000001 2>"$TEST_TMP/amount.err"
assert_contains "$(cat "$TEST_TMP/amount.err")" "more than 6 decimals" "amount rule"
"$EPH" get run_00000000000000000000000000000000 2>"$TEST_TMP/nf.err"; rc=$?
assert_eq "$rc" 4 "unknown run (refused: 4xx)"
assert_contains "$(cat "$TEST_TMP/nf.err")" "ephemeral: " "unknown run message"

# A bad key: the API's message, exit 4, and the key itself never shown.
bad="eph_$(printf 'Z%.0s' $(seq 40))"
msg=$(EPHEMERAL_API_KEY=$bad "$EPH" balance 2>&1); rc=$?
assert_eq "$rc" 4 "bad key exit"
assert_not_contains "$msg" "$bad" "bad key echoed"
assert_not_contains "$out$summary$list$bal$msg" "$EPHEMERAL_API_KEY" "key in any output"

# No key at all; no server at all.
msg=$(env -u EPHEMERAL_API_KEY "$EPH" balance 2>&1); rc=$?
assert_eq "$rc" 2 "no key exit"
assert_contains "$msg" "EPHEMERAL_API_KEY is not set" "no key message"
port=$(free_port)
msg=$(EPHEMERAL_URL="http://127.0.0.1:$port" "$EPH" run examples/sandbox-proof/request.json 2>&1); rc=$?
assert_eq "$rc" 3 "unreachable server exit"
assert_contains "$msg" "cannot reach http://127.0.0.1:$port" "unreachable server message"
echo "ok"
