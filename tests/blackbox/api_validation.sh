#!/bin/bash
# docs/API.md: every rule of the create-run table is enforced with 400 and error.param naming
# the field, unknown fields and bodies that are not JSON objects are refused, a body over the
# configured limit gets 413 (with and without Content-Length), every error has the docs/API.md shape,
# and a request that fails validation stores nothing (no run, no reservation, its idempotency key
# still free).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 300
# The replay model reads one recording, so that it answers every prompt: the bodies below are
# about validation, and any valid prompt must get as far as a run (docs/AGENT.md: a transcripts
# file, not a folder, is replayed for every run).
validation_config() { # FILE [extra top-level JSON]
    api_config "$1" "${2:-}"
    jq --arg t "$FIXTURES/quick/transcript.jsonl" '.models[0].transcripts = $t' "$1" >"$1.tmp" &&
        mv "$1.tmp" "$1"
}
validation_config "$TEST_TMP/config.json"
start_server --config "$TEST_TMP/config.json"

post() { # JSON [curl args]: POST /v1/runs with that body
    local body=$1
    shift
    api POST /v1/runs -H 'Content-Type: application/json' --data-binary "$body" "$@"
}
# bad JSON PARAM [TYPE]: the body is refused with 400 naming PARAM.
bad() {
    local out
    out=$(post "$1")
    assert_error "$out" 400 invalid_request_error "$2"
}
base='{"prompt": "p", "max_cost_micros": 1000}'
with() { jq -c "$1" <<<"$base"; } # with JQ-EXPR: the base body changed by a jq expression

# prompt
bad '{"max_cost_micros": 1000}' prompt
bad "$(with '.prompt = ""')" prompt
bad "$(with '.prompt = 5')" prompt
bad "$(with '.prompt = null')" prompt
bad "$(with '.prompt = ["x"]')" prompt
bad "$(with '.prompt = "a\u0000b"')" prompt
big=$(head -c 65537 /dev/zero | tr '\0' a)
bad "{\"prompt\": \"$big\", \"max_cost_micros\": 1000}" prompt
# exactly 64 KiB is accepted (checked below with the other valid bodies)
max_prompt=$(head -c 65536 /dev/zero | tr '\0' a)

# model
bad "$(with '.model = "no-such-model"')" model
bad "$(with '.model = 1')" model

# booleans
for f in shell web zero_data_retention; do
    bad "$(with ".$f = \"true\"")" "$f"
    bad "$(with ".$f = 1")" "$f"
    bad "$(with ".$f = null")" "$f"
done

# connections
bad "$(with '.connections = "github"')" connections
bad "$(with '.connections = [1]')" connections
bad "$(with '.connections = ["no-such-connection"]')" connections

# files
bad "$(with '.files = {}')" files
bad "$(with '.files = [range(101) | {path: "f\(.)", content: "x"}]')" files
# 10 MiB in all is the cap: two files of 5 MiB + 1 byte each, once as text, once as base64.
python3 - "$TEST_TMP" <<'PY'
import base64, json, sys
half = "a" * (5 * 1024 * 1024 + 1)
for name, files in (("text", [{"path": "a", "content": half}, {"path": "b", "content": half}]),
                    ("b64", [{"path": "a", "content_base64": base64.b64encode(half.encode()).decode()},
                             {"path": "b", "content_base64": base64.b64encode(half.encode()).decode()}])):
    with open(f"{sys.argv[1]}/files-{name}.json", "w") as f:
        json.dump({"prompt": "p", "max_cost_micros": 1000, "files": files}, f)
with open(f"{sys.argv[1]}/huge.json", "w") as f:
    json.dump({"prompt": "a" * 250000, "max_cost_micros": 1}, f)
PY
for f in text b64; do
    out=$(api POST /v1/runs -H 'Content-Type: application/json' --data-binary "@$TEST_TMP/files-$f.json")
    assert_error "$out" 400 invalid_request_error files
