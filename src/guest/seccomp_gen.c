/*
 * seccomp_gen.c - the system-call allowlist, compiled to BPF at build time.
 *
 * Not part of any Ephemeral program: the build runs it once (`seccomp-gen OUT.h`) and seccomp.c
 * includes what it writes, so no program links libseccomp and no sandbox start compiles a filter.
 *
 * Default action EPERM; allowed is Docker's default profile (moby profiles/seccomp/default.json,
 * the unconditional list for an unprivileged container), minus what a sandbox user never needs,
 * with argument filters where Docker has them. Denied on top of it, and named here so that a
 * reader can check them (none of them is in the allowlist; the generator verifies that):
 * keyctl, add_key, request_key, bpf, perf_event_open, userfaultfd, io_uring_*, mount, umount2 and
 * the new mount API, unshare, setns, clone with namespace flags, clone3 (ENOSYS, so that libc
 * falls back to clone, which can be filtered by its flags), ptrace, process_vm_readv/writev,
 * kexec_*, module loading, ioctl TIOCSTI and TIOCLINUX (the request compared on its low 32 bits,
 * which is what the kernel uses), AF_PACKET sockets and raw IP sockets, every socket family but
 * AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE, the AIO calls (io_setup would take the host-wide
 * fs.aio-max-nr; ENOSYS), and prlimit64 on any process but the caller. Any architecture but the
 * native one (i386 through int 0x80, x32) kills the process.
 *
 * Two filters are built (an allowlist and a denylist, see build_allow and build_deny), then
 * concatenated into one equivalent program (merge()); the header holds all three, so that a kernel
 * refusing the merged program can still be given the two.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const allowed[] = {
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "arch_prctl",
    "bind",
    "brk",
    "cachestat",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "clock_adjtime",
    "clock_getres",
    "clock_gettime",
    "clock_nanosleep",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "fchown",
    "fchownat",
    "fcntl",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstatfs",
    "fsync",
    "ftruncate",
    "futex",
    "futex_requeue",
    "futex_wait",
    "futex_waitv",
    "futex_wake",
    "futimesat",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "geteuid",
    "getgid",
    "getgroups",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresuid",
    "getrlimit",
    "get_robust_list",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "gettid",
    "gettimeofday",
    "getuid",
    "getxattr",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "ioprio_get",
    "ioprio_set",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "madvise",
    "map_shadow_stack",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedsend",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "name_to_handle_at",
    "nanosleep",
    "newfstatat",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_getfd",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "process_mrelease",
    "pselect6",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recvfrom",
    "recvmmsg",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_tgsigqueueinfo",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "sendfile",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setfsgid",
    "setfsuid",
    "setgid",
    "setgroups",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setresgid",
    "setresuid",
    "setreuid",
    "setrlimit",
    "set_robust_list",
    "setsid",
    "setsockopt",
    "set_tid_address",
    "setuid",
    "setxattr",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "splice",
    "stat",
    "statfs",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_settime",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_settime",
    "times",
    "tkill",
    "truncate",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "write",
    "writev",
};

/* Never allowed: checked against the list above when the filter is built. */
static const char *const denied[] = {
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "io_setup",
    "io_submit",
    "io_cancel",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "mount",
    "umount2",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "clone3",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "open_by_handle_at",
    "iopl",
    "ioperm",
    "modify_ldt",
    "sethostname",
    "setdomainname",
    "settimeofday",
    "clock_settime",
    "lookup_dcookie",
    "vhangup",
    "fanotify_init",
    "nfsservctl",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
};

#define CLONE_NS_FLAGS                                                                             \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |     \
     CLONE_NEWCGROUP)

/* Two programs: the allowlist (default EPERM) and a denylist (default allow) for what must be
 * refused by argument inside otherwise allowed calls. The kernel runs every filter and takes the
 * strictest answer. Two filters because libseccomp cannot express "allow ioctl unless the request
 * is TIOCSTI" in a filter whose default is the same EPERM; the denylist also repeats every denied
 * call, so that one slip in the allowlist is not a hole. */
static struct sock_fprog programs[2];
/* Both programs as one (merge()), loaded with a single system call. */
static struct sock_fprog merged;

static int add(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
               const struct scmp_arg_cmp *cmp)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr < 0)
        return 0; /* a system call this libseccomp (or architecture) does not know */
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc)
        fprintf(stderr, "seccomp-gen: seccomp rule for %s: %s\n", name, strerror(-rc));
    return rc;
}

