#!/bin/bash
# The warm pool through the server (sandbox.warm_pool): runs take pre-built sandboxes, each serves
# one run only (each sandbox's scratch directory has a random name: a reused one would repeat), and
# stopping the server destroys the idle ones: nothing of the pool is left on the host.
. "$(dirname "$0")/lib.sh"
[ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ] || skip "no sandbox image (make image)"
cd "$TOP"
cat >"$TEST_TMP/config.json" <<JSON
{"sandbox": {"backend": "namespaces", "warm_pool": 2}}
JSON
start_server --config "$TEST_TMP/config.json"
scratch=()
for i in 1 2 3; do
    out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
        -d @examples/sandbox-proof/request.json)
    run=$(head -n 1 <<<"$out")
    id=$(jq -r .id <<<"$run")
    assert_eq "$(jq -r .status <<<"$run")" completed "run $i"
    assert_eq "$(jq '.cost.charged_micros + .cost.released_micros' <<<"$run")" 40000 "run $i settled"
    ev=$(api GET "/v1/runs/$id/events" | head -n 1)
    dir=$(jq -r '.data[] | select(.type=="shell.command") | .data.stdout' <<<"$ev" |
        grep -E '^/tmp/ephemeral-run-[A-Za-z0-9]{6}/scratch$')
    [ -n "$dir" ] || fail "run $i: no scratch directory in its output"
    scratch+=("$dir")
done
[ "${scratch[0]}" != "${scratch[1]}" ] && [ "${scratch[1]}" != "${scratch[2]}" ] &&
    [ "${scratch[0]}" != "${scratch[2]}" ] || fail "a sandbox served two runs: ${scratch[*]}"
# The pool refills in the background: idle sandboxes of this server exist while it runs.
idle=0
for _ in $(seq 100); do
    # one cgroup per sandbox on v2, one in each of three hierarchies on v1: count names
    idle=$(server_cgroups "$SERVER_PID" | sed 's|.*/||' | sort -u | wc -l)
    [ "$idle" -ge 2 ] && break
    sleep 0.05
done
[ "$idle" -ge 2 ] || fail "the pool did not refill (idle sandboxes: $idle)"
pid=$SERVER_PID
kill -TERM "$pid"
wait "$pid" || fail "the server did not stop cleanly"
assert_eq "$(server_cgroups "$pid" | wc -l)" 0 "sandboxes of the pool left after shutdown"

# The default (no warm_pool in the configuration): a pool of 2 on the namespaces backend, idle
# sandboxes that exist before any run, destroyed when the server stops.
echo '{"sandbox": {"backend": "namespaces"}}' >"$TEST_TMP/default.json"
start_server --config "$TEST_TMP/default.json"
pooled() { [ "$(server_cgroups "$SERVER_PID" | sed 's|.*/||' | sort -u | wc -l)" -eq 2 ]; }
for _ in $(seq 200); do pooled && break; sleep 0.05; done
pooled || fail "no pool of 2 by default (idle sandboxes: $(server_cgroups "$SERVER_PID" | sed 's|.*/||' | sort -u | wc -l))"
grep -q "no warm sandbox pool" "$SERVER_LOG" && fail "the default pool did not start"
pid=$SERVER_PID
kill -TERM "$pid"
wait "$pid" || fail "the server did not stop cleanly"
assert_eq "$(server_cgroups "$pid" | wc -l)" 0 "the default pool's sandboxes after shutdown"
echo "3 runs from the pool, each on its own machine; a pool of 2 by default; $(cgroup_case) checked"
