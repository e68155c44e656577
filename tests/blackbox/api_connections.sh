#!/bin/bash
# Connections (docs/API.md, docs/BROKER.md, docs/CLI.md): POST/GET/DELETE /v1/connections (admin), validation of name,
# base_url, methods, path prefixes and headers; header values are credentials: stored sealed
# (libsodium secretbox, key file created 0600 on first use), never returned (header names only),
# never logged, absent from the database file in the clear; runs may name the org's connections
# and only those; `ephemerald admin connection add` stores one the API then lists.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
test_deadline 90
start_api_server
SECRET=cred-canary-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
SECRET2=cli-canary-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
SECRET3=cli-query-canary-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
[ ! -e "$TEST_TMP/secret.key" ] || fail "the key file exists before first use"

conn=$(jq -cn --arg s "$SECRET" '{name: "github", base_url: "https://api.github.com",
    methods: ["GET", "POST"], path_prefixes: ["/repos/o/r"],
    headers: {"Authorization": ("Bearer " + $s), "X-Api-Version": "2022-11-28"}}')
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "$(code_of "$out")" 201 "create: $(body_of "$out")"
b=$(body_of "$out")
assert_not_contains "$b" "$SECRET" "create answer shows the credential"
assert_eq "$(jq -c '[.object, .name, .base_url, .methods, .path_prefixes, (.header_names | sort)]' <<<"$b")" \
    '["connection","github","https://api.github.com",["GET","POST"],["/repos/o/r"],["Authorization","X-Api-Version"]]' "connection"
[[ $(jq -r .id <<<"$b") =~ ^conn_[0-9a-f]{24}$ ]] || fail "id: $(jq -r .id <<<"$b")"
# The key file: created on first use, 0600, 32 bytes.
[ -f "$TEST_TMP/secret.key" ] || fail "no key file"
assert_eq "$(stat -c %a "$TEST_TMP/secret.key")" 600 "key file mode"
assert_eq "$(stat -c %s "$TEST_TMP/secret.key")" 32 "key file size"

# Defaults: GET only, every path, no headers.
out=$(api POST /v1/connections -H "Content-Type: application/json" -d '{"name": "plain_1", "base_url": "http://127.0.0.1:9"}')
assert_eq "$(code_of "$out")" 201 "minimal connection"
assert_eq "$(body_of "$out" | jq -c '[.methods, .path_prefixes, .header_names]')" '[["GET"],["/"],[]]' "defaults"

# Validation.
bad() { assert_error "$(api POST /v1/connections -H "Content-Type: application/json" -d "$1")" 400 invalid_request_error "$2"; }
ok_url='"base_url": "https://x.example"'
bad "{\"name\": \"Upper\", $ok_url}" name
bad "{\"name\": \"has space\", $ok_url}" name
bad "{\"name\": \"\", $ok_url}" name
bad "{\"name\": \"$(head -c 65 /dev/zero | tr '\0' a)\", $ok_url}" name
bad "{$ok_url}" name
bad '{"name": "n"}' base_url
bad '{"name": "n", "base_url": "ftp://x.example"}' base_url
bad '{"name": "n", "base_url": "https://"}' base_url
bad '{"name": "n", "base_url": "https://x.example/a b"}' base_url
bad '{"name": "n", "base_url": "file:///etc/passwd"}' base_url
bad "{\"name\": \"n\", $ok_url, \"methods\": [\"CONNECT\"]}" methods
bad "{\"name\": \"n\", $ok_url, \"methods\": [\"get\"]}" methods
bad "{\"name\": \"n\", $ok_url, \"methods\": []}" methods
bad "{\"name\": \"n\", $ok_url, \"methods\": \"GET\"}" methods
bad "{\"name\": \"n\", $ok_url, \"path_prefixes\": [\"repos\"]}" path_prefixes
bad "{\"name\": \"n\", $ok_url, \"path_prefixes\": [\"/a/../b\"]}" path_prefixes
bad "{\"name\": \"n\", $ok_url, \"headers\": {\"Bad Name\": \"v\"}}" headers
bad "{\"name\": \"n\", $ok_url, \"headers\": {\"X\": \"a\\r\\nInjected: 1\"}}" headers
bad "{\"name\": \"n\", $ok_url, \"headers\": {\"X\": 5}}" headers
bad "{\"name\": \"n\", $ok_url, \"headers\": [\"X: v\"]}" headers
bad "{\"name\": \"n\", $ok_url, \"secret\": \"x\"}" secret
# A refused header value is not echoed.
out=$(api POST /v1/connections -H "Content-Type: application/json" -d "{\"name\": \"n\", $ok_url, \"headers\": {\"X\": \"$SECRET\\n\"}}")
assert_error "$out" 400 invalid_request_error headers
assert_not_contains "$out" "$SECRET" "error echoes the credential"
# The name is unique in the org.
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "$(code_of "$out")" 409 "duplicate name"
assert_error "$out" 409 invalid_request_error name

