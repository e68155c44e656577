#!/bin/bash
# Readiness at start-up (docs/CONFIG.md, "Readiness"): with "on_unready": "refuse" (the default)
# serve exits with status 1 and says what is missing and what to do; with "serve" it starts, and
# /healthz answers 503 with each part's state until the part is fixed, then 200, without a
# restart. Cases: no image, an image without the guest agent (missing, or not static), an image
# built from another recipe, a backend that cannot run a sandbox, a store that cannot open.
. "$(dirname "$0")/lib.sh"
real_image=${EPHEMERAL_IMAGE:-$TOP/var/images/default}
[ -e "$real_image/bin/sh" ] || skip "no sandbox image (make image)"
unset EPHEMERAL_IMAGE
cd "$TOP"

# serve_with NAME CONFIG_JSON [serve args...]: starts a server on a free port with its own
# database; sets PORT, PID, LOG.
serve_with() {
    local name=$1 config=$2; shift 2
    PORT=$(free_port)
    LOG="$TEST_TMP/$name.log"
    printf '%s\n' "$config" >"$TEST_TMP/$name.json"
    "$EPHD" serve --listen "127.0.0.1:$PORT" --db "$TEST_TMP/$name.db" \
        --config "$TEST_TMP/$name.json" "$@" >"$LOG" 2>&1 &
    PID=$!
    _pids+=("$PID")
}

# refused NAME CONFIG MESSAGE [serve args...]: the server exits with status 1, and its log says
# MESSAGE (exactly, as a substring of one line).
refused() {
    local name=$1 config=$2 message=$3; shift 3
    serve_with "$name" "$config" "$@"
    local rc=
    for _ in $(seq 600); do
        kill -0 "$PID" 2>/dev/null || { wait "$PID"; rc=$?; break; }
        sleep 0.05
    done
    [ -n "$rc" ] || fail "$name: the server did not refuse to start (log: $(cat "$LOG"))"
    assert_eq "$rc" 1 "$name: exit status"
    grep -qF -- "$message" "$LOG" || fail "$name: '$message' not in the log: $(cat "$LOG")"
    grep -q 'not starting: the server would not be ready' "$LOG" ||
        [ "$name" = store ] || fail "$name: no refusal line in: $(cat "$LOG")"
}

# health: "CODE BODY" of GET /healthz once the server answers (bounded).
health() {
    local out
    for _ in $(seq 600); do
        out=$(curl -sS -m 10 -w '\n%{http_code}' "http://127.0.0.1:$PORT/healthz" 2>/dev/null) &&
            { echo "$(tail -n 1 <<<"$out") $(head -n 1 <<<"$out")"; return 0; }
        kill -0 "$PID" 2>/dev/null || fail "the server exited: $(cat "$LOG")"
        sleep 0.05
    done
    fail "the server never answered /healthz"
}

# Every case runs on the namespaces backend; first, that it works here with the real image.
serve_with baseline '{"on_unready": "serve", "sandbox": {"backend": "namespaces"}}'
read -r code body <<<"$(health)"
if [ "$code" != 200 ]; then
    skip "the namespaces backend does not work on this host: $(jq -c . <<<"$body")"
fi
kill -TERM "$PID"; wait "$PID"

# 1. No image.
missing="$TEST_TMP/no-image"
refused image-missing "{\"sandbox\": {\"backend\": \"namespaces\", \"image\": \"$missing\"}}" \
    "no sandbox image at $missing: run \`make image\` or \`ephemerald image build\`"
# ... started not ready: 503 with the image's message; then the image appears (a link to the
# real one, as `make image` makes) and the server is ready without a restart.
serve_with image-later "{\"on_unready\": \"serve\", \"sandbox\": {\"backend\": \"namespaces\", \"image\": \"$missing\"}}"
read -r code body <<<"$(health)"
assert_eq "$code" 503 "healthz without an image"
assert_eq "$(jq -r .status <<<"$body")" unavailable "status without an image"
assert_eq "$(jq -r .image.ok <<<"$body")" false "image part"
assert_eq "$(jq -r .image.message <<<"$body")" \
    "no sandbox image at $missing: run \`make image\` or \`ephemerald image build\`" "image message"
assert_eq "$(jq -r .backend.ok <<<"$body")" false "backend part without an image"
assert_eq "$(jq -r .store.ok <<<"$body")" true "store part"
grep -q 'starting not ready' "$LOG" || fail "no not-ready line: $(cat "$LOG")"
ln -s "$(readlink -f "$real_image")" "$missing"
for _ in $(seq 600); do
    read -r code body <<<"$(health)"
    [ "$code" = 200 ] && break
    sleep 0.05
done
assert_eq "$code" 200 "healthz once the image is there ($body)"
assert_eq "$(jq -r '[.store.ok, .image.ok, .backend.ok] | all' <<<"$body")" true "every part"
assert_eq "$(jq -r .backend.name <<<"$body")" namespaces "backend name"
kill -TERM "$PID"; wait "$PID"

# 2. The guest agent: missing, then not a static executable.
refused agent-missing "{\"sandbox\": {\"backend\": \"namespaces\", \"init_path\": \"$TEST_TMP/no-init\"}}" \
    "no guest agent (ephemeral-init) at $TEST_TMP/no-init: run \`make\`, or set sandbox.init_path"
