#!/bin/bash
# Authentication and keys (docs/API.md): a missing, malformed, unknown or revoked key gets 401;
# admin endpoints refuse a member key with 403 permission_error; POST /v1/keys shows the new key
# once, GET lists id, role, created_at and a short prefix but never the key or its hash, DELETE
# revokes; a key of another organization gets 404 for a run (never 403, never its data) and its
# list does not show it; /healthz and /metrics need no key.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 90
start_api_server
ADMIN=$EPHEMERAL_API_KEY

# No key, a malformed one, an unknown one.
out=$(curl -sS -w '\nHTTP %{http_code}\n' "$EPHEMERAL_URL/v1/balance")
assert_error "$out" 401 authentication_error
for h in "Bearer" "Bearer " "Basic $ADMIN" "Bearer eph_short" "Bearer ${ADMIN}x" "$ADMIN"; do
    out=$(curl -sS -w '\nHTTP %{http_code}\n' "$EPHEMERAL_URL/v1/balance" -H "Authorization: $h")
    assert_error "$out" 401 authentication_error
done
unknown="eph_$(head -c 200 /dev/urandom | tr -dc 'A-Za-z0-9' | head -c 40)"
out=$(as "$unknown" api GET /v1/balance)
assert_error "$out" 401 authentication_error
assert_not_contains "$out" "$unknown" "the answer echoes the key"
# The answers to POSTs too: nothing is created without a key.
out=$(as "$unknown" create_run "$QUICK_PROMPT" 1000)
assert_error "$out" 401 authentication_error

# A 401 names the scheme (RFC 6750), and says "invalid_token" only when a key was sent.
hdr=$(curl -sS -o /dev/null -D - "$EPHEMERAL_URL/v1/balance" | tr -d '\r')
assert_contains "$hdr" 'WWW-Authenticate: Bearer realm="ephemeral"' "401 without a key"
assert_not_contains "$hdr" 'invalid_token' "401 without a key"
hdr=$(curl -sS -o /dev/null -D - "$EPHEMERAL_URL/v1/balance" -H "Authorization: Bearer $unknown" |
    tr -d '\r')
assert_contains "$hdr" 'WWW-Authenticate: Bearer realm="ephemeral", error="invalid_token"' \
    "401 for an unknown key"
hdr=$(curl -sS -o /dev/null -D - "$EPHEMERAL_URL/v1/balance" -H "Authorization: Bearer $ADMIN" |
    tr -d '\r')
assert_not_contains "$hdr" 'WWW-Authenticate' "a good key's answer"

# Unauthenticated endpoints.
assert_eq "$(curl -s -o /dev/null -w '%{http_code}' "$EPHEMERAL_URL/healthz")" 200 "healthz"
assert_eq "$(curl -s -o /dev/null -w '%{http_code}' "$EPHEMERAL_URL/metrics")" 200 "metrics"

# Keys: create (shown once), list (never the key or its hash), revoke.
out=$(api POST /v1/keys -H 'Content-Type: application/json' -d '{"role": "member"}')
assert_eq "$(code_of "$out")" 201 "create key: $out"
member=$(body_of "$out" | jq -r .key)
member_id=$(body_of "$out" | jq -r .id)
[[ $member =~ ^eph_[A-Za-z0-9]{40}$ ]] || fail "new key: $member"
assert_eq "$(body_of "$out" | jq -r .role)" member "role"
assert_eq "$(body_of "$out" | jq -r .prefix)" "${member:0:8}" "prefix"
out=$(api POST /v1/keys -H "Content-Type: application/json" -d '{}')
assert_eq "$(code_of "$out")" 201 "create key with defaults"
assert_eq "$(body_of "$out" | jq -r .role)" member "default role"
second_id=$(body_of "$out" | jq -r .id)
assert_error "$(api POST /v1/keys -H "Content-Type: application/json" -d '{"role": "owner"}')" 400 invalid_request_error role
assert_error "$(api POST /v1/keys -H "Content-Type: application/json" -d '{"role": "member", "scope": "x"}')" 400 invalid_request_error scope

