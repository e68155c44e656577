#!/bin/bash
# Host-wide kernel resources: what one sandbox can take from the host and from the other
# sandboxes. Each attack runs inside a real sandbox as worker, the way a hostile command would:
#
#   1. sandbox A takes every inotify instance, terminal, queued signal and message queue it can,
#      tries AIO, and holds them; meanwhile host root and a second sandbox B still get each of
#      them, A and B run as different host uids, and each owns its user namespace (the kernel
#      charges per-user counters to the owner) and its network namespace (so host uevents never
#      reach it);
#   2. socket families: none but UNIX, INET, INET6 and NETLINK_ROUTE can be created (AF_VSOCK and
#      AF_ALG measured on the bare host first: where the host kernel has them, the sandbox must
#      get EAFNOSUPPORT from the filter);
#   3. socket buffers: a sandbox limited to 64 MiB cannot queue much more than 64 MiB in loopback
#      TCP connections it never reads;
#   4. the init: the worker cannot lower its limits or raise its oom_score_adj, commands are the
#      OOM killer's first choice, and a memory hog is OOM-killed instead of the init (the sandbox
#      still answers after it).
. "$(dirname "$0")/sandbox_common.sh"
SB_TIMEOUT=90

# The attack and the neighbour's check, one program: "hold" takes as much as it can and holds it
# (until killed), "one" takes one of each.
hog='
import ctypes, errno, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
mode = sys.argv[1]
limit = 20000 if mode == "hold" else 1
held = []
def take(name, fn):
    n, err = 0, "none"
    while n < limit:
        r = fn()
        if r < 0:
            e = ctypes.get_errno()
            err = errno.errorcode.get(e, str(e))
            break
        held.append(r)
        n += 1
    print(name, n, err, flush=True)
def pty():
    try:
        m, s = os.openpty()
    except OSError as e:
        ctypes.set_errno(e.errno)
        return -1
    held.append(s)
    return m
class sigval(ctypes.Union):
    _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
mq = iter(range(1 << 20))
take("inotify", lambda: libc.inotify_init1(0))
take("pty", pty)
take("sigqueue", lambda: libc.sigqueue(os.getpid(), sig, sigval(0)))
take("mqueue", lambda: libc.mq_open(("/q%d" % next(mq)).encode(), os.O_CREAT | os.O_RDWR, 0o600, None))
ctx = ctypes.c_ulong(0)
r = libc.syscall(206, 1, ctypes.byref(ctx))
print("aio", "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno(), "?"), flush=True)
print("uid_map", open("/proc/self/uid_map").read().split(), flush=True)
if mode == "hold":
    print("held", flush=True)
    time.sleep(80)
'

# ---- 1. sandbox A holds everything it can; host root and sandbox B are unaffected -----------
mark_a=$SB_MARK
sb_mark # B's
"$EPHD" sandbox run --backend "$SB_BACKEND" --env "EPH_TEST_MARK=$mark_a" -- python3 -c "$hog" hold \
    >"$TEST_TMP/a.out" 2>"$TEST_TMP/a.err" &
a_pid=$!
_pids+=("$a_pid")
for _ in $(seq 600); do
    grep -q '^held' "$TEST_TMP/a.out" && break
    kill -0 "$a_pid" 2>/dev/null || break
    sleep 0.1
done
cat "$TEST_TMP/a.out"
grep -q '^held' "$TEST_TMP/a.out" || { cat "$TEST_TMP/a.err" >&2; fail "sandbox A did not get to hold its resources"; }
a_out=$(cat "$TEST_TMP/a.out")
field() { awk -v k="$1" '$1 == k { print $2, $3 }' <<<"$2"; }
assert_eq "$(field aio "$a_out")" "ENOSYS " "io_setup in the sandbox"
read -r n err <<<"$(field pty "$a_out")"
[ "$n" -le 32 ] && [ "$err" = ENOSPC ] || fail "sandbox A opened $n terminals ($err): devpts has no max"
read -r n err <<<"$(field sigqueue "$a_out")"
[ "$n" -le 1024 ] && [ "$err" = EAGAIN ] || fail "sandbox A queued $n signals ($err)"
read -r n err <<<"$(field inotify "$a_out")"
[ "$err" = EMFILE ] || fail "sandbox A's inotify instances: $n, then $err"
read -r n err <<<"$(field mqueue "$a_out")"
[ "$err" != none ] || fail "sandbox A's message queues were not bounded ($n)"

# Host root, while A holds all that.
host=$(M=$mark_a python3 -c '
import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def res(name, r):
    print(name, "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?"))
fd = libc.inotify_init1(0); res("inotify", fd); fd >= 0 and os.close(fd)
m, s = os.openpty(); print("pty ok"); os.close(m); os.close(s)
name = ("/" + os.environ["M"]).encode()
q = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None); res("mqueue", q)
if q >= 0:
    os.close(q); libc.mq_unlink(name)
