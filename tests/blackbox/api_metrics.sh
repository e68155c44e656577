#!/bin/bash
# GET /metrics (docs/API.md): Prometheus text format without a key: runs by status from the store,
# queue depth, the sandbox start, exec and model call latency histograms, and HTTP request counts
# by method, route and status with a latency histogram, all moving with what the server did.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 90
have_image || skip "no sandbox image (make image)"
start_api_server '"max_concurrent_runs": 1'
metrics() { curl -fsS "$EPHEMERAL_URL/metrics"; }
value() { # TEXT SERIES: the value of one series ('name{labels}' exactly as printed)
    awk -v s="$2" '$1 == s {print $2; found=1} END {if (!found) print "absent"}' <<<"$1"
}

out=$(curl -sS -D "$TEST_TMP/h" "$EPHEMERAL_URL/metrics")
grep -qi '^Content-Type: text/plain; version=0.0.4' "$TEST_TMP/h" || fail "content type: $(cat "$TEST_TMP/h")"
assert_eq "$(value "$out" 'ephemeral_runs{status="completed"}')" 0 "no runs yet"
assert_eq "$(value "$out" 'ephemeral_sandbox_start_seconds_count')" 0 "no sandbox yet"

# One run with three commands (ticker), one blocked (slow) and one queued behind it.
id=$(new_run "$TICKER_PROMPT" 30000)
api GET "/v1/runs/$id" -H 'Prefer: wait=60' >/dev/null
assert_eq "$(run_field "$id" .status)" completed "ticker"
slow=$(new_run "$SLOW_PROMPT" 40000)
wait_command_running "$slow"
queued=$(new_run "$QUICK_PROMPT" 20000)
api GET /v1/nothing >/dev/null
as "eph_$(head -c 40 /dev/zero | tr '\0' Q)" api GET /v1/balance >/dev/null

m=$(metrics)
# The format: HELP/TYPE comments, then "name{labels} value" lines.
while IFS= read -r line; do
    case $line in
    "# HELP "* | "# TYPE "*) ;;
    *) [[ $line =~ ^[a-z_]+(\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\})?\ [0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?$ ]] ||
        fail "not a metric line: '$line'" ;;
    esac
done <<<"$m"
for t in "ephemeral_runs gauge" "ephemeral_queue_depth gauge" "ephemeral_sandbox_start_seconds histogram" \
    "ephemeral_exec_seconds histogram" "ephemeral_model_call_seconds histogram" \
    "ephemeral_http_requests_total counter" "ephemeral_http_request_duration_seconds histogram"; do
    grep -qx "# TYPE $t" <<<"$m" || fail "missing: # TYPE $t"
done
assert_eq "$(value "$m" 'ephemeral_runs{status="completed"}')" 1 "completed runs"
assert_eq "$(value "$m" 'ephemeral_runs{status="running"}')" 1 "running runs"
assert_eq "$(value "$m" 'ephemeral_runs{status="queued"}')" 1 "queued runs"
assert_eq "$(value "$m" 'ephemeral_queue_depth')" 1 "queue depth"
assert_eq "$(value "$m" 'ephemeral_sandbox_start_seconds_count')" 2 "sandbox starts"
assert_eq "$(value "$m" 'ephemeral_exec_seconds_count')" 3 "commands that finished"
# The ticker's commands sleep 0.4 s each: the histogram says so.
assert_eq "$(value "$m" 'ephemeral_exec_seconds_bucket{le="0.25"}')" 0 "no command under 0.25 s"
assert_eq "$(value "$m" 'ephemeral_exec_seconds_bucket{le="+Inf"}')" 3 "+Inf bucket"
assert_eq "$(value "$m" 'ephemeral_model_call_seconds_count')" 5 "model calls (4 + 1)"
assert_eq "$(value "$m" 'ephemeral_http_requests_total{method="POST",route="/v1/runs",code="201"}')" 3 "creations"
assert_eq "$(value "$m" 'ephemeral_http_requests_total{method="GET",route="other",code="404"}')" 1 "unknown path"
assert_eq "$(value "$m" 'ephemeral_http_requests_total{method="GET",route="/v1/balance",code="401"}')" 1 "401"
[ "$(value "$m" 'ephemeral_http_request_duration_seconds_count{route="/v1/runs/{id}"}')" -ge 1 ] || fail "latency of GET run"
# Buckets are cumulative and end at the count.
for h in ephemeral_exec_seconds ephemeral_model_call_seconds ephemeral_sandbox_start_seconds; do
    grep "^${h}_bucket" <<<"$m" | awk '{ if ($2 < last) exit 1; last = $2 }' || fail "$h buckets not cumulative"
    assert_eq "$(value "$m" "${h}_bucket{le=\"+Inf\"}")" "$(value "$m" "${h}_count")" "$h +Inf = count"
done
api POST "/v1/runs/$slow/cancel" >/dev/null
api GET "/v1/runs/$queued" -H 'Prefer: wait=30' >/dev/null
m=$(metrics)
assert_eq "$(value "$m" 'ephemeral_runs{status="cancelled"}')" 1 "cancelled runs"
assert_eq "$(value "$m" 'ephemeral_queue_depth')" 0 "queue drained"
# The store's round trips are PostgreSQL's only (pg_multinode checks that they grow): counted
# when api_postgres.sh runs this test on PostgreSQL, absent on SQLite.
if [ -n "${EPH_TEST_PG:-}" ]; then
    [ "$(value "$m" ephemeral_store_round_trips_total)" -gt 0 ] || fail "no round trips on PostgreSQL"
else
    ! grep -q '^ephemeral_store_round_trips_total' <<<"$m" || fail "round trips counted on SQLite"
fi
echo "metrics: ok"
