#!/bin/bash
# Both clients (clients/python, clients/typescript) cover every operation of docs/openapi.yaml:
# tests/blackbox/client_coverage.py fails, naming it, when an operationId of the document is
# missing from either client's table, its method or path differ, neither a method nor the
# coverage test calls it. No server: it reads the files.
. "$(dirname "$0")/lib.sh"
python3 -c 'import yaml' 2>/dev/null || fail "python3 has no yaml (Debian: python3-yaml)"
out=$(python3 "$TOP/tests/blackbox/client_coverage.py" "$TOP" 2>&1) || fail "$out"
printf '%s\n' "$out"

# The check itself: a document with one operation more fails it, by name.
mkdir -p "$TEST_TMP/top/docs" || fail "mkdir"
ln -s "$TOP/clients" "$TEST_TMP/top/clients" || fail "ln"
awk '{print} /^paths:/ {print "  /v1/widgets:"; print "    get:"; print "      operationId: listWidgets"; print "      responses:"; print "        \"200\": {description: ok}"}' \
    "$TOP/docs/openapi.yaml" >"$TEST_TMP/top/docs/openapi.yaml" || fail "awk"
out=$(python3 "$TOP/tests/blackbox/client_coverage.py" "$TEST_TMP/top" 2>&1) && fail "an operation no client has passed"
assert_contains "$out" "python: listWidgets (GET /v1/widgets) is not in the client's table" "python named"
assert_contains "$out" "typescript: listWidgets (GET /v1/widgets) is not in the client's table" "typescript named"
echo "client coverage: checked, and fails on an operation the clients lack"
