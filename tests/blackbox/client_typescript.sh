#!/bin/bash
# The TypeScript client (clients/typescript, docs/CLIENTS.md) against the real server: installed from its
# lock file with npm ci (when node_modules is absent or older than the lock), built with tsc,
# then its node --test suite: the seed example end to end, list paging and the metadata filter,
# typed errors, idempotent creates, HEAD operations, the admin calls, retries after Retry-After
# and resumed event streams through stand-in servers on loopback, verifySignature, that every
# operation of docs/openapi.yaml is one the client sends, and that the generated types are fresh.
# Then the example script and the README's ten lines, run as written.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/api_common.sh"
. "$(dirname "$0")/client_common.sh"
test_deadline 600
have_image || skip "no sandbox image (make image)"
command -v node >/dev/null && command -v npm >/dev/null || skip "no node and npm (Debian: nodejs npm)"
major=$(node -p 'process.versions.node.split(".")[0]') || fail "node -p"
[ "$major" -ge 18 ] || skip "node $major: the client needs Node.js 18 or later"

pkg=$TOP/clients/typescript
if [ ! -e "$pkg/node_modules/.package-lock.json" ] ||
    [ "$pkg/package-lock.json" -nt "$pkg/node_modules/.package-lock.json" ]; then
    (cd "$pkg" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error >"$TEST_TMP/npm.log" 2>&1) ||
        skip "npm ci failed (no registry and no cache?): $(tail -3 "$TEST_TMP/npm.log")"
fi
(cd "$pkg" && npm run --silent build) || fail "npm run build"

start_client_server

out=$(cd "$pkg" && node --test --test-reporter=tap test/*.test.mjs 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || fail "the TypeScript client's tests failed"
skipped=$(sed -n 's/^# skipped \([0-9]*\)$/\1/p' <<<"$out")
[ "${skipped:-x}" = 0 ] || fail "${skipped:-?} tests skipped"
passed=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' <<<"$out")
[ "${passed:-0}" -ge 27 ] || fail "only ${passed:-0} tests passed"

# The package as an application imports it: by its name, through package.json's exports.
mkdir -p "$TEST_TMP/app/node_modules" || fail "mkdir"
ln -s "$pkg" "$TEST_TMP/app/node_modules/ephemeral" || fail "ln"
cp "$pkg/examples/seed.mjs" "$TEST_TMP/app/seed.mjs" || fail "cp"
out=$(cd "$TEST_TMP/app" && node seed.mjs "$EPHEMERAL_SEED") || fail "examples/seed.mjs: $out"
assert_contains "$out" "completed" "example status"
assert_contains "$out" "worker.destroyed" "example events"
# The README's ten lines, run as they are written, from the repository's top.
awk '/^```js$/ {on = 1; next} /^```$/ {if (on) exit} on' "$pkg/README.md" >"$TEST_TMP/app/readme.mjs"
[ -s "$TEST_TMP/app/readme.mjs" ] || fail "the README has no js example"
[ "$(wc -l <"$TEST_TMP/app/readme.mjs")" -le 10 ] || fail "the README's example is over ten lines"
out=$(cd "$TOP" && NODE_PATH= node "$TEST_TMP/app/readme.mjs") || fail "the README's example: $out"
assert_contains "$out" "completed" "README example status"
assert_contains "$out" "2 3 5 7 11 13 17 19 23 29 31 37 41 43 47" "README example result"
echo "typescript client: $passed tests passed"
