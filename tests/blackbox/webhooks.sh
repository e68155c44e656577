#!/bin/bash
# Signed webhooks (docs/WEBHOOKS.md) against receivers on loopback (a small python3 http.server of
# the test, opened by webhooks.allow_private_cidrs): an ended run's delivery arrives signed, and the
# signature checks over the raw body; a receiver that answers 500 then 200 gets the same event id
# twice, delivered on the second attempt, each attempt in the delivery's history; one that hangs has its timeout recorded while the run
# settles anyway; a 3xx is a failure and its target is never asked, as is a reset; a zero-data-retention run's
# delivery carries neither prompt nor result; a sandbox's end is one sandbox.ended with the
# sandbox object; /metrics counts the outcomes; a delivery still
# pending when the server stops is delivered after it starts again. The log reads in pages. Bad URLs are refused with a
# 400: another scheme, userinfo, loopback spellings outside the opened range, the server's own
# port. Every wait polls the deliveries endpoint under a bound.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/webhooks_common.sh"
. "$(dirname "$0")/broker_common.sh" # make_test_ca
test_deadline 240
have_image || skip "no sandbox image (make image)"

make_test_ca
start_receiver "$TEST_TMP/server.pem" "$TEST_TMP/server.key"
TLS_PORT=$RECV_PORT TLS_LOG=$RECV_LOG
start_receiver

# A configuration whose allow-list is not a list of CIDRs is refused at start, saying which.
api_config "$TEST_TMP/bad.json" '"webhooks": {"allow_private_cidrs": ["127.0.0.1/8"]}'
if "$EPHD" serve --config "$TEST_TMP/bad.json" --listen "127.0.0.1:$(free_port)" \
    --db "$TEST_TMP/bad.db" >"$TEST_TMP/bad.log" 2>&1; then
    fail "a bad webhooks.allow_private_cidrs was accepted"
fi
assert_contains "$(cat "$TEST_TMP/bad.log")" "webhooks.allow_private_cidrs[0] is not a CIDR" "the bad key named"

WEBHOOKS='"webhooks": {"allow_private_cidrs": ["127.0.0.1/32"], "retry_base_ms": 300},
    "broker": {"extra_ca_file": "'"$TEST_TMP/ca.pem"'"}'
