#!/bin/bash
# Store robustness: the database on a file system that fills up, then turns read-only. Creating a
# run fails with a clear 503 and nothing half-written; runs already accepted settle as soon as the
# store takes writes again; the database passes an integrity check; the server never dies.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to mount a small tmpfs"
cd "$TEST_TMP"
mkdir small
# 1 MiB: the schema (about 190 KB) and the journal its migrations write before their checkpoint
# (about 420 KB) fit, and a few of the large prompts below fill what is left.
mount -t tmpfs -o size=1m,mode=0700 ephemeral-test "$TEST_TMP/small" || skip "cannot mount tmpfs"
unmount() {
    _cleanup
    umount "$TEST_TMP/small" 2>/dev/null || umount -l "$TEST_TMP/small" 2>/dev/null
}
trap unmount EXIT
export TEST_TMP_DB="$TEST_TMP/small"
# The server writes while this test does (its webhook sender claims every second): wait for its
# lock rather than fail on it.
sql() { sqlite3 -cmd '.timeout 5000' "$@"; }
# start_server keeps its database in $TEST_TMP: point it at the small file system.
# The replay model reads one recording, so that it takes every prompt (one it could not answer
# would be refused at create, before the store is written).
cat >"$TEST_TMP/config.json" <<JSON
{"default_model": "replay",
 "models": [{"id": "replay", "provider": "replay",
             "transcripts": "$TOP/tests/fixtures/api_examples/quick/transcript.jsonl",
             "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000,
             "max_output_tokens": 256}]}
JSON
TEST_TMP_SAVED=$TEST_TMP
TEST_TMP=$TEST_TMP/small start_server --config "$TEST_TMP_SAVED/config.json"
TEST_TMP=$TEST_TMP_SAVED

# Large prompts, each stored, then run and settled: they fill the small file system.
pad=$(head -c 60000 /dev/zero | tr '\0' 'x')
codes=""
full=0
for i in $(seq 40); do
    body=$(jq -n --arg p "fill $i $pad" '{prompt: $p, shell: false, max_cost_micros: 10000}')
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
# Readiness says the store cannot write, and why (whatever small write may still fit).
health=$(curl -sS -w '\nHTTP %{http_code}\n' "$EPHEMERAL_URL/healthz")
assert_eq "${health##*HTTP }" 503 "health on a full disk: $health"
assert_eq "$(head -n 1 <<<"$health" | jq -r .store.ok)" false "the store's part"
msg=$(head -n 1 <<<"$health" | jq -r .store.message)
assert_contains "$msg" "the store cannot write" "the store's message"
assert_contains "$msg" "database or disk is full" "the store's message"
assert_eq "$(head -n 1 <<<"$health" | jq -r .image.ok)" true "the image is not blamed"

# Make room: readiness recovers, accepted runs settle (the worker retries), nothing stays
# reserved.
mount -o remount,size=8m "$TEST_TMP/small"
healthy() { curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1; }
for _ in $(seq 200); do healthy && break; sleep 0.05; done
healthy || fail "health once the disk had room: $(curl -sS "$EPHEMERAL_URL/healthz")"
for _ in $(seq 200); do
    held=$(api GET /v1/balance | head -n 1 | jq .reserved_micros)
    [ "$held" = 0 ] && break
    sleep 0.05
done
assert_eq "$held" 0 "reservations settled once the disk had room"
n=$(api GET '/v1/runs?limit=100' | head -n 1 |
    jq '[.data[] | select(.status | IN("queued", "starting", "running"))] | length')
assert_eq "$n" 0 "every accepted run settled"

# The disk fills mid-create: the run is stored, then its idempotency answer is not. The answer's
# own transaction fills the disk (a trigger of this test's adds far more than the file system
# holds to it, and only to it), so the run's insert before it succeeds. Two keys: one retried
# before a restart, one after it (start-up recovery).
db=$TEST_TMP/small/ephemeral.db
sql "$db" "CREATE TABLE ballast (b BLOB);
    CREATE TRIGGER fill_the_disk BEFORE UPDATE OF status_code ON idempotency
    WHEN NEW.key LIKE 'full-%' AND NEW.status_code <> 0
    BEGIN INSERT INTO ballast VALUES (zeroblob(64 * 1024 * 1024)); END;"