list=$(api GET /v1/keys)
assert_eq "$(code_of "$list")" 200 "list keys"
body=$(body_of "$list")
assert_eq "$(jq '.data | length' <<<"$body")" 3 "keys listed (admin + 2)"
assert_eq "$(jq -c '[.data[] | keys] | unique' <<<"$body")" \
    '[["created_at","id","object","prefix","role"]]' "key fields"
assert_eq "$(jq -r --arg id "$member_id" '.data[] | select(.id == $id) | .prefix' <<<"$body")" \
    "${member:0:8}" "listed prefix"
assert_not_contains "$body" "$member" "list shows the key"
assert_not_contains "$body" "${ADMIN:8}" "list shows the admin key"
hash=$(printf '%s' "$member" | sha256sum | cut -d' ' -f1)
assert_not_contains "$body" "$hash" "list shows the hash"
assert_not_contains "$body" "${hash:0:16}" "list shows part of the hash"
jq -e '.data[] | select(.role == "admin")' <<<"$body" >/dev/null || fail "admin key not listed"

# The member key works for runs and balance, but not for admin endpoints.
out=$(as "$member" api GET /v1/balance)
assert_eq "$(code_of "$out")" 200 "member balance"
for req in "GET /v1/keys" "POST /v1/keys" "DELETE /v1/keys/$second_id" "GET /v1/connections" \
    "POST /v1/connections" "DELETE /v1/connections/x" "POST /v1/credits"; do
    out=$(as "$member" api ${req% *} "${req#* }" -H 'Content-Type: application/json' \
        -d '{"micros": 5, "role": "member", "name": "x", "base_url": "https://x.example"}')
    assert_error "$out" 403 permission_error
done
# Nothing was done by the refused requests: still 3 keys, the same balance.
assert_eq "$(api GET /v1/keys | sed '$d' | jq '.data | length')" 3 "keys after 403s"

# Revocation: the key stops working at once; revoking again or an unknown id is 404.
out=$(api DELETE "/v1/keys/$member_id")
assert_eq "$(code_of "$out")" 200 "revoke"
assert_eq "$(body_of "$out" | jq -r .deleted)" true "deleted"
out=$(as "$member" api GET /v1/balance)
assert_error "$out" 401 authentication_error
assert_error "$(api DELETE "/v1/keys/$member_id")" 404 not_found_error
assert_error "$(api DELETE /v1/keys/key_000000000000000000000000)" 404 not_found_error
assert_eq "$(api GET /v1/keys | sed '$d' | jq '.data | length')" 2 "keys after revoke"

# Another organization: its admin key cannot see, list, follow or cancel our run.
id=$(new_run "$QUICK_PROMPT" 20000)
other=$(new_org other) || fail "second org"
[[ $other =~ ^eph_ ]] || fail "other org key: $other"
for p in "/v1/runs/$id" "/v1/runs/$id/events"; do
    out=$(as "$other" api GET "$p")
    assert_error "$out" 404 not_found_error
    assert_not_contains "$out" "$QUICK_PROMPT" "another org sees the prompt"
done
out=$(as "$other" api GET "/v1/runs/$id/events" -H 'Accept: text/event-stream')
assert_error "$out" 404 not_found_error
out=$(as "$other" api POST "/v1/runs/$id/cancel")
assert_error "$out" 404 not_found_error
out=$(as "$other" api GET /v1/runs)
assert_eq "$(code_of "$out")" 200 "other list"
assert_eq "$(body_of "$out" | jq '.data | length')" 0 "other org's list"
# The cursor of another org's run pages nothing.
out=$(as "$other" api GET "/v1/runs?after=$id")
assert_eq "$(body_of "$out" | jq '.data | length')" 0 "other org's list after our run"
# Its keys are its own.
assert_eq "$(as "$other" api GET /v1/keys | sed '$d' | jq '.data | length')" 1 "other org's keys"
assert_error "$(as "$other" api DELETE "/v1/keys/$second_id")" 404 not_found_error
# Our run is intact and ours.
wait_until "the run to finish" 400 run_status_is "$id" completed
assert_eq "$(run_field "$id" .result)" "quick answer" "our run"
echo "auth: ok"
