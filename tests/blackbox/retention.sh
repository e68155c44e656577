#!/bin/bash
# Retention (docs/API.md): with a short retention period the background reaper purges a finished run's
# log (prompt, event outputs, result) and keeps its id, status, timestamps, usage and cost.
. "$(dirname "$0")/lib.sh"
[ -e "${EPHEMERAL_IMAGE:-$TOP/var/images/default}/bin/sh" ] || skip "no sandbox image (make image)"
cd "$TOP"
cat >"$TEST_TMP/config.json" <<JSON
{"retention_seconds": 2, "reaper_interval_ms": 200}
JSON
start_server --config "$TEST_TMP/config.json"
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
    -d @examples/sandbox-proof/request.json)
run=$(head -n 1 <<<"$out")
id=$(jq -r .id <<<"$run")
assert_eq "$(jq -r .status <<<"$run")" completed "status"
assert_contains "$(jq -r .result <<<"$run")" "Prime script output" "result before expiry"
expires=$(jq -r .retention.expires_at <<<"$run")
[ "$expires" != null ] || fail "no expires_at"
assert_contains "$(sqlite3 "$DB" "SELECT prompt FROM runs WHERE id = '$id'")" "sandbox test" "prompt stored"

# The reaper runs every 200 ms; the log expires 2 s after the run finished. Poll, bounded.
for _ in $(seq 150); do
    purged=$(sqlite3 "$DB" "SELECT log_purged FROM runs WHERE id = '$id'")
    [ "$purged" = 1 ] && break
    sleep 0.1
done
assert_eq "$purged" 1 "purged by the reaper"
after=$(api GET "/v1/runs/$id" | head -n 1)
assert_eq "$(jq -r .result <<<"$after")" null "result purged"
assert_eq "$(sqlite3 "$DB" "SELECT prompt IS NULL AND files IS NULL AND result IS NULL FROM runs WHERE id = '$id'")" 1 "log columns purged"
for f in id status created_at finished_at; do
    assert_eq "$(jq -r ".$f" <<<"$after")" "$(jq -r ".$f" <<<"$run")" "$f kept"
done
assert_eq "$(jq -c .usage <<<"$after")" "$(jq -c .usage <<<"$run")" "usage kept"
assert_eq "$(jq -c .cost <<<"$after")" "$(jq -c .cost <<<"$run")" "cost kept"
events=$(api GET "/v1/runs/$id/events" | head -n 1)
assert_eq "$(jq '[.data[] | select(.type=="shell.command")] | length' <<<"$events")" 4 "events kept"
assert_eq "$(jq -r '[.data[] | select(.message != .type)] | length' <<<"$events")" 0 "messages reduced to types"
assert_eq "$(jq -r '[.data[] | select(.data != {})] | length' <<<"$events")" 0 "outputs purged"
assert_eq "$(sqlite3 "$DB" "SELECT COUNT(*) FROM events WHERE run_id = '$id' AND wire IS NOT NULL")" 0 \
    "no stored event text left to carry the outputs"
if grep -a -q "Could not resolve host" "$DB" "$DB-wal" 2>/dev/null; then
    # secure_delete overwrites freed pages; a checkpoint has not necessarily run, so only the
    # live database file is held to this.
    sqlite3 "$DB" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null
    grep -a -q "Could not resolve host" "$DB" && fail "purged output still in the database file"
fi
echo "run $id purged, accounting kept"