create_with() { # KEY: a create with KEY; the body, then the headers' status line
    curl -sS -i -X POST "$EPHEMERAL_URL/v1/runs" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
        -H 'Content-Type: application/json' -H "Idempotency-Key: $1" \
        -d '{"prompt": "a key whose answer fills the disk", "shell": false, "max_cost_micros": 1000}' |
        tr -d '\r'
}
key_status() { sql "$db" "SELECT status_code FROM idempotency WHERE key = '$1'"; }
stuck_runs=()
for key in full-1 full-2; do
    out=$(create_with "$key")
    assert_contains "$out" "HTTP/1.1 201" "create $key as the disk fills: $out"
    stuck_runs+=("$(tail -n 1 <<<"$out" | jq -r .id)")
    assert_eq "$(key_status "$key")" 0 "$key's answer could not be written"
    # Free the disk again for the next run's insert (the failed answer left its pages behind).
    mount -o remount,size=$((16 + ${key#full-} * 8))m "$TEST_TMP/small"
done
assert_contains "$(cat "$SERVER_LOG")" "cannot record an idempotency key: No space left on device" \
    "the answers failed for want of space"
sql "$db" "DROP TRIGGER fill_the_disk; DROP TABLE ballast;"
# The same request with the first key: the run it created, replayed, and the record completed.
out=$(create_with full-1)
assert_contains "$out" "HTTP/1.1 200" "the first key again: $out"
assert_contains "$out" "Idempotent-Replayed: true" "a replay"
assert_eq "$(tail -n 1 <<<"$out" | jq -r .id)" "${stuck_runs[0]}" "the run the first key created"
assert_eq "$(key_status full-1)" 201 "the first key's record, completed"
assert_eq "$(key_status full-2)" 0 "the second key's, untouched"

# A create refused as the disk fills (its run's insert), whose key then cannot be released
# either: once there is room, the same key is a new request (201), not one in flight (409).
sql "$db" "CREATE TABLE ballast (b BLOB);
    CREATE TRIGGER fill_on_run BEFORE INSERT ON runs WHEN NEW.prompt = 'refused as it fills'
    BEGIN INSERT INTO ballast VALUES (zeroblob(64 * 1024 * 1024)); END;
    CREATE TRIGGER fill_on_release BEFORE DELETE ON idempotency WHEN OLD.key = 'refused-1'
    BEGIN INSERT INTO ballast VALUES (zeroblob(64 * 1024 * 1024)); END;"
refused() {
    curl -sS -i -X POST "$EPHEMERAL_URL/v1/runs" -H "Authorization: Bearer $EPHEMERAL_API_KEY" \
        -H 'Content-Type: application/json' -H "Idempotency-Key: refused-1" \
        -d '{"prompt": "refused as it fills", "shell": false, "max_cost_micros": 1000}' | tr -d '\r'
}
out=$(refused)
assert_contains "$out" "HTTP/1.1 503" "a create whose run does not fit: $out"
assert_eq "$(key_status refused-1)" 0 "its key could not be released"
mount -o remount,size=40m "$TEST_TMP/small"
sql "$db" "DROP TRIGGER fill_on_run; DROP TRIGGER fill_on_release; DROP TABLE ballast;"
out=$(refused)
assert_contains "$out" "HTTP/1.1 201" "the refused key again, with room: $out"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
assert_eq "$(sql "$TEST_TMP/small/ephemeral.db" 'PRAGMA integrity_check')" ok "integrity"

# A restart completes the second key from its run before any request, and releases a record in
# flight whose run was never stored (its request died with the old server).
sql "$db" "INSERT INTO idempotency (org_id, key, request_hash, status_code, response_body,
    created_at) SELECT id, 'never-stored', 'x', 0,
    '{\"object\":\"run\",\"id\":\"run_00000000000000000000000000000000\"}', 1 FROM orgs"
port=$(free_port)
EPHEMERAL_URL="http://127.0.0.1:$port"
"$EPHD" serve --listen "127.0.0.1:$port" --db "$db" --config "$TEST_TMP/config.json" >>"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
_pids+=("$SERVER_PID")
for _ in $(seq 600); do
    curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" || fail "the server did not restart"
    sleep 0.05
done
assert_eq "$(key_status full-2)" 201 "the second key, completed at start-up"
assert_eq "$(sql "$db" "SELECT COUNT(*) FROM idempotency WHERE key = 'never-stored'")" 0 \
    "a record whose run was never stored, released at start-up"
out=$(create_with full-2)
assert_contains "$out" "HTTP/1.1 200" "the second key after the restart: $out"
assert_contains "$out" "Idempotent-Replayed: true" "a replay after the restart"
assert_eq "$(tail -n 1 <<<"$out" | jq -r .id)" "${stuck_runs[1]}" "the run the second key created"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
bal=$(sql "$TEST_TMP/small/ephemeral.db" "SELECT SUM(CASE kind WHEN 'reserve' THEN micros WHEN 'charge' THEN -micros WHEN 'release' THEN -micros ELSE 0 END) FROM ledger")
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
assert_eq "$(sql "$TEST_TMP/small/ephemeral.db" 'PRAGMA integrity_check')" ok "integrity after"
echo "codes:$codes"