refused agent-dynamic "{\"sandbox\": {\"backend\": \"namespaces\", \"init_path\": \"$EPH\"}}" \
    "the guest agent at $EPH is dynamically linked"

# 3. An image from the cache built from another recipe: a cache entry under a key that is not
# this host's (its rootfs is the real image's).
fake="$TEST_TMP/cache/images/0123456789abcdef"
mkdir -p "$fake"
ln -s "$(readlink -f "$real_image")" "$fake/rootfs"
echo 0123456789abcdef >"$fake/complete"
ln -s "$fake/rootfs" "$TEST_TMP/old-image"
refused recipe "{\"sandbox\": {\"backend\": \"namespaces\", \"image\": \"$TEST_TMP/old-image\"}}" \
    "the sandbox image at $TEST_TMP/old-image was built from another recipe (0123456789abcdef; this host's is "

# 4. A backend that cannot run a sandbox: an image whose shell cannot run (every check of the
# image passes: it has /bin/sh, the mount points, no recipe), so that only a real sandbox shows
# it. Started not ready, /healthz says so.
broken="$TEST_TMP/broken-image"
mkdir -p "$broken/bin" "$broken/proc" "$broken/dev" "$broken/tmp" "$broken/sys"
printf '#!/nonexistent/interpreter\n' >"$broken/bin/sh"
chmod 755 "$broken/bin/sh"
refused backend "{\"sandbox\": {\"backend\": \"namespaces\", \"image\": \"$broken\"}}" \
    "backend: "
grep -qE 'backend: (the namespaces backend cannot create a sandbox|a namespaces sandbox cannot run a command)' "$LOG" ||
    fail "backend message: $(cat "$LOG")"
serve_with backend-serve "{\"on_unready\": \"serve\", \"sandbox\": {\"backend\": \"namespaces\", \"image\": \"$broken\"}}"
read -r code body <<<"$(health)"
assert_eq "$code" 503 "healthz with an unusable backend"
assert_eq "$(jq -r .image.ok <<<"$body")" true "image part with a broken shell"
assert_eq "$(jq -r .backend.ok <<<"$body")" false "backend part"
assert_contains "$(jq -r .backend.message <<<"$body")" namespaces "backend message"
kill -TERM "$PID"; wait "$PID"

# ... and no backend at all (one that cannot be chosen): started not ready, a create is refused
# with 503 and what is missing, and nothing is reserved.
key=$("$EPHD" admin init --db "$TEST_TMP/no-backend.db") || fail "admin init"
serve_with no-backend '{"on_unready": "serve", "sandbox": {"backend": "nosuch"}}'
read -r code body <<<"$(health)"
assert_eq "$code" 503 "healthz without a backend"
assert_eq "$(jq -r .backend.message <<<"$body")" \
    "no usable sandbox backend: unknown sandbox backend 'nosuch'" "no backend message"
before=$(curl -sS "http://127.0.0.1:$PORT/v1/balance" -H "Authorization: Bearer $key")
out=$(curl -sS -D "$TEST_TMP/no-backend.h" -w '\n%{http_code}' -X POST "http://127.0.0.1:$PORT/v1/runs" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d @examples/sandbox-proof/request.json)
assert_eq "$(tail -n 1 <<<"$out")" 503 "a create without a backend"
run=$(head -n 1 <<<"$out")
assert_eq "$(jq -r .error.code <<<"$run")" not_ready "its code ($run)"
assert_eq "$(jq -r .error.message <<<"$run")" \
    "the server is not ready to run: no usable sandbox backend: unknown sandbox backend 'nosuch'" \
    "its message"
grep -qi '^Retry-After: ' "$TEST_TMP/no-backend.h" || fail "no Retry-After on the 503"
after=$(curl -sS "http://127.0.0.1:$PORT/v1/balance" -H "Authorization: Bearer $key")
assert_eq "$after" "$before" "nothing reserved by the refused create"
runs=$(curl -sS "http://127.0.0.1:$PORT/v1/runs" -H "Authorization: Bearer $key")
assert_eq "$(jq '.data | length' <<<"$runs")" 0 "no run was made"
kill -TERM "$PID"; wait "$PID"

# 5. A store that cannot open (its path is a directory): never started, whatever on_unready says.
mkdir -p "$TEST_TMP/store-dir.db"
for mode in refuse serve; do
    serve_with "store-$mode" "{\"on_unready\": \"$mode\"}" --db "$TEST_TMP/store-dir.db"
    rc=
    for _ in $(seq 600); do
        kill -0 "$PID" 2>/dev/null || { wait "$PID"; rc=$?; break; }
        sleep 0.05
    done
    assert_eq "$rc" 1 "store ($mode): exit status"
    grep -q 'error serve: .*store-dir.db' "$LOG" || fail "store ($mode): no message: $(cat "$LOG")"
done

# 6. A bad on_unready is refused like any bad key.
serve_with bad-mode '{"on_unready": "maybe"}'
wait "$PID"
assert_eq "$?" 2 "bad on_unready: exit status"
grep -qF "'on_unready' must be \"refuse\" or \"serve\"" "$LOG" || fail "bad on_unready: $(cat "$LOG")"
echo "readiness: refused and reported for a missing image, guest agent, recipe, backend and store"