# Reading: names of headers only, never their values.
out=$(api GET /v1/connections)
assert_eq "$(code_of "$out")" 200 "list"
assert_eq "$(body_of "$out" | jq -r '[.data[].name] | join(",")')" "github,plain_1" "listed"
assert_not_contains "$out" "$SECRET" "list shows the credential"
out=$(api GET /v1/connections/github)
assert_eq "$(code_of "$out")" 200 "get one"
assert_not_contains "$out" "$SECRET" "get shows the credential"
assert_not_contains "$out" "Bearer" "get shows part of the credential"
assert_error "$(api GET /v1/connections/nope)" 404 not_found_error

# Runs: a known connection is accepted, an unknown one refused.
out=$(create_run "$QUICK_PROMPT" 20000)
id=$(body_of "$out" | jq -r .id)
out=$(api POST /v1/runs -H 'Content-Type: application/json' -d "$(jq -cn --arg p "$QUICK_PROMPT" '{prompt: $p, max_cost_micros: 1000, connections: ["github"]}')")
assert_eq "$(code_of "$out")" 201 "run with a connection"
assert_eq "$(body_of "$out" | jq -c .permissions.connections)" '["github"]' "run's connections"
api POST "/v1/runs/$(body_of "$out" | jq -r .id)/cancel" >/dev/null
assert_error "$(api POST /v1/runs -H 'Content-Type: application/json' -d "$(jq -cn '{prompt: "p", max_cost_micros: 1000, connections: ["github", "gitlab"]}')")" \
    400 invalid_request_error connections
# Another org does not see ours, and cannot use it in a run.
other=$(new_org other)
assert_eq "$(as "$other" api GET /v1/connections | sed '$d' | jq '.data | length')" 0 "other org's connections"
assert_error "$(as "$other" api GET /v1/connections/github)" 404 not_found_error
assert_error "$(as "$other" api POST /v1/runs -H 'Content-Type: application/json' -d '{"prompt": "p", "max_cost_micros": 1000, "connections": ["github"]}')" \
    400 invalid_request_error connections
assert_error "$(as "$other" api DELETE /v1/connections/github)" 404 not_found_error

# The CLI adds one to the same store while the server runs.
cli_out=$("$EPHD" admin connection add --db "$DB" --config "$TEST_TMP/config.json" --org default \
    --name ci --base-url https://ci.example --methods GET,POST --path-prefix /api --path-prefix /v2 \
    --header "Authorization: Token $SECRET2" --header 'Accept: application/json' \
    --query "api_key=$SECRET3" --query=region=eu 2>"$TEST_TMP/cli.err")
