# The doors every backend must keep closed (sourced, not run: it is not executable), shared by
# sandbox_doors.sh, gvisor_doors.sh and microvm_doors.sh, each after its backend's own _common.sh.
# The probe is sandbox_probe.c, built static here and copied into the sandbox as a run file:
#
#   doors_build              builds it into $TEST_TMP/probe (skips without a C compiler)
#   DOORS_CMD                the command that runs both of its modes in a sandbox: `probe doors`
#                            (each door by what it achieves), then `probe` (the filter, call by
#                            call: EPERM where the kernel itself would answer otherwise)
#   doors_check OUT [ALLOWED]   every door of DOORS closed (no OPEN line, none missing, the
#                            probe reached its end); every call of the filter probe as expected
#                            but the lines matching the regex ALLOWED (a backend's own
#                            difference, written down in docs/SECURITY.md)

DOORS=(
    "no_new_privs"
    "seccomp filter"
    "capabilities"
    "setresuid(0, 0, 0)"
    "unshare(CLONE_NEWUSER)"
    "unshare(CLONE_NEWNET)"
    "unshare(CLONE_NEWNS)"
    "clone(CLONE_NEWUSER)"
    "chroot after unshare(CLONE_NEWUSER)"
    "unshare(CLONE_NEWNET) after unshare(CLONE_NEWUSER)"
    "socket(AF_PACKET) in a network namespace of its own"
    "chroot"
    "mount(tmpfs)"
    "socket(AF_PACKET, SOCK_RAW)"
    "socket(AF_INET, SOCK_RAW, ICMP)"
    "socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)"
    "socket(AF_VSOCK)"
    "socket(AF_ALG)"
    "add_key"
    "keyctl(KEYCTL_GET_KEYRING_ID, session, create)"
    "bpf(BPF_MAP_CREATE)"
    "perf_event_open(task clock, self)"
    "userfaultfd"
    "io_uring_setup"
    "ioctl(TIOCSTI) on its own terminal"
    "i386 system call (int 0x80)"
    "unshare(CLONE_NEWUSER) through int 0x80"
    "x32 system call"
    "ptrace(PTRACE_SEIZE, init)"
    "process_vm_readv(init)"
    "open /proc/1/mem"
    "open /proc/1/oom_score_adj for writing"
    "pidfd_getfd(init, its channel)"
    "prlimit64(init) read"
    "prlimit64(init) set"
    "kill(init, SIGSTOP)"
    "kill(init, SIGKILL)"
)
DOORS_CMD='./probe doors; echo "-- filter"; ./probe'

doors_build() {
    command -v cc >/dev/null || skip "no C compiler to build the probe"
    cc -static -O2 -o "$TEST_TMP/probe" "$(dirname "$0")/sandbox_probe.c" ||
        fail "cannot build the probe"
}

_doors_line() { # prefix: the first line of stdin that starts with it (status 1 if none)
    P=$1 awk 'index($0, ENVIRON["P"]) == 1 { print; found = 1; exit } END { exit !found }'
}

doors_check() { # output [allowed filter-probe failures, a regex]
    local out=$1 allowed=${2:-} d doors filter bad
    doors=$(sed '/^-- filter$/,$d' <<<"$out")
    filter=$(sed -n '/^-- filter$/,$p' <<<"$out")
    echo "$doors"
    for d in "${DOORS[@]}"; do
        _doors_line "closed $d: " <<<"$doors" >/dev/null ||
            fail "door '$d' is not closed: $(_doors_line "OPEN $d: " <<<"$doors" || echo 'no line (the probe ended before it)')"
    done
    bad=$(grep '^OPEN ' <<<"$doors") && fail "open doors: $bad"
    [ "$(grep -c '^closed ' <<<"$doors")" -eq "${#DOORS[@]}" ] ||
        fail "the probe tried doors this test does not name: $(grep '^closed ' <<<"$doors")"
    assert_contains "$doors" "open=0" "the probe's end"
    echo "$filter" | grep -v '^ok '
    bad=$(grep '^FAIL ' <<<"$filter" | { if [ -n "$allowed" ]; then grep -Ev -- "$allowed"; else cat; fi; })
    [ -z "$bad" ] || fail "the filter probe: $bad"
    assert_contains "$filter" "bad=" "the filter probe's end"
}