ctx = ctypes.c_ulong(0)
r = libc.syscall(206, 1, ctypes.byref(ctx)); res("aio", r)
if r == 0:
    libc.syscall(207, ctx)
')
echo "host root: $host"
for k in inotify pty mqueue aio; do
    assert_contains "$host" "$k ok" "host root's $k while sandbox A holds its own"
done
timeout 10 true || fail "host root's timer_create (timeout) failed while sandbox A holds its signals"

# Sandbox B, at the same time.
sb_run -- python3 -c "$hog" one
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "sandbox B"
for k in inotify pty sigqueue mqueue; do
    assert_eq "$(field "$k" "$SB_OUT")" "1 none" "sandbox B's $k while A holds its own"
done

# Who owns what, seen from the host: A's processes (those in a user namespace other than the
# host's) run as a host id of their own (not B's), which owns A's user namespace, which owns A's
# network namespace.
a_procs=$(sb_procs_with "$mark_a")
[ -n "$a_procs" ] || fail "no process of sandbox A found on the host"
owners=$(for p in $a_procs; do
    python3 -c '
import fcntl, os, struct, sys
p = sys.argv[1]
if os.stat("/proc/%s/ns/user" % p).st_ino == os.stat("/proc/self/ns/user").st_ino:
    sys.exit(0)  # on the host side (ephemerald sandbox run itself)
uid = [l.split()[2] for l in open("/proc/%s/status" % p) if l.startswith("Uid:")][0]
u = os.open("/proc/%s/ns/user" % p, os.O_RDONLY)
owner = struct.unpack("I", fcntl.ioctl(u, 0xb704, b"\0" * 4))[0]  # NS_GET_OWNER_UID
n = os.open("/proc/%s/ns/net" % p, os.O_RDONLY)
netowner = fcntl.ioctl(n, 0xb701)  # NS_GET_USERNS: a descriptor of the owning user namespace
print(uid, owner, "own" if os.fstat(netowner).st_ino == os.fstat(u).st_ino else "host")
' "$p" 2>/dev/null
done | sort -u)
echo "sandbox A (uid, user namespace owner, network namespace owner): $owners"
[ "$(wc -l <<<"$owners")" -eq 1 ] || fail "sandbox A's processes disagree: $owners"
read -r a_uid a_owner a_net <<<"$owners"
[ "$a_uid" -ne 0 ] && [ "$a_owner" = "$a_uid" ] || fail "sandbox A's user namespace is owned by $a_owner, not by its uid $a_uid"
assert_eq "$a_net" own "the owner of sandbox A's network namespace"
b_uid=$(awk '$1 == "uid_map" { gsub(/[^0-9 ]/, " "); print $2 }' <<<"$SB_OUT")
[ -n "$b_uid" ] && [ "$b_uid" != "$a_uid" ] || fail "sandboxes A and B share host uid $a_uid"

kill -TERM "$a_pid"
wait "$a_pid"
SB_MARK=$mark_a sb_assert_clean
sb_mark

# ---- 2. socket families -------------------------------------------------------------------
families='
import errno, socket, sys
fams = {"vsock": (40, 0), "alg": (38, 0)}
if sys.argv[1] == "all":
    fams.update({"tipc": (30, 0), "bluetooth": (31, 0), "can": (29, 0), "xdp": (44, 0),
                 "key": (15, 2), "rds": (21, 0), "llc": (26, 0), "appletalk": (5, 0),
                 "x25": (9, 0), "packet": (17, 0), "unspec": (0, 0),
                 "netlink-uevent": (16, 15), "netlink-audit": (16, 9)})