start_api_server "$WEBHOOKS"
SERVER_PORT=${EPHEMERAL_URL##*:}
R=http://127.0.0.1:$RECV_PORT

create_webhook() { # JSON: prints api's output
    api POST /v1/webhooks -H 'Content-Type: application/json' -d "$1"
}
new_webhook() { # JSON: prints "ID SECRET"
    local out
    out=$(create_webhook "$1")
    [ "$(code_of "$out")" = 201 ] || fail "create webhook $1: $out"
    body_of "$out" | jq -r '"\(.id) \(.secret)"'
}
delivery() { # WEBHOOK_ID JQ: a field of its newest delivery
    api GET "/v1/webhooks/$1/deliveries" | sed '$d' | jq -r ".data[0] | $2"
}
delivery_is() { [ "$(delivery "$1" "$2")" = true ]; }
history() { # WEBHOOK_ID EVENT_ID JQ: over one delivery's attempts, oldest first
    api GET "/v1/webhooks/$1/deliveries/$2" | sed '$d' | jq -r ".history | $3"
}

# ---- bad input ----
for url in "ftp://127.0.0.1:$RECV_PORT/ok" "file:///etc/passwd" "http://user:pw@127.0.0.1:$RECV_PORT/ok" \
    "http://127.0.0.2:$RECV_PORT/ok" "http://0x7f000002:$RECV_PORT/ok" "http://[::1]:$RECV_PORT/ok" \
    "http://[::ffff:127.0.0.2]:$RECV_PORT/ok" "http://0.0.0.0:$RECV_PORT/ok" \
    "http://127.0.0.1:$SERVER_PORT/v1/runs" "not a url"; do
    out=$(create_webhook "$(jq -cn --arg u "$url" '{url: $u}')")
    assert_error "$out" 400 invalid_request_error url
done
assert_contains "$(create_webhook "{\"url\": \"http://127.0.0.2:$RECV_PORT/\"}")" "loopback address" "why a refused address is refused"
assert_contains "$(create_webhook "{\"url\": \"http://a@127.0.0.1:$RECV_PORT/\"}")" "user name or password" "why userinfo is refused"
assert_error "$(create_webhook '{}')" 400 invalid_request_error url
assert_error "$(create_webhook "{\"url\": \"$R/ok\", \"events\": [\"run.started\"]}")" 400 invalid_request_error events
assert_error "$(create_webhook "{\"url\": \"$R/ok\", \"events\": []}")" 400 invalid_request_error events
assert_error "$(create_webhook "{\"url\": \"$R/ok\", \"events\": \"run.completed\"}")" 400 invalid_request_error events
assert_error "$(create_webhook "{\"url\": \"$R/ok\", \"timeout_seconds\": 0}")" 400 invalid_request_error timeout_seconds
assert_error "$(create_webhook "{\"url\": \"$R/ok\", \"secret\": \"mine\"}")" 400 invalid_request_error
assert_eq "$(api GET /v1/webhooks | sed '$d' | jq '.data | length')" 0 "nothing stored by refused creates"
assert_error "$(api GET /v1/webhooks/wh_000000000000000000000000)" 404 not_found_error

# ---- endpoints ----
read -r OK OK_SECRET < <(new_webhook "{\"url\": \"$R/ok\"}")
read -r FLAKY _ < <(new_webhook "{\"url\": \"$R/flaky\", \"events\": [\"run.completed\"]}")
read -r HANG _ < <(new_webhook "{\"url\": \"$R/hang\", \"timeout_seconds\": 1}")
read -r REDIR _ < <(new_webhook "{\"url\": \"$R/redirect\"}")
read -r RESET _ < <(new_webhook "{\"url\": \"$R/reset\"}")
read -r TLS TLS_SECRET < <(new_webhook "{\"url\": \"https://127.0.0.1:$TLS_PORT/ok\", \"events\": [\"run.completed\"]}")
read -r FAILED_ONLY _ < <(new_webhook "{\"url\": \"$R/other\", \"events\": [\"run.failed\"]}")
[[ $OK_SECRET =~ ^whsec_[0-9a-f]{48}$ ]] || fail "secret form: $OK_SECRET"
got=$(api GET "/v1/webhooks/$OK" | sed '$d')
assert_eq "$(jq -r .url <<<"$got")" "$R/ok" "the endpoint's url"
assert_eq "$(jq -c .events <<<"$got")" '["run.completed","run.failed","run.timed_out","run.budget_exhausted","run.cancelled","sandbox.ended"]' "every terminal event by default"
assert_eq "$(jq 'has("secret")' <<<"$got")" false "the secret is shown once"
assert_not_contains "$(api GET /v1/webhooks)" "$OK_SECRET" "the secret in the list"
assert_not_contains "$(cat "$TEST_TMP/server.log")" "${OK_SECRET#whsec_}" "the secret in the log"

# ---- a run ends: its deliveries ----
id=$(new_run "$QUICK_PROMPT" 20000)
wait_until "the run to settle" 600 run_status_is "$id" completed
wait_until "the delivery to /ok" 400 delivery_is "$OK" '.status == "delivered"'
evt=$(delivery "$OK" .event_id)
[[ $evt =~ ^evt_[0-9a-f]{32}$ ]] || fail "event id: $evt"
assert_eq "$(delivery "$OK" '"\(.type) \(.attempts) \(.http_status) \(.error)"')" "run.completed 1 200 null" "the /ok delivery"
python3 - "$RECV_LOG" "$OK_SECRET" "$evt" "$id" <<'PY' || fail "the /ok delivery as received"
import hashlib, hmac, json, sys, time
log, secret, evt, run = sys.argv[1:]
got = [json.loads(l) for l in open(log) if json.loads(l)["path"] == "/ok"]
assert len(got) == 1, got
r = got[0]
t, v1 = r["sig"].split(",")
assert t.startswith("t=") and v1.startswith("v1="), r["sig"]
mac = hmac.new(secret.encode(), (t[2:] + "." + r["body"]).encode(), hashlib.sha256).hexdigest()
assert hmac.compare_digest(mac, v1[3:]), "signature does not verify"
assert abs(int(t[2:]) - time.time()) < 300, t
assert r["ct"] == "application/json" and r["ua"].startswith("ephemeral-webhooks/"), r
e = json.loads(r["body"])
assert e["id"] == evt and e["object"] == "event" and e["type"] == "run.completed", e
assert e["data"]["id"] == run and e["data"]["object"] == "run", e["data"]
assert e["data"]["status"] == "completed" and e["data"]["prompt"], e["data"]
assert e["data"]["cost"]["charged_micros"] + e["data"]["cost"]["released_micros"] == 20000
PY
echo "a signed delivery for the ended run, verified"

# HTTPS, the receiver's certificate from the operator's CA (broker.extra_ca_file): the same event.
wait_until "the https delivery" 400 delivery_is "$TLS" '.status == "delivered"'
assert_eq "$(jq -r '.body | fromjson | .id' "$TLS_LOG")" "$evt" "the event over https"
python3 - "$TLS_LOG" "$TLS_SECRET" <<'PY' || fail "the https delivery's signature"
import hashlib, hmac, json, sys
r = json.loads(open(sys.argv[1]).readline())
t, v1 = r["sig"].split(",")
mac = hmac.new(sys.argv[2].encode(), (t[2:] + "." + r["body"]).encode(), hashlib.sha256).hexdigest()
assert hmac.compare_digest(mac, v1[3:])
PY

# 500, then 200: retried with the same event id.
wait_until "the /flaky delivery" 400 delivery_is "$FLAKY" '.status == "delivered"'
assert_eq "$(delivery "$FLAKY" '"\(.event_id) \(.attempts) \(.http_status)"')" "$evt 2 200" "the /flaky delivery"
assert_eq "$(jq -r 'select(.path == "/flaky") | (.body | fromjson | .id)' "$RECV_LOG" | sort | uniq -c | awk '{print $1, $2}')" "2 $evt" "the same event twice at /flaky"
# Each attempt in the delivery's history: when, the answer, how long, why it failed.
assert_eq "$(history "$FLAKY" "$evt" 'map("\(.attempt) \(.outcome) \(.http_status) \(.error)") | join(", ")')" \
    "1 retried 500 HTTP 500, 2 delivered 200 null" "the /flaky delivery's attempts"
assert_eq "$(history "$FLAKY" "$evt" 'map((.at | test("^20[0-9-]+T[0-9:.]+Z$")) and .duration_ms >= 0) | all')" true "each attempt's time and duration"
one=$(api GET "/v1/webhooks/$FLAKY/deliveries/$evt" | sed '$d')
assert_eq "$(jq -r '"\(.object) \(.event_id) \(.status) \(.attempts)"' <<<"$one")" "webhook_delivery $evt delivered 2" "the delivery on its own"
echo "500 then 200: delivered on the second attempt, the same id"

# A receiver that hangs: the attempt's timeout is recorded, the run was settled regardless.
wait_until "the /hang attempt" 400 delivery_is "$HANG" '.attempts >= 1'
assert_eq "$(delivery "$HANG" '"\(.status) \(.error)"')" "pending no answer within 1 s" "the /hang delivery"
assert_eq "$(run_field "$id" .status)" completed "the run, settled while its receiver hangs"
assert_eq "$(history "$HANG" "$evt" '.[0] | "\(.outcome) \(.http_status) \(.error)"')" "retried null no answer within 1 s" "the /hang attempt in the history"
echo "a hanging receiver: timed out, retried, the run settled"

# 3xx: a failure, its Location never asked.
wait_until "the /redirect attempt" 400 delivery_is "$REDIR" '.attempts >= 1'
assert_eq "$(delivery "$REDIR" '"\(.http_status) \(.error)"')" "302 HTTP 302: redirects are not followed" "the /redirect delivery"
assert_eq "$(jq -r 'select(.path == "/redirected") | .path' "$RECV_LOG" | wc -l)" 0 "the redirect followed"
# A reset without an answer: a failure with curl's reason, retried.
wait_until "the /reset attempt" 400 delivery_is "$RESET" '.attempts >= 1'
assert_eq "$(delivery "$RESET" '"\(.status) \(.http_status)"')" "pending null" "the /reset delivery"
[ "$(delivery "$RESET" .error)" != null ] || fail "no error recorded for a reset"
[ "$(history "$RESET" "$evt" '.[0].error')" != null ] || fail "no error in the reset's history"
# A delivery that is not there, asked wrongly, or of an endpoint that is not: clear errors.
assert_error "$(api GET "/v1/webhooks/$OK/deliveries/evt_$(printf '0%.0s' {1..32})")" 404 not_found_error
assert_error "$(api GET "/v1/webhooks/$OK/deliveries/nope")" 404 not_found_error
assert_error "$(api GET "/v1/webhooks/$FAILED_ONLY/deliveries/$evt")" 404 not_found_error
assert_error "$(api GET "/v1/webhooks/wh_000000000000000000000000/deliveries/$evt")" 404 not_found_error
assert_error "$(api GET "/v1/webhooks/$OK/deliveries/$evt?limit=2")" 400 invalid_request_error
assert_error "$(api GET "/v1/webhooks/$OK/deliveries?after=run_1")" 400 invalid_request_error after
assert_error "$(api GET "/v1/webhooks/$OK/deliveries?limit=0")" 400 invalid_request_error limit
assert_error "$(api GET "/v1/webhooks/$OK/deliveries?cursor=x")" 400 invalid_request_error
# An endpoint that asked for other events got none.
assert_eq "$(api GET "/v1/webhooks/$FAILED_ONLY/deliveries" | sed '$d' | jq '.data | length')" 0 "deliveries of another type"

# Zero data retention: no prompt, no result.
ZDR_PROMPT=$QUICK_PROMPT
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
    -d "$(jq -cn --arg p "$ZDR_PROMPT" '{prompt: $p, max_cost_micros: 20000, zero_data_retention: true}')")