static int build_allow(scmp_filter_ctx ctx)
{
    int rc;
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
        for (size_t j = 0; j < sizeof(allowed) / sizeof(allowed[0]); j++)
            if (strcmp(denied[i], allowed[j]) == 0) {
                fprintf(stderr, "seccomp-gen: %s is both allowed and denied\n", allowed[j]);
                return -EINVAL;
            }
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
        rc = add(ctx, SCMP_ACT_ALLOW, allowed[i], 0, NULL);
        if (rc)
            return rc;
    }
    /* personality: only the values Docker allows (Linux, and the READ_IMPLIES_EXEC-free ones). */
    static const uint64_t personas[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};
    for (size_t i = 0; i < sizeof(personas) / sizeof(personas[0]); i++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, personas[i]);
        rc = add(ctx, SCMP_ACT_ALLOW, "personality", 1, &c);
        if (rc)
            return rc;
    }
    /* clone: only without namespace flags (x86-64 passes the flags first). */
    struct scmp_arg_cmp clone_ok = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NS_FLAGS, 0);
    rc = add(ctx, SCMP_ACT_ALLOW, "clone", 1, &clone_ok);
    if (rc)
        return rc;
    rc = add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
    if (rc)
        return rc;
    rc = add(ctx, SCMP_ACT_ALLOW, "ioctl", 0, NULL);
    if (rc)
        return rc;
    /* socket: the families a sandbox's programs use, nothing else (AF_VSOCK would share the host
     * VM's vsock port space, AF_ALG the kernel's crypto, and every other family is kernel code no
     * sandbox needs). Netlink only as NETLINK_ROUTE, which `ip` and getaddrinfo's AI_ADDRCONFIG
     * read. Anything else is refused (the denylist answers EAFNOSUPPORT, what a kernel without
     * the family says, so that programs fall back as they would there). */
    static const int families[] = {AF_UNIX, AF_INET, AF_INET6};
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, (uint64_t)families[i]);
        rc = add(ctx, SCMP_ACT_ALLOW, "socket", 1, &c);
        if (rc)
            return rc;
    }
    struct scmp_arg_cmp netlink[2] = {SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                                      SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE)};
    rc = add(ctx, SCMP_ACT_ALLOW, "socket", 2, netlink);
    if (rc)
        return rc;
    struct scmp_arg_cmp pair = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);
    rc = add(ctx, SCMP_ACT_ALLOW, "socketpair", 1, &pair);
    if (rc)
        return rc;
    /* prlimit64 on itself only (pid 0): another process of the sandbox has the same uid, and
     * could otherwise lower the init's RLIMIT_CPU to 0 and have the kernel kill it. */
    struct scmp_arg_cmp self = SCMP_A0(SCMP_CMP_EQ, 0);
    return add(ctx, SCMP_ACT_ALLOW, "prlimit64", 1, &self);
}

static int build_deny(scmp_filter_ctx ctx)
{
    int rc;
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
        /* ENOSYS where a program has a fallback: clone3 (to clone), the AIO calls (to threads
         * or plain reads, as on a kernel built without AIO). */
        bool nosys = strcmp(denied[i], "clone3") == 0 ||
                     (strncmp(denied[i], "io_", 3) == 0 && strncmp(denied[i], "io_uring", 8) != 0);
        uint32_t act = nosys ? SCMP_ACT_ERRNO(ENOSYS) : SCMP_ACT_ERRNO(EPERM);
        rc = add(ctx, act, denied[i], 0, NULL);
        if (rc)
            return rc;
    }
    static const uint64_t ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                        CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
    for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &c);
        if (rc)
            return rc;
    }
    /* ioctl: no pushing input into a terminal (TIOCSTI) or the console (TIOCLINUX). The kernel
     * reads the request as 32 bits, so the comparison masks the upper half away. */
    static const uint64_t bad_ioctls[] = {TIOCSTI, TIOCLINUX};
    for (size_t i = 0; i < 2; i++) {
        struct scmp_arg_cmp c = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, bad_ioctls[i]);
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &c);
        if (rc)
            return rc;
    }
    /* socket: every family the allowlist does not name, EAFNOSUPPORT (AF_UNSPEC, 3-9, 11-15,
     * above AF_NETLINK); netlink other than NETLINK_ROUTE, EPERM. */
    for (uint64_t fam = 0; fam < AF_NETLINK; fam++) {
        if (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6)
            continue;
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, fam);
        rc = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c);
        if (rc)
            return rc;
    }
    struct scmp_arg_cmp above = SCMP_A0(SCMP_CMP_GT, AF_NETLINK);
    rc = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &above);
    if (rc)
        return rc;
    struct scmp_arg_cmp nl_other[2] = {SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                                       SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE)};
    rc = add(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 2, nl_other);
    if (rc)
        return rc;
    /* socket: no packet sockets, no raw IP sockets (the type's low 4 bits; the rest are
     * SOCK_NONBLOCK and SOCK_CLOEXEC). */
    struct scmp_arg_cmp packet = SCMP_A0(SCMP_CMP_EQ, AF_PACKET);
    rc = add(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 1, &packet);
    if (rc)
        return rc;
    static const int raw_families[] = {AF_INET, AF_INET6};
    for (size_t i = 0; i < 2; i++) {
        struct scmp_arg_cmp c[2] = {SCMP_A0(SCMP_CMP_EQ, (uint64_t)raw_families[i]),
                                    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW)};
        rc = add(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 2, c);
        if (rc)
            return rc;
    }
    return 0;
}