done
bad "$(with '.files = ["x"]')" "files[0]"
bad "$(with '.files = [{path: "/etc/passwd", content: "x"}]')" "files[0].path"
bad "$(with '.files = [{path: "../x", content: "x"}]')" "files[0].path"
bad "$(with '.files = [{path: "a/../../x", content: "x"}]')" "files[0].path"
bad "$(with '.files = [{path: "a\u0000b", content: "x"}]')" "files[0].path"
bad "$(with '.files = [{path: "", content: "x"}]')" "files[0].path"
bad "$(with '.files = [{path: 3, content: "x"}]')" "files[0].path"
bad "$(with '.files = [{path: "a", content: "x", content_base64: "eA=="}]')" "files[0]"
bad "$(with '.files = [{path: "a"}]')" "files[0]"
bad "$(with '.files = [{path: "a", content_base64: "not base64!"}]')" "files[0].content_base64"
bad "$(with '.files = [{path: "a", content: "x", mode: "0777"}]')" "files[0].mode"
bad "$(with '.files = [{path: "ok", content: "x"}, {path: "/abs", content: "y"}]')" "files[1].path"
# paths the run could not use as files: the same rule as the client's (common/text.c)
for p in . a/. ./a a/ a//b "a\u0001b" "a\u007fb" "a\nb"; do
    bad "$(with ".files = [{path: \"$p\", content: \"x\"}]")" "files[0].path"
done
bad "$(with '.files = [{path: "a", content: "x"}, {path: "a", content: "y"}]')" "files[1].path"
bad "$(with '.files = [{path: "a", content: "x"}, {path: "a/b", content: "y"}]')" "files[1].path"
bad "$(with '.files = [{path: "a/b/c", content: "x"}, {path: "a/b", content: "y"}]')" "files[1].path"

# timeout_seconds
for t in 0 3601 -1 '"60"' 3.5 null true; do
    bad "$(with ".timeout_seconds = $t")" timeout_seconds
done

# max_cost_micros
bad '{"prompt": "p"}' max_cost_micros
for c in 0 -5 '"1000"' 1.5 null; do
    bad "$(with ".max_cost_micros = $c")" max_cost_micros
done

# metadata
bad "$(with '.metadata = [1]')" metadata
bad "$(with '.metadata = ([range(17) | {key: "k\(.)", value: "v"}] | from_entries)')" metadata
bad "$(with ".metadata = {\"$(head -c 65 /dev/zero | tr '\0' k)\": \"v\"}")" metadata
bad "$(with ".metadata = {\"k\": \"$(head -c 513 /dev/zero | tr '\0' v)\"}")" metadata
bad "$(with '.metadata = {"k": 1}')" metadata
bad "$(with '.metadata = {"k": null}')" metadata

# unknown fields, at the top level, named in param
bad "$(with '.permissions = {}')" permissions
bad "$(with '.Shell = true')" Shell

# not JSON, not an object, duplicated keys
for body in '{"prompt": ' 'not json' '[]' '"a string"' '42' '' \
    '{"prompt": "a", "prompt": "b", "max_cost_micros": 1}'; do
    out=$(post "$body")
    assert_error "$out" 400 invalid_request_error
done
# a content type that is not JSON: 415, on every endpoint that takes a body
out=$(api POST /v1/runs -H 'Content-Type: text/plain' --data-binary "$base")
assert_error "$out" 415 invalid_request_error
out=$(api POST /v1/runs --data-binary "$base") # curl's default, a form
assert_error "$out" 415 invalid_request_error
out=$(api POST /v1/credits -H 'Content-Type: application/jsonx' -d '{"micros": 1}')
assert_error "$out" 415 invalid_request_error
out=$(api POST /v1/runs -H 'Content-Type: Application/JSON; charset=utf-8' --data-binary '{}')
assert_error "$out" 400 invalid_request_error prompt

# The largest valid values pass: a 64 KiB prompt, 100 files, 16 metadata pairs of the maximum
# sizes, timeout 3600. Each reserves its budget: the test org has $100.
ok() {
    local out
    out=$(post "$1")
    assert_eq "$(code_of "$out")" 201 "valid body refused: $(body_of "$out" | head -c 300)"
    body_of "$out" | jq -r .id
}
# (a 64 KiB prompt's first model call needs more than $0.001: budget_too_small below that)
id1=$(ok "{\"prompt\": \"$max_prompt\", \"max_cost_micros\": 100000}")
id2=$(ok "$(with '.files = [range(100) | {path: "d/f\(.)", content: "x"}] | .timeout_seconds = 3600')")
k64=$(head -c 64 /dev/zero | tr '\0' k)
v512=$(head -c 512 /dev/zero | tr '\0' v)
id3=$(ok "$(jq -c --arg k "$k64" --arg v "$v512" \
    '.metadata = ([range(16) | {key: ("\(.)" + $k[2:]), value: $v}] | from_entries)' <<<"$base")")
got=$(run_field "$id3" '.metadata | length')
assert_eq "$got" 16 "metadata stored"
assert_eq "$(run_field "$id2" '.permissions.timeout_seconds')" 3600 "timeout stored"
for id in "$id1" "$id2" "$id3"; do
    api POST "/v1/runs/$id/cancel" >/dev/null
done

# 413: a second server on the same store with a small max_body_bytes (from its config file).
# Over the limit, announced by Content-Length ...
validation_config "$TEST_TMP/small.json" '"max_body_bytes": 200000'
start_server --config "$TEST_TMP/small.json"
out=$(post "$base")
assert_eq "$(code_of "$out")" 201 "a small body passes the small limit"
api POST "/v1/runs/$(body_of "$out" | jq -r .id)/cancel" >/dev/null
out=$(api POST /v1/runs -H 'Content-Type: application/json' --data-binary "@$TEST_TMP/huge.json")
assert_error "$out" 413 invalid_request_error
# ... and sent chunked, without a Content-Length.
out=$(api POST /v1/runs -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' \
    --data-binary "@$TEST_TMP/huge.json")
assert_error "$out" 413 invalid_request_error

# Other endpoints validate too: list's query, credits' body.
assert_error "$(api GET '/v1/runs?limit=0')" 400 invalid_request_error limit
assert_error "$(api GET '/v1/runs?limit=101')" 400 invalid_request_error limit
assert_error "$(api GET '/v1/runs?limit=x')" 400 invalid_request_error limit
assert_error "$(api GET '/v1/runs?status=bogus')" 400 invalid_request_error status
assert_error "$(api GET '/v1/runs?after=nope')" 400 invalid_request_error after
assert_error "$(api POST /v1/credits -H "Content-Type: application/json" -d '{"micros": 0}')" 400 invalid_request_error micros
assert_error "$(api POST /v1/credits -H "Content-Type: application/json" -d '{"micros": 5, "x": 1}')" 400 invalid_request_error x
assert_error "$(api GET /v1/nothing)" 404 not_found_error
assert_error "$(api DELETE /v1/runs)" 405 invalid_request_error
assert_error "$(api GET /v1/runs/run_0123456789abcdef0123456789abcdef)" 404 not_found_error
assert_error "$(api GET /v1/runs/not-a-run-id)" 404 not_found_error

# Validation failures store nothing: only the three valid runs exist, and an idempotency key
# used by a failed request is still free for a valid one.
assert_eq "$(api GET '/v1/runs?limit=100' | sed '$d' | jq '.data | length')" 4 "runs stored"
out=$(post '{"prompt": ""}' -H 'Idempotency-Key: reused-after-400')
assert_error "$out" 400 invalid_request_error prompt
out=$(post "$(with '.max_cost_micros = 99999999999')" -H 'Idempotency-Key: reused-after-400')
assert_error "$out" 402 insufficient_balance_error max_cost_micros
out=$(post "$(with '.prompt = "a different body"')" -H 'Idempotency-Key: reused-after-400')
assert_eq "$(code_of "$out")" 201 "key free after failures: $out"
echo "validation: all rules enforced"