for name, (fam, proto) in sorted(fams.items()):
    res = "?"
    for t in (1, 2, 5, 3, 4):
        try:
            socket.socket(fam, t, proto).close()
            res = "created"
            break
        except OSError as e:
            res = errno.errorcode.get(e.errno, str(e.errno))
    print(name, res)
'
host=$(python3 -c "$families" host)
sb_run -- python3 -c "$families" all
echo "host: $host"
echo "sandbox: $SB_OUT"
assert_eq "$SB_RC" 0 "socket families"
assert_not_contains "$SB_OUT" created "a socket family outside the allowlist"
while read -r name res; do
    got=$(awk -v k="$name" '$1 == k { print $2 }' <<<"$SB_OUT")
    if [ "$res" = created ]; then
        echo "$name: the host kernel has it; the sandbox got $got"
        assert_eq "$got" EAFNOSUPPORT "$name in the sandbox"
    else
        echo "$name: the host kernel itself refuses it ($res); the sandbox got $got"
    fi
done <<<"$host"
assert_eq "$(awk '$1 == "netlink-uevent" { print $2 }' <<<"$SB_OUT")" EPERM "NETLINK_KOBJECT_UEVENT"

# ---- 3. socket buffers count against the memory limit -------------------------------------
# 64 loopback connections, each written to until the kernel says EAGAIN, never read. The loop
# stops at 256 MiB whatever happens (on a kernel that does not charge socket buffers, that is
# what the host would lose for the sandbox's lifetime).
sb_run --memory-mib 64 --timeout 60 -- python3 -c '
import socket
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(128)
pairs, total, chunk = [], 0, b"x" * 65536
for i in range(64):
    c = socket.create_connection(ls.getsockname())
    s, _ = ls.accept()
    c.setblocking(False)
    pairs.append((c, s))
    while total < (256 << 20):
        try:
            total += c.send(chunk)
        except BlockingIOError:
            break
print("queued_mib", total >> 20)
'
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "socket buffer filler"
queued=$(awk '$1 == "queued_mib" { print $2 }' <<<"$SB_OUT")
[ -n "$queued" ] && [ "$queued" -le 96 ] || fail "a sandbox limited to 64 MiB queued ${queued:-?} MiB in socket buffers"

# ---- 4. the init ---------------------------------------------------------------------------
sb_run --memory-mib 64 --timeout 60 -- sh -c '
python3 -c "import resource; resource.prlimit(1, resource.RLIMIT_CPU, (0, 0))" 2>&1 | tail -n 1
echo "adj init=$(cat /proc/1/oom_score_adj) own=$(cat /proc/self/oom_score_adj)"
(echo 1000 >/proc/1/oom_score_adj) 2>/dev/null && echo "raised init adj" || echo "init adj refused"
python3 -c "b = bytearray(b\"x\") * (512 << 20)" 2>/dev/null
echo "hog $?"
echo "init still there"'
echo "$SB_OUT"
assert_eq "$SB_RC" 0 "the init attack"
assert_contains "$SB_OUT" "PermissionError" "prlimit on the init"
# Whether host root may lower an oom_score_adj here (CAP_SYS_RESOURCE; some containers lack it)
# decides what the init can get: -1000, or the server's own value. A command is always at 1000.
sleep 30 &
probe_pid=$!
if (echo -1000 >"/proc/$probe_pid/oom_score_adj") 2>/dev/null; then
    want_init=-1000
    echo "host root can lower oom_score_adj: the init must be at -1000"
else
    want_init=$(cat /proc/self/oom_score_adj)
    echo "host root cannot lower oom_score_adj (no CAP_SYS_RESOURCE): the init keeps $want_init"
fi
kill "$probe_pid"
assert_contains "$SB_OUT" "adj init=$want_init own=1000" "oom_score_adj of the init and of a command"
assert_contains "$SB_OUT" "init adj refused" "raising the init's oom_score_adj"
assert_contains "$SB_OUT" "hog 137" "the memory hog, OOM-killed"
assert_contains "$SB_OUT" "init still there" "the sandbox after the OOM kill"
echo ok