assert_eq "$(code_of "$out")" 201 "a zero-data-retention run"
zid=$(body_of "$out" | jq -r .id)
wait_until "the run to settle" 600 run_status_is "$zid" completed
zdr_arrived() { [ "$(jq -r --arg z "$zid" 'select(.path == "/ok") | (.body | fromjson | select(.data.id == $z) | .id)' "$RECV_LOG")" != "" ]; }
wait_until "the zero-data-retention delivery" 400 zdr_arrived
zbody=$(jq -r --arg z "$zid" 'select(.path == "/ok") | .body | select(fromjson | .data.id == $z)' "$RECV_LOG")
assert_eq "$(jq -c '[.data.prompt, .data.result]' <<<"$zbody")" "[null,null]" "prompt and result of a zero-data-retention run"
assert_not_contains "$zbody" "$ZDR_PROMPT" "the prompt in the delivery"

# A sandbox a caller drives: its end is one sandbox.ended, the sandbox object its data.
out=$(api POST /v1/sandboxes -H 'Content-Type: application/json' -H 'Prefer: wait=120' -d '{"max_cost_micros": 20000}')
assert_eq "$(code_of "$out")" 201 "a sandbox: $out"
sid=$(body_of "$out" | jq -r .id)
assert_eq "$(code_of "$(api DELETE "/v1/sandboxes/$sid")")" 200 "the sandbox deleted"
sbx_arrived() { [ -n "$(jq -r --arg s "$sid" 'select(.path == "/ok") | (.body | fromjson | select(.data.id == $s) | .id)' "$RECV_LOG")" ]; }
wait_until "the sandbox's delivery" 400 sbx_arrived
sbody=$(jq -r --arg s "$sid" 'select(.path == "/ok") | .body | select(fromjson | .data.id == $s)' "$RECV_LOG")
assert_eq "$(jq -r '"\(.type) \(.data.object)"' <<<"$sbody")" "sandbox.ended sandbox" "the sandbox's event"
assert_eq "$(api GET "/v1/webhooks/$FLAKY/deliveries" | sed '$d' | jq '[.data[] | select(.type == "sandbox.ended")] | length')" 0 "sandbox.ended to an endpoint that did not ask"

