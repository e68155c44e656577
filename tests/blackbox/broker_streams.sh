#!/bin/bash
# One run cannot exhaust the server through its streams (docs/BROKER.md, "Caps and faults"): in a
# real sandbox through the real server, a program opens 300 CONNECT tunnels to an upstream that
# never answers nor closes, one after the other, and resets each (SO_LINGER 0) as soon as the
# broker says 200. The server's threads (/proc/PID/task) and descriptors (/proc/PID/fd), measured
# at a barrier before the flood, at a barrier after it and as it goes, stay within the tunnel cap
# (16) of stream threads and their descriptors above that baseline: each reset stream's thread ends
# at once, not at the 60 s request deadline. Every cycle connects (one the broker refuses while
# earlier threads still end is tried again, bounded), the run completes, and another run starts and
# reaches the upstream afterwards, under a descriptor limit that 300 left-behind streams would pass.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agent_common.sh"
. "$(dirname "$0")/broker_common.sh"
cd "$TOP"

CAP=16
CYCLES=300
# What a stream may hold in the server: the tunnel's end of its pair, the broker's end, the
# upstream socket and libcurl's two wake-up sockets.
FDS_PER_STREAM=5

mkdir -p "$TEST_TMP/release"
: >"$TEST_TMP/slow.up"
python3 "$TOP/tests/broker_slow_upstream.py" --log "$TEST_TMP/slow.up" \
    --release-dir "$TEST_TMP/release" --max-seconds 240 >"$TEST_TMP/slow.port" \
    2>>"$TEST_TMP/slow.err" &
_pids+=("$!")
U=
for _ in $(seq 200); do
    U=$(head -n 1 "$TEST_TMP/slow.port" 2>/dev/null)
    [ -n "$U" ] && break
    sleep 0.05
done
[ -n "$U" ] || fail "the slow upstream did not start"

cat >"$TEST_TMP/flood.py" <<'EOF'
import socket, struct, sys, time
U, N = int(sys.argv[1]), int(sys.argv[2])

def head(s):
    d = b""
    while b"\r\n\r\n" not in d:
        p = s.recv(4096)
        if not p:
            break
        d += p
    return d

