#!/bin/sh
# The broker example end to end: a local stand-in API and web site, ephemerald on the replay model
# with the broker allowed to reach 127.0.0.1 (broker.allow_private_cidrs for the connection,
# broker.web_private_cidrs for the web), a connection holding a
# demo key, and one run that uses the connection and the web through the sandbox's proxy. The
# model's turns are replayed from transcript.jsonl; every command runs for real.
#
#   examples/broker/run.sh [BUILD_DIR]        (after `make` and `make image`)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
tmp=$(mktemp -d /tmp/ephemeral-broker-example.XXXXXX)
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
cd "$top"

python3 examples/broker/upstream.py >"$tmp/upstream.port" &
pids="$pids $!"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for _ in $(seq 100); do [ -s "$tmp/upstream.port" ] && break; sleep 0.05; done
up=$(head -n 1 "$tmp/upstream.port")

cat >"$tmp/config.json" <<JSON
{
  "db": "$tmp/ephemeral.db",
  "secret_key_file": "$tmp/secret.key",
  "broker": {"allow_private_cidrs": ["127.0.0.1/32"], "web_private_cidrs": ["127.0.0.1/32"]},
  "default_model": "openai/gpt-6-luna",
  "models": [{"id": "openai/gpt-6-luna", "provider": "replay", "transcripts": "examples",
              "input_micros_per_mtok": 50000, "output_micros_per_mtok": 200000,
              "max_output_tokens": 1024}]
}
JSON
admin=$("$build/ephemerald" admin init --config "$tmp/config.json")
"$build/ephemerald" serve --config "$tmp/config.json" --listen "127.0.0.1:$port" \
    >"$tmp/server.log" 2>&1 &
pids="$pids $!"
export EPHEMERAL_URL="http://127.0.0.1:$port"
for _ in $(seq 200); do curl -fsS "$EPHEMERAL_URL/healthz" >/dev/null 2>&1 && break; sleep 0.05; done

# The connection: its key stays on the host; the sandbox only ever sees [REDACTED].
curl -fsS -X POST "$EPHEMERAL_URL/v1/connections" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' \
    -d "{\"name\": \"status-api\", \"base_url\": \"http://127.0.0.1:$up\", \"methods\": [\"GET\"],
         \"path_prefixes\": [\"/v1\"], \"headers\": {\"Authorization\": \"Bearer demo-key-0123456789\"}}" \
    >/dev/null

# The request, with the web site's address as a file of the run.
python3 - "$up" >"$tmp/request.json" <<'PY'
import json, sys
r = json.load(open("examples/broker/request.json"))
r["files"] = [{"path": "upstream_url", "content": "http://127.0.0.1:%s" % sys.argv[1]}]
print(json.dumps(r))
PY
EPHEMERAL_API_KEY=$admin "$build/ephemeral" run "$tmp/request.json"