# The /ok log in pages of one: each after the last of the one before, newest first, the same as
# the whole list, the last page with no more.
all=$(api GET "/v1/webhooks/$OK/deliveries?limit=100" | sed '$d')
assert_eq "$(jq '.data | length' <<<"$all")" 3 "the /ok deliveries (a run, a zero-data-retention run, a sandbox)"
paged="" after="" more=true
while [ "$more" = true ]; do
    page=$(api GET "/v1/webhooks/$OK/deliveries?limit=1${after:+&after=$after}" | sed '$d')
    assert_eq "$(jq '.data | length' <<<"$page")" 1 "a page of one"
    after=$(jq -r '.data[0].event_id' <<<"$page")
    paged="$paged$after "
    more=$(jq -r .has_more <<<"$page")
done
assert_eq "$paged" "$(jq -r '.data[].event_id' <<<"$all" | tr '\n' ' ')" "the pages, one after the other"
assert_eq "$(api GET "/v1/webhooks/$OK/deliveries?after=$after" | sed '$d' | jq -c '[.data, .has_more]')" "[[],false]" "after the last"

metrics=$(curl -sS "$EPHEMERAL_URL/metrics")
delivered=$(awk '/^ephemeral_webhook_deliveries_total\{outcome="delivered"\}/ {print $2}' <<<"$metrics")
retried=$(awk '/^ephemeral_webhook_deliveries_total\{outcome="retried"\}/ {print $2}' <<<"$metrics")
[ "${delivered:-0}" -ge 3 ] || fail "delivered count: ${delivered:-none}"
[ "${retried:-0}" -ge 3 ] || fail "retried count: ${retried:-none}"