def hold(name):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=120)
    s.sendall(b"GET http://127.0.0.1:%d/hold/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % (U, name))
    d = head(s)
    s.close()
    return d.split(b"\r\n", 1)[0].decode()

print("b1", hold(b"b1"), flush=True)
connected = refused = 0
for i in range(N):
    end = time.monotonic() + 30
    while True:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n" % U)
        d = head(s)
        ok = d.startswith(b"HTTP/1.1 200")
        if ok:
            s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        elif b"too_many_tunnels" not in d:
            print("cycle %d: %r" % (i, d[:200]))
            sys.exit(1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # a reset, not a close: the stream's slot is free at once inside
        if ok:
            connected += 1
            break
        refused += 1
        if time.monotonic() > end:
            print("cycle %d: refused for 30 s" % i)
            sys.exit(1)
        time.sleep(0.01)
print("b2", hold(b"b2"), flush=True)
print("connected=%d refused=%d" % (connected, refused))
EOF
flood=$(cat "$TEST_TMP/flood.py")
cmd="cat >/tmp/flood.py <<'PYEOF'
$flood
PYEOF
python3 /tmp/flood.py $U $CYCLES"
fake_start flood "$(jq -nc --argjson c "$(shell_call f1 "$cmd")" '[{tool_calls: [$c]}, {text: "done"}]')"
fake_start after "$(jq -nc --argjson c "$(shell_call a1 "curl -sS http://127.0.0.1:$U/ok")" '[{tool_calls: [$c]}, {text: "done"}]')"

# A descriptor limit the server lives well within, but not with 300 streams' sockets.
# The sandbox's own open-file limit must fit under it: the namespaces jail sets its rlimits from
# the server's, and cannot raise one above the server's hard limit.
ulimit -n 512 || skip "cannot set the descriptor limit"
broker_server "$(jq -s . <(fake_model flood openai flood) <(fake_model after openai after))" \
    '{"allow_private_cidrs": ["127.0.0.1/32"], "web_private_cidrs": ["127.0.0.1/32"], "max_tunnels_per_run": '$CAP'}' \
    '' '{"sandbox": {"nofile": 256}}'

threads() { find "/proc/$SERVER_PID/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
fds() { find "/proc/$SERVER_PID/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# Waits (bounded) until the upstream holds barrier NAME; samples the server meanwhile.
max_t=0 max_f=0
barrier() { # NAME
    local i st
    for i in $(seq 1200); do
        grep -q "/hold/$1 " "$TEST_TMP/slow.up" && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited"
        if [ $((i % 10)) = 0 ]; then
            st=$(api GET "/v1/runs/$id" | head -n 1 | jq -r .status)
            case $st in queued | running) ;; *)
                fail "barrier $1 not reached: the run is $st, the program said: $(tool_result flood 1 f1 | jq -r '.stdout + .stderr' | tail -n 5)" ;;
            esac
        fi
        local t f
        t=$(threads) f=$(fds)
        [ "$t" -gt "$max_t" ] && max_t=$t
        [ "$f" -gt "$max_f" ] && max_f=$f
        sleep 0.1
    done
    fail "barrier $1 not reached: $(tail -n 5 "$SERVER_LOG")"
}

id=$(run_create '{"prompt": "flood", "model": "flood", "max_cost_micros": 1000000, "web": true}')
barrier b1
t1=$(threads) f1=$(fds)
echo "baseline with the run's sandbox and one stream: $t1 threads, $f1 descriptors"
max_t=0 max_f=0
touch "$TEST_TMP/release/b1"
barrier b2
t2=$(threads) f2=$(fds)
echo "after $CYCLES resets: $t2 threads, $f2 descriptors (at most $max_t and $max_f as it went)"
[ "$t2" -le $((t1 + CAP)) ] || fail "$t2 threads after the flood, more than $t1 + the cap of $CAP"
[ "$f2" -le $((f1 + CAP * FDS_PER_STREAM)) ] ||
    fail "$f2 descriptors after the flood, more than $f1 + $CAP streams of $FDS_PER_STREAM"
[ "$max_t" -le $((t1 + CAP)) ] || fail "$max_t threads during the flood, more than $t1 + $CAP"
[ "$max_f" -le $((f1 + CAP * FDS_PER_STREAM)) ] ||
    fail "$max_f descriptors during the flood, more than $f1 + $CAP streams of $FDS_PER_STREAM"
touch "$TEST_TMP/release/b2"

run=$(run_wait "$id" 180)
assert_eq "$(jq -r .status <<<"$run")" completed "flood status ($(jq -c .error <<<"$run"))"
out=$(tool_result flood 1 f1 | jq -r .stdout)
assert_contains "$out" "b1 HTTP/1.1 200 OK" "the first barrier answered"
assert_contains "$out" "b2 HTTP/1.1 200 OK" "the second barrier answered"
assert_contains "$out" "connected=$CYCLES " "every cycle connected ($out)"
echo "$(tail -n 1 <<<"$out")"
# Each connected tunnel reached the upstream (the GET inside it may or may not have).
ups=$(grep -c '"line": "GET /slow' "$TEST_TMP/slow.up")
echo "$ups of the $CYCLES tunnelled requests reached the upstream"

# Another run starts and is served.
id2=$(run_create '{"prompt": "after", "model": "after", "max_cost_micros": 100000, "web": true}')
run=$(run_wait "$id2" 120)
assert_eq "$(jq -r .status <<<"$run")" completed "the next run ($(jq -c .error <<<"$run"))"
assert_eq "$(tool_result after 1 a1 | jq -r .stdout)" "ok" "the next run reached the upstream"
echo "broker_streams: ok"