rc=$?
assert_eq "$rc" 0 "admin connection add ($(cat "$TEST_TMP/cli.err"))"
[[ $cli_out =~ ^conn_[0-9a-f]{24}$ ]] || fail "admin connection add prints the id: $cli_out"
assert_not_contains "$(cat "$TEST_TMP/cli.err")" "$SECRET2" "the CLI shows the credential"
assert_not_contains "$(cat "$TEST_TMP/cli.err")" "$SECRET3" "the CLI shows the query credential"
out=$(api GET /v1/connections/ci)
assert_eq "$(body_of "$out" | jq -c '[.methods, .path_prefixes, (.header_names | sort), (.query_names | sort)]')" \
    '[["GET","POST"],["/api","/v2"],["Accept","Authorization"],["api_key","region"]]' "CLI connection"
assert_not_contains "$out" "$SECRET3" "the API shows the query credential"
"$EPHD" admin connection add --db "$DB" --config "$TEST_TMP/config.json" --org default --name ci \
    --base-url https://ci.example --methods GET 2>/dev/null && fail "duplicate via the CLI"
"$EPHD" admin connection add --db "$DB" --config "$TEST_TMP/config.json" --org default --name bad \
    --base-url ftp://x --methods GET 2>/dev/null
assert_eq "$?" 2 "CLI validation exit status"
for q in novalue =nameless; do
    "$EPHD" admin connection add --db "$DB" --config "$TEST_TMP/config.json" --org default \
        --name badq --base-url https://x.example --methods GET --query "$q" 2>"$TEST_TMP/q.err"
    assert_eq "$?" 2 "--query '$q' refused"
    assert_contains "$(cat "$TEST_TMP/q.err")" "--query 'name=value'" "--query '$q' says why"
done
"$EPHD" admin connection add --db "$DB" --config "$TEST_TMP/config.json" --org default \
    --name badq --base-url https://x.example --methods GET --query 2>/dev/null
assert_eq "$?" 2 "--query without a value"
"$EPHD" admin connection add --db "$DB" --org nosuch --name x --base-url https://x.example \
    --methods GET --config "$TEST_TMP/config.json" 2>/dev/null && fail "unknown org"

# At rest: the database holds neither credential in the clear.
sync
for f in "$DB" "$DB-wal"; do
    [ -e "$f" ] || continue
    grep -aq "$SECRET" "$f" && fail "credential in the clear in $f"
    grep -aq "$SECRET2" "$f" && fail "CLI credential in the clear in $f"
    grep -aq "$SECRET3" "$f" && fail "CLI query credential in the clear in $f"
done
sealed=$(sqlite3 -cmd '.timeout 5000' "$DB" "SELECT length(sealed_headers) FROM connections WHERE name = 'github'")
[ "$sealed" -gt 40 ] || fail "sealed blob: $sealed bytes"
# And no log line has it.
grep -q "$SECRET" "$SERVER_LOG" && fail "credential in the server log"
grep -q "$SECRET3" "$SERVER_LOG" && fail "query credential in the server log"

# A key file others may read is refused, with a clear error.
chmod 644 "$TEST_TMP/secret.key"
out=$(api POST /v1/connections -H "Content-Type: application/json" -d '{"name": "later", "base_url": "https://x.example", "headers": {"A": "b"}}')
assert_error "$out" 500 api_error
grep -q "may be read by others" "$SERVER_LOG" || fail "no log line about the key file's mode"
chmod 600 "$TEST_TMP/secret.key"

# Delete.
out=$(api DELETE /v1/connections/github)
assert_eq "$(code_of "$out")" 200 "delete"
assert_eq "$(body_of "$out" | jq -r .deleted)" true "deleted"
assert_error "$(api GET /v1/connections/github)" 404 not_found_error
assert_error "$(api DELETE /v1/connections/github)" 404 not_found_error
assert_error "$(api POST /v1/runs -H 'Content-Type: application/json' -d '{"prompt": "p", "max_cost_micros": 1000, "connections": ["github"]}')" \
    400 invalid_request_error connections
api POST "/v1/runs/$id/cancel" >/dev/null
echo "connections: ok"
