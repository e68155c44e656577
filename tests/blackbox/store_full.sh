#!/bin/bash
# Store robustness: the database on a file system that fills up, then turns read-only. Creating a
# run fails with a clear 503 and nothing half-written; runs already accepted settle as soon as the
# store takes writes again; the database passes an integrity check; the server never dies.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to mount a small tmpfs"
cd "$TEST_TMP"
mkdir small
mount -t tmpfs -o size=512k,mode=0700 ephemeral-test "$TEST_TMP/small" || skip "cannot mount tmpfs"
unmount() {
    _cleanup
    umount "$TEST_TMP/small" 2>/dev/null || umount -l "$TEST_TMP/small" 2>/dev/null
}
trap unmount EXIT
export TEST_TMP_DB="$TEST_TMP/small"
# start_server keeps its database in $TEST_TMP: point it at the small file system.
TEST_TMP_SAVED=$TEST_TMP
TEST_TMP=$TEST_TMP/small start_server
TEST_TMP=$TEST_TMP_SAVED

# Prompts with no recording fail at once (no_recording), so each run is stored, then settled.
pad=$(head -c 60000 /dev/zero | tr '\0' 'x')
codes=""
full=0
for i in $(seq 40); do
    body=$(jq -n --arg p "fill $i $pad" '{prompt: $p, shell: false, max_cost_micros: 1000}')
    out=$(api POST /v1/runs -H 'Content-Type: application/json' -d "$body")
    code=${out##*HTTP }
    codes="$codes $code"
    if [ "$code" = 503 ]; then
        full=1
        msg=$(head -n 1 <<<"$out" | jq -r .error.message)
        [ -n "$msg" ] && [ "$msg" != null ] || fail "503 without a message"
        assert_eq "$(head -n 1 <<<"$out" | jq -r .error.type)" api_error "error type"
        break
    fi
    assert_eq "$code" 201 "create $i"
done
assert_eq "$full" 1 "the store never filled (codes:$codes)"
kill -0 "$SERVER_PID" || fail "the server died on a full disk"
curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null || fail "health after a full disk"

# Make room: accepted runs settle (the worker retries), nothing stays reserved.
mount -o remount,size=8m "$TEST_TMP/small"
for _ in $(seq 200); do
    held=$(api GET /v1/balance | head -n 1 | jq .reserved_micros)
    [ "$held" = 0 ] && break
    sleep 0.05
done
assert_eq "$held" 0 "reservations settled once the disk had room"
n=$(api GET '/v1/runs?limit=100' | head -n 1 | jq '[.data[] | select(.status != "failed")] | length')
assert_eq "$n" 0 "every accepted run settled"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
assert_eq "$(sqlite3 "$TEST_TMP/small/ephemeral.db" 'PRAGMA integrity_check')" ok "integrity"
bal=$(sqlite3 "$TEST_TMP/small/ephemeral.db" "SELECT SUM(CASE kind WHEN 'reserve' THEN micros WHEN 'charge' THEN -micros WHEN 'release' THEN -micros ELSE 0 END) FROM ledger")
[ "$bal" -le 1000 ] || fail "reservations left in the ledger: $bal"
# A read-only database: the server refuses to start with a clear error, and the file is intact.
mkdir "$TEST_TMP/ro"
mount --bind "$TEST_TMP/small" "$TEST_TMP/ro"
mount -o remount,bind,ro "$TEST_TMP/ro"
unmount() {
    _cleanup
    umount "$TEST_TMP/ro" 2>/dev/null || umount -l "$TEST_TMP/ro" 2>/dev/null
    umount "$TEST_TMP/small" 2>/dev/null || umount -l "$TEST_TMP/small" 2>/dev/null
}
"$EPHD" serve --listen "127.0.0.1:$(free_port)" --db "$TEST_TMP/ro/ephemeral.db" \
    >"$TEST_TMP/ro.log" 2>&1 &
ro_pid=$!
_pids+=("$ro_pid")
wait "$ro_pid"
rc=$?
[ "$rc" -ne 0 ] || fail "the server started on a read-only database"
assert_contains "$(cat "$TEST_TMP/ro.log")" "read-only" "read-only error message"
assert_eq "$(sqlite3 "$TEST_TMP/small/ephemeral.db" 'PRAGMA integrity_check')" ok "integrity after"
echo "codes:$codes"