# ---- deleted endpoints ----
for w in "$OK" "$FLAKY" "$HANG" "$REDIR" "$RESET" "$TLS" "$FAILED_ONLY"; do
    out=$(api DELETE "/v1/webhooks/$w")
    assert_eq "$(code_of "$out")" 200 "delete $w"
    assert_error "$(api GET "/v1/webhooks/$w")" 404 not_found_error
done
assert_error "$(api DELETE "/v1/webhooks/$OK")" 404 not_found_error
assert_eq "$(api GET /v1/webhooks | sed '$d' | jq '.data | length')" 0 "endpoints after deletes"

# ---- a restart with a delivery pending ----
read -r DOWN _ < <(new_webhook "{\"url\": \"$R/down\"}")
id2=$(new_run "$QUICK_PROMPT" 20000)
wait_until "the run to settle" 600 run_status_is "$id2" completed
wait_until "a failed attempt at /down" 400 delivery_is "$DOWN" '.attempts >= 1 and .http_status == 500'
evt2=$(delivery "$DOWN" .event_id)
kill -TERM "$SERVER_PID"
wait_until "the server to stop" 400 eval '! kill -0 "$SERVER_PID" 2>/dev/null'
assert_eq "$(sqlite3 -cmd '.timeout 5000' "$DB" "SELECT state FROM webhook_deliveries WHERE event_id = '$evt2'")" \
    pending "the delivery in the store while the server is down"
touch "$RECV_UP"
"$EPHD" serve --listen "127.0.0.1:$SERVER_PORT" --db "$DB" --config "$TEST_TMP/config.json" \
    >>"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
_pids+=("$SERVER_PID")
wait_until "the server after the restart" 400 curl -fs -o /dev/null "$EPHEMERAL_URL/healthz"
wait_until "the /down delivery after the restart" 400 delivery_is "$DOWN" '.status == "delivered"'
assert_eq "$(delivery "$DOWN" '"\(.event_id) \(.http_status)"')" "$evt2 200" "the pending delivery, after the restart"
assert_eq "$(jq -r 'select(.path == "/down") | (.body | fromjson | .id)' "$RECV_LOG" | sort -u)" "$evt2" "one event id at /down"
# Its history kept the attempts made before the restart and the one after.
assert_eq "$(history "$DOWN" "$evt2" '[length == ('"$(delivery "$DOWN" .attempts)"'), (.[0].http_status == 500), (.[-1].outcome == "delivered")] | all')" \
    true "the history across the restart"
echo "a pending delivery survived the restart and was delivered after it"
