#!/bin/bash
# No network: the sandbox has only a loopback interface (up), no route anywhere, no DNS (curl says
# "Could not resolve host"), and the host's own loopback services are unreachable (a server on the
# host's 127.0.0.1, reachable from the host, cannot be reached from inside).
. "$(dirname "$0")/sandbox_common.sh"

# A service on the host's loopback, and proof that it answers on the host.
port=$(free_port)
echo "host-service-body" >"$TEST_TMP/index.html"
(cd "$TEST_TMP" && exec python3 -m http.server --bind 127.0.0.1 "$port") >"$TEST_TMP/http.log" 2>&1 &
_pids+=("$!")
for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$port/index.html" >/dev/null 2>&1 && break
    sleep 0.05
done
assert_eq "$(curl -fsS "http://127.0.0.1:$port/index.html")" "host-service-body" "the host service works on the host"

sb_run -- sh -c "
    echo IFACES; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '
    echo ROUTES; tail -n +2 /proc/net/route | wc -l; tail -n +1 /proc/net/ipv6_route | wc -l
    echo LO; cat /sys/class/net/lo/operstate 2>/dev/null || grep -c . /proc/net/if_inet6 || true
    echo HOSTSVC; curl -sS -m 5 http://127.0.0.1:$port/index.html 2>&1; echo \"curl=\$?\"
    echo DNS; curl -sS -m 8 https://example.com 2>&1; echo \"curl=\$?\"
    echo IP; curl -sS -m 5 http://192.0.2.1/ 2>&1; echo \"curl=\$?\"
    echo SELF; python3 -c 'import socket
s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(1); c=socket.create_connection(s.getsockname()); print(\"loopback-ok\")'
"
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "exit status"
ifaces=$(sed -n '/^IFACES$/,/^ROUTES$/p' <<<"$SB_OUT" | sed '1d;$d')
assert_eq "$ifaces" "lo" "network interfaces"
routes=$(sed -n '/^ROUTES$/,/^LO$/p' <<<"$SB_OUT" | sed '1d;$d' | head -n 1)
assert_eq "$routes" 0 "IPv4 routes"
assert_not_contains "$SB_OUT" "host-service-body" "the host's loopback service"
hostsvc=$(sed -n '/^HOSTSVC$/,/^DNS$/p' <<<"$SB_OUT")
assert_contains "$hostsvc" "Failed to connect" "the host's loopback service refuses"
assert_contains "$SB_OUT" "curl: (6) Could not resolve host: example.com" "DNS"
ip=$(sed -n '/^IP$/,/^SELF$/p' <<<"$SB_OUT")
assert_not_contains "$ip" "curl=0" "an outside address"
assert_contains "$SB_OUT" "loopback-ok" "the sandbox's own loopback works"
echo ok
