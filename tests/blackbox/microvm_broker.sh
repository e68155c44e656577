#!/bin/bash
# The broker on the microvm backend (docs/BROKER.md: the same path out on every backend), a focused subset
# since a microVM is slow under software emulation here: one run with a connection and web whose
# commands reach the connection (the credential added upstream, the echo redacted), are denied a
# method, reach the web, and are refused a loopback form. Skips where the microvm backend cannot run.
. "$(dirname "$0")/microvm_common.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
export EPHEMERAL_TEST_SANDBOX=microvm
cd "$TOP"
SECRET=vmcanary$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
upstream_start api
P=http://127.0.0.1:3128
fake_start model "$(jq -nc \
    --argjson ok "$(shell_call v1 "curl -sS $P/echo/allowed/x")" \
    --argjson meth "$(shell_call v2 "curl -sS -X DELETE $P/echo/allowed/x")" \
    --argjson web "$(shell_call v3 "curl -sS http://127.0.0.1:$UP_PORT/web; curl -s -o /dev/null -w '%{http_code}' http://127.0.0.2:$UP_PORT/no")" \
    '[{tool_calls: [$ok, $meth, $web]}, {text: "done"}]')"
broker_server "$(jq -s . <(fake_model fake openai model '{"timeout_seconds": 120}'))"
conn=$(jq -cn --arg s "$SECRET" --arg url "http://127.0.0.1:$UP_PORT" '{name: "echo",
    base_url: $url, methods: ["GET"], path_prefixes: ["/allowed"],
    headers: {"Authorization": ("Bearer " + $s)}}')
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$conn")
assert_eq "${out##*HTTP }" 201 "create connection: $out"
id=$(run_create '{"prompt": "vm", "model": "fake", "max_cost_micros": 500000, "web": true,
    "timeout_seconds": 300, "connections": ["echo"]}')
run=$(run_wait "$id" 300)
assert_eq "$(jq -r .status <<<"$run")" completed "status ($(jq -c .error <<<"$run"))"
assert_eq "$(jq -r .sandbox.backend <<<"$run")" microvm "backend"
check_settled "$run"
res() { tool_result model 1 "$1" | jq -r .stdout; }
assert_eq "$(res v1)" "GET /allowed/x auth=[[REDACTED]] body=[]" "connection through the microVM's channel"
assert_eq "$(res v2 | jq -r .error.code)" method_not_allowed "denied"
assert_eq "$(res v3)" "GET /web auth=[] body=[]
403" "web, and a loopback form refused"
ups=$(upstream_requests api)
assert_eq "$(jq -r '.[0].headers.authorization' <<<"$ups")" "Bearer $SECRET" "credential upstream"
assert_eq "$(jq length <<<"$ups")" 2 "nothing else upstream"
assert_not_contains "$(run_events "$id")" "$SECRET" "events"
vm_assert_clean
echo ok
