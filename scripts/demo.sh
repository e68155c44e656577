#!/bin/bash
# make demo: the seed example end to end on the embedded defaults. Starts ephemerald (SQLite under
# var/, the auto-chosen sandbox, the replay model), creates a member key, runs
# examples/sandbox-proof/request.json with the client, and stops the server.
set -eu
BUILD=${1:-build}
cd "$(dirname "$0")/.."
mkdir -p var
# 8080, or the next free port when something else listens there (the demo must talk to its own
# server, not to one that happens to answer on 8080).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=${EPHEMERAL_DEMO_PORT:-8080}
if [ -z "${EPHEMERAL_DEMO_PORT:-}" ]; then
    while listening "$port" && [ "$port" -lt 8180 ]; do port=$((port + 1)); done
fi
export EPHEMERAL_URL="http://127.0.0.1:$port"
log=var/demo-server.log

"$BUILD/ephemerald" admin init >/dev/null 2>>"$log"
EPHEMERAL_API_KEY=$("$BUILD/ephemerald" admin key create --org default --role member 2>>"$log")
export EPHEMERAL_API_KEY

"$BUILD/ephemerald" serve --listen "127.0.0.1:$port" >>"$log" 2>&1 &
server=$!
stop() {
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
}
trap stop EXIT
for _ in $(seq 600); do
    curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break
    if ! kill -0 "$server" 2>/dev/null; then
        echo "demo: the server did not start; its log:" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
    sleep 0.05
done
if ! curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1; then
    echo "demo: the server is not ready:" >&2
    curl -sS "$EPHEMERAL_URL/healthz" >&2 || tail -n 20 "$log" >&2
    exit 1
fi
grep -m1 'sandbox backend' "$log" | sed 's/^/server: /' || true
echo "demo: running examples/sandbox-proof/request.json against $EPHEMERAL_URL"
echo
"$BUILD/ephemeral" run examples/sandbox-proof/request.json
