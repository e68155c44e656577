#!/bin/bash
# The sandbox launcher (docs/SANDBOX.md): a server on the namespaces backend has one small child,
# eph-launcher, that clones its sandboxes; each sandbox's init is still the server's own child
# (CLONE_PARENT), so the server reaps it; a launcher that dies is reaped and the server clones the
# next sandboxes itself, runs unaffected; the launcher ends with its server, stopped or killed.
. "$(dirname "$0")/lib.sh"
[ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ] || skip "no sandbox image (make image)"
[ "$(id -u)" = 0 ] || skip "the namespaces backend needs root"
cd "$TOP"
echo '{"sandbox": {"backend": "namespaces", "warm_pool": 0}}' >"$TEST_TMP/config.json"

# launchers PID: the eph-launcher children of the process PID, one pid per line.
launchers() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null)" = "$1" ] &&
            [ "$(cat "$p/comm" 2>/dev/null)" = eph-launcher ] && echo "${p#/proc/}"
    done
}
metric() { api GET /metrics | awk -v m="$1" '$1 == m {print $2}'; }
seed_run() { # what
    local out
    out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
        -d @examples/sandbox-proof/request.json)
    assert_eq "$(head -n 1 <<<"$out" | jq -r .status)" completed "$1"
}
gone() { [ ! -e "/proc/$1" ]; } # a zombie still has its /proc entry

start_server --config "$TEST_TMP/config.json"
l=$(launchers "$SERVER_PID")
assert_eq "$(wc -w <<<"$l")" 1 "launchers of the server"
assert_eq "$(metric ephemeral_sandbox_launcher_up)" 1 "launcher up"
before=$(metric ephemeral_sandbox_launcher_clones_total)
seed_run "a run through the launcher"
assert_eq "$(metric ephemeral_sandbox_launcher_clones_total)" $((before + 1)) "clones after a run"

# A sandbox a caller drives, alive: its init's parent is the server, not the launcher.
out=$(api POST /v1/sandboxes -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
    -d '{"max_cost_micros": 100000}')
assert_eq "$(tail -n 1 <<<"$out")" "HTTP 201" "sandbox create"
sbx=$(head -n 1 <<<"$out" | jq -r .id)
guests=$(server_guests "$SERVER_PID")
assert_eq "$(wc -w <<<"$guests")" 1 "live sandbox inits"
assert_eq "$(awk '/^PPid:/ {print $2}' "/proc/$guests/status")" "$SERVER_PID" "the init's parent"
assert_eq "$(metric ephemeral_sandbox_launcher_clones_total)" $((before + 2)) "clones after a create"
assert_eq "$(tail -n 1 <<<"$(api DELETE "/v1/sandboxes/$sbx")")" "HTTP 200" "sandbox delete"

# The launcher dies: the next run is cloned by the server itself and completes; the dead launcher
# was reaped (no zombie), and the metrics say so.
kill -KILL "$l"
for _ in $(seq 200); do # dead (a zombie until the server reaps it), before the next run
    [ "$(awk '/^State:/ {print $2}' "/proc/$l/status" 2>/dev/null)" = Z ] && break
    sleep 0.05
done
seed_run "a run after the launcher died"
gone "$l" || fail "the dead launcher $l was not reaped: $(grep State "/proc/$l/status")"
assert_eq "$(metric ephemeral_sandbox_launcher_up)" 0 "launcher up after its death"
assert_eq "$(metric ephemeral_sandbox_launcher_clones_total)" $((before + 2)) "clones after its death"
grep -q "sandbox launcher is gone" "$SERVER_LOG" || fail "the launcher's death is not logged"
seed_run "a second run without the launcher"

# A clean stop ends the launcher with the server.
kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "the server did not stop cleanly"

# kill -9 of the server: its launcher dies with it (parent-death signal).
start_server --config "$TEST_TMP/config.json"
l=$(launchers "$SERVER_PID")
assert_eq "$(wc -w <<<"$l")" 1 "launchers of the second server"
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
for _ in $(seq 200); do gone "$l" && break; sleep 0.05; done
gone "$l" || fail "the launcher $l outlived its killed server"

echo "runs and a driven sandbox cloned by the launcher, inits the server's children; fallback after its death; it ends with its server"
