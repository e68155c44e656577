#!/bin/bash
# No network: the sandbox has only a loopback interface (up, with ::1), no IPv4 route, IPv6 routes
# only on lo, no DNS (curl says "Could not resolve host"), an outside address unreachable before
# any packet exists (no route), no AF_VSOCK, and the host's own loopback services are unreachable
# (servers on the host's 127.0.0.1 and ::1, reachable from the host, cannot be reached from
# inside).
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

# The same on the host's IPv6 loopback, when the host has one.
port6=
if python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
    port6=$(python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0)); print(s.getsockname()[1])')
    (cd "$TEST_TMP" && exec python3 -m http.server --bind ::1 "$port6") >"$TEST_TMP/http6.log" 2>&1 &
    _pids+=("$!")
    for _ in $(seq 100); do
        curl -fsS "http://[::1]:$port6/index.html" >/dev/null 2>&1 && break
        sleep 0.05
    done
    assert_eq "$(curl -fsS "http://[::1]:$port6/index.html")" "host-service-body" "the host's IPv6 service works on the host"
    echo "the host has ::1: its service on port $port6 must be unreachable from the sandbox"
else
    echo "the host has no IPv6 loopback: the ::1 check is about the sandbox's own only"
fi

sb_run -- sh -c "
    echo IFACES; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '
    echo ROUTES; tail -n +2 /proc/net/route | wc -l
    echo ROUTES6; awk '{ print \$1, \$2, \$10 }' /proc/net/ipv6_route
    echo LO; python3 -c 'import fcntl, socket, struct
s = socket.socket()
flags = struct.unpack(\"16sH\", fcntl.ioctl(s, 0x8913, struct.pack(\"16sH\", b\"lo\", 0)))[1]
print(\"lo up\" if flags & 1 else \"lo down\")'
    echo HOSTSVC; curl -sS -m 5 http://127.0.0.1:$port/index.html 2>&1; echo \"curl=\$?\"
    echo HOSTSVC6; [ -n '$port6' ] && { curl -sS -m 5 'http://[::1]:$port6/index.html' 2>&1; echo \"curl=\$?\"; }
    echo DNS; curl -sS -m 8 https://example.com 2>&1; echo \"curl=\$?\"
    echo IP; python3 -c 'import socket
try:
    socket.create_connection((\"192.0.2.1\", 80), timeout=5)
    print(\"connected\")
except OSError as e:
    print(e.strerror)'
    echo VSOCK; python3 -c 'import socket
try:
    socket.socket(40, socket.SOCK_STREAM)
    print(\"created\")
except OSError as e:
    print(e.strerror)'
    echo SELF; python3 -c 'import socket
s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(1); c=socket.create_connection(s.getsockname()); print(\"loopback-ok\")
s=socket.socket(socket.AF_INET6); s.bind((\"::1\",0)); s.listen(1); c=socket.create_connection(s.getsockname()[:2]); print(\"loopback6-ok\")'
    echo END
"
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "exit status"
section() { sed -n "/^$1\$/,/^$2\$/p" <<<"$SB_OUT" | sed '1d;$d'; }
assert_eq "$(section IFACES ROUTES)" "lo" "network interfaces"
assert_eq "$(section ROUTES ROUTES6)" 0 "IPv4 routes"
# IPv6: only what lo itself brings (::1 and the local and multicast tables), all on lo.
routes6=$(section ROUTES6 LO)
echo "IPv6 routes: $routes6"
while read -r dst len dev; do
    [ -z "$dst" ] && continue
    assert_eq "$dev" lo "the device of IPv6 route $dst/$len"
done <<<"$routes6"
assert_contains "$routes6" "00000000000000000000000000000001 80 lo" "the route to ::1"
assert_eq "$(section LO HOSTSVC)" "lo up" "lo"
assert_not_contains "$SB_OUT" "host-service-body" "the host's loopback service"
assert_contains "$(section HOSTSVC HOSTSVC6)" "Failed to connect" "the host's loopback service refuses"
if [ -n "$port6" ]; then
    assert_contains "$(section HOSTSVC6 DNS)" "Failed to connect" "the host's ::1 service refuses"
fi
assert_contains "$SB_OUT" "curl: (6) Could not resolve host: example.com" "DNS"
# No route: the kernel refuses before any packet exists.
assert_eq "$(section IP VSOCK)" "Network is unreachable" "an outside address"
assert_eq "$(section VSOCK SELF)" "Address family not supported by protocol" "AF_VSOCK"
assert_contains "$(section SELF END)" "loopback-ok" "the sandbox's own loopback works"
assert_contains "$(section SELF END)" "loopback6-ok" "the sandbox's own ::1 works"
echo ok
