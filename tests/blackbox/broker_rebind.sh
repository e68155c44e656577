#!/bin/bash
# DNS rebinding (docs/BROKER.md, "One resolution"): every request the broker makes connects to
# the address it checked, whatever the spelling of the name. The whole test runs in a network and
# mount namespace of its own (loopback only), with /etc/resolv.conf bind-mounted to name its own
# resolver (tests/rebind_dns.py): the first A query for a name gets 127.0.0.2 (opened by
# broker.web_private_cidrs and allow_private_cidrs), every later one 127.0.0.1, where an "inside"
# listener waits at the same port. web_fetch (a trailing dot, upper case), a redirect's Location
# to a name with a trailing dot, plain HTTP and CONNECT through the proxy, and a connection whose
# base_url host ends in a dot all reach the outside listener; nothing reaches the inside one; a
# second web_fetch of a name the resolver now answers 127.0.0.1 for is refused.
if [ -z "${EPH_REBIND_NS:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "skip: a network namespace and a bind mount need root"; exit 77; }
    unshare --net --mount true 2>/dev/null ||
        { echo "skip: this host cannot make a network and mount namespace"; exit 77; }
    EPH_REBIND_NS=1 exec unshare --net --mount --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"
command -v ip >/dev/null || skip "ip (iproute2) is needed to bring up the namespace's loopback"

ip link set lo up || fail "cannot bring up loopback in the test's namespace"
# The namespace is the test's own: loopback and nothing else.
assert_eq "$(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')" "lo " "the namespace's links"
printf 'nameserver 127.0.0.1\noptions timeout:2 attempts:2\n' >"$TEST_TMP/resolv.conf"
mount --bind "$TEST_TMP/resolv.conf" /etc/resolv.conf || fail "cannot bind-mount resolv.conf"

: >"$TEST_TMP/rebind.log"
python3 "$TOP/tests/rebind_dns.py" --log "$TEST_TMP/rebind.log" --max-seconds 240 \
    >"$TEST_TMP/rebind.port" 2>>"$TEST_TMP/rebind.err" &
_pids+=("$!")
R=
for _ in $(seq 200); do
    R=$(head -n 1 "$TEST_TMP/rebind.port" 2>/dev/null)
    [ -n "$R" ] && break
    sleep 0.05
done
[ -n "$R" ] || { cat "$TEST_TMP/rebind.err" >&2; fail "the resolver did not start"; }
# The resolver is the one this namespace asks, and it rebinds.
first() { getent ahosts "$1" | awk '$2 == "STREAM" {print $1}'; }
assert_eq "$(first probe.test)" 127.0.0.2 "first answer"
assert_eq "$(first probe.test)" 127.0.0.1 "second answer"

fetch() { jq -nc --arg id "$1" --arg u "$2" '{id: $id, name: "web_fetch", arguments: ({url: $u} | tojson)}'; }
fake_start rb "$(jq -nc \
    --argjson f1 "$(fetch f1 "http://rebind1.test.:$R/f1")" \
    --argjson f2 "$(fetch f2 "http://127.0.0.2:$R/redirect?to=http://rebind2.test.:$R/f2")" \
    --argjson f3 "$(fetch f3 "http://REBIND3.Test.:$R/f3")" \
    --argjson s1 "$(shell_call s1 "curl -sS http://rebind4.test.:$R/s1")" \
    --argjson s2 "$(shell_call s2 "curl -sS -p http://rebind5.test.:$R/s2")" \
    --argjson c1 "$(shell_call c1 "curl -sS http://127.0.0.1:3128/rb/c1")" \
    --argjson f4 "$(fetch f4 "http://rebind1.test.:$R/again")" \
    '[{tool_calls: [$f1, $f2, $f3, $s1, $s2, $c1]}, {tool_calls: [$f4]}, {text: "done"}]')"
broker_server "$(jq -s . <(fake_model rb openai rb))" \
    '{"web_private_cidrs": ["127.0.0.2/32"], "allow_private_cidrs": ["127.0.0.2/32"]}'
out=$(api POST /v1/connections -H 'Content-Type: application/json' -d "$(jq -nc \
    --arg url "http://rebind6.test.:$R" '{name: "rb", base_url: $url, methods: ["GET"],
    headers: {"Authorization": "Bearer rebind-test"}}')")
assert_eq "${out##*HTTP }" 201 "create connection: $out"

id=$(run_create '{"prompt": "rebind", "model": "rb", "max_cost_micros": 500000, "web": true,
    "connections": ["rb"]}')
run=$(run_wait "$id" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "status ($(jq -c .error <<<"$run"))"
assert_eq "$(tool_result rb 1 f1 | jq -r .text)" "outside /f1" "web_fetch of a name with a trailing dot"
f2=$(tool_result rb 1 f2)
assert_eq "$(jq -r .text <<<"$f2")" "outside /f2" "a redirect to a name with a trailing dot"
assert_eq "$(jq -r .redirects <<<"$f2")" 1 "the redirect followed"
assert_eq "$(tool_result rb 1 f3 | jq -r .text)" "outside /f3" "web_fetch of an upper-case name"
assert_eq "$(tool_result rb 1 s1 | jq -r .stdout)" "outside /s1" "plain HTTP through the proxy"
assert_eq "$(tool_result rb 1 s2 | jq -r .stdout)" "outside /s2" "a CONNECT tunnel"
assert_eq "$(tool_result rb 1 c1 | jq -r .stdout)" "outside /c1" "a connection"
assert_contains "$(tool_result rb 2 f4 | jq -r .error)" "is not a public address (loopback)" \
    "a name that now resolves inside"
log=$(jq -s . "$TEST_TMP/rebind.log")
assert_eq "$(jq '[.[] | select(.http == "inside")] | length' <<<"$log")" 0 "nothing reached the inside listener"
assert_eq "$(jq -r '[.[] | select(.http == "outside") | .path] | join(" ")' <<<"$log")" \
    "/f1 /redirect?to=http://rebind2.test.:$R/f2 /f2 /f3 /s1 /s2 /c1" "what reached the outside listener"
# Each name was looked up by the broker, through this resolver.
for n in 1 2 3 4 5 6; do
    [ "$(jq --arg n "rebind$n.test" '[.[] | select(.dns == $n and .type == "A")] | length' <<<"$log")" -ge 1 ] ||
        fail "rebind$n.test was never asked of the test's resolver"
done
echo ok