/* Compiles one filter to BPF, kept for the life of the process. */
static int compile(uint32_t def, int (*build)(scmp_filter_ctx), struct sock_fprog *out)
{
    scmp_filter_ctx ctx = seccomp_init(def);
    int fd = -1;
    if (!ctx)
        return -ENOMEM;
    /* Only the native architecture is in the filter: i386 and x32 system calls kill. */
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (!rc)
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); /* the jail sets it itself */
    if (!rc)
        rc = build(ctx);
    if (!rc) {
        fd = memfd_create("ephemeral-seccomp", MFD_CLOEXEC);
        if (fd < 0)
            rc = -errno;
    }
    if (!rc)
        rc = seccomp_export_bpf(ctx, fd);
    if (!rc) {
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) ||
            st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
            rc = -EINVAL;
        } else {
            struct sock_filter *insns = malloc((size_t)st.st_size);
            if (!insns || pread(fd, insns, (size_t)st.st_size, 0) != st.st_size) {
                free(insns);
                rc = -EIO;
            } else {
                out->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
                out->filter = insns;
            }
        }
    }
    if (fd >= 0)
        close(fd);
    seccomp_release(ctx);
    return rc;
}

/* The denylist followed by the allowlist, every "return ALLOW" of the denylist turned into a jump
 * to the allowlist's first instruction. The kernel runs all the filters of a process and keeps the
 * strictest answer (for two ERRNOs, the most recently loaded: the denylist); here the denylist's
 * every other answer returns at once, and its ALLOW means "ask the allowlist", whose answer stands:
 * the same result for every system call, with one program to validate and JIT per sandbox instead
 * of two. libseccomp returns only constants (BPF_RET|BPF_K); anything else and no merge. */
static void merge(void)
{
    const struct sock_fprog *deny = &programs[1], *allow = &programs[0];
    size_t n = (size_t)deny->len + allow->len;
    if (n > BPF_MAXINSNS)
        return;
    struct sock_filter *insns = malloc(n * sizeof(*insns));
    if (!insns)
        return;
    for (size_t i = 0; i < deny->len; i++) {
        struct sock_filter f = deny->filter[i];
        if (BPF_CLASS(f.code) == BPF_RET) {
            if (BPF_RVAL(f.code) != BPF_K) {
                free(insns);
                return;
            }
            if (f.k == SECCOMP_RET_ALLOW)
                f = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, (uint32_t)(deny->len - i - 1), 0,
                                                 0);
        }
        insns[i] = f;
    }
    memcpy(insns + deny->len, allow->filter, allow->len * sizeof(*insns));
    merged.len = (unsigned short)n;
    merged.filter = insns;
}

static int emit(FILE *f, const char *name, const struct sock_fprog *prog)
{
    fprintf(f, "static const struct sock_filter %s[%u] = {\n", name, prog->len);
    for (unsigned i = 0; i < prog->len; i++) {
        const struct sock_filter *x = &prog->filter[i];
        fprintf(f, "    {0x%04x, %u, %u, 0x%08xu},\n", x->code, x->jt, x->jf, x->k);
    }
    return fprintf(f, "};\n") < 0 ? -EIO : 0;
}

/* seccomp-gen OUT.h: the three programs as C arrays (eph_ns_seccomp_merged, _allow, _deny). A
 * program that cannot be merged fails the build rather than costing every sandbox a second load.
 * Written to OUT.h.tmp and renamed, so that a failed
 * run leaves no half header for the next make to take as up to date. */
int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seccomp-gen OUT.h\n");
        return 2;
    }
    int rc = compile(SCMP_ACT_ERRNO(EPERM), build_allow, &programs[0]);
    if (!rc)
        rc = compile(SCMP_ACT_ALLOW, build_deny, &programs[1]);
    if (rc) {
        fprintf(stderr, "seccomp-gen: cannot build the seccomp filter: %s\n", strerror(-rc));
        return 1;
    }
    merge();
    if (!merged.filter) {
        fprintf(stderr, "seccomp-gen: the two programs cannot be merged\n");
        return 1;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]) >= (int)sizeof(tmp))
        return 1;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "seccomp-gen: %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    fprintf(f, "/* Generated by seccomp-gen from src/guest/seccomp_gen.c: do not edit. "
               "*/\n#include <linux/filter.h>\n");
    rc = emit(f, "eph_ns_seccomp_allow", &programs[0]);
    if (!rc)
        rc = emit(f, "eph_ns_seccomp_deny", &programs[1]);
    if (!rc)
        rc = emit(f, "eph_ns_seccomp_merged", &merged);
    if (fclose(f) != 0 || rc || rename(tmp, argv[1]) != 0) {
        fprintf(stderr, "seccomp-gen: cannot write %s\n", argv[1]);
        unlink(tmp);
        return 1;
    }
    return 0;
}
