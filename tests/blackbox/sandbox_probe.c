/*
 * sandbox_probe.c - run inside a sandbox by sandbox_seccomp.sh: calls each system call the filter
 * must refuse, with arguments for which the kernel itself would answer something other than
 * EPERM (EFAULT, EBADF, EINVAL, ENOTTY, or success), so that EPERM proves the filter refused it
 * before the kernel saw it; then checks that the allowed neighbours still work, and prints how
 * system calls of foreign architectures (i386 int 0x80, x32) ended ("foreign NAME signal|exit N"),
 * which the test compares with the same probe run on the bare host (`probe foreign`). Prints one
 * line per check and "bad=N". Built static by the test: it needs nothing from the image.
 *
 * `probe doors` (probe_doors() below) tries each way out or up by what it would achieve,
 * whatever refuses it, and runs in every backend (sandbox_doors.sh, gvisor_doors.sh,
 * microvm_doors.sh): one line per door, "closed NAME: why" or "OPEN NAME: what happened", a few
 * "info" lines, and "open=N".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NEWUSER 0x10000000L
#define NEWNS 0x20000L
#define NEWNET 0x40000000L
#define NEWPID 0x20000000L
#define FS 0x200L

static int bad;
static char buf[64];

static void expect(const char *name, long nr, long a, long b, long c, long d, long e, long f,
                   int want)
{
    errno = 0;
    long r = syscall(nr, a, b, c, d, e, f);
    if (r == 0 && nr == SYS_clone)
        _exit(0); /* a clone that got through: the child must not run the rest */
    int got = r == -1 ? errno : 0;
    if (r > 0 && (nr == SYS_socket || nr == SYS_userfaultfd))
        close((int)r);
    int ok = got == want;
    bad += !ok;
    printf("%-4s %s: %s\n", ok ? "ok" : "FAIL", name, got ? strerror(got) : "succeeded");
}

static void allowed(const char *name, int ok)
{
    bad += !ok;
    printf("%-4s allowed %s\n", ok ? "ok" : "FAIL", name);
}

static void foreign(const char *name, int x32)
{
    pid_t p = fork();
    if (p == 0) {
        long r;
        if (x32) {
            r = syscall(0x40000000L + 39); /* x32 getpid */
        } else {
            /* i386 getpid (20) through int 0x80 from a 64-bit process. */
            __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
        }
        printf("     %s reached the kernel: %ld\n", name, r);
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    /* Judged by the test against what the bare host does (a kernel without 32-bit system calls
     * kills int 0x80 with SIGSEGV before any filter sees it). */
    printf("foreign %s %s %d\n", x32 ? "x32" : "i386", WIFSIGNALED(st) ? "signal" : "exit",
           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

int probe_doors(void);

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "doors") == 0)
        return probe_doors();
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        foreign("i386 int 0x80", 0);
        foreign("x32", 1);
        return 0;
    }
    long ptr = (long)buf;
    setvbuf(stdout, NULL, _IOLBF, 0);
    expect("unshare(CLONE_NEWUSER)", SYS_unshare, NEWUSER, 0, 0, 0, 0, 0, EPERM);
    expect("unshare(CLONE_NEWNS)", SYS_unshare, NEWNS, 0, 0, 0, 0, 0, EPERM);
    expect("unshare(CLONE_NEWNET)", SYS_unshare, NEWNET, 0, 0, 0, 0, 0, EPERM);
    expect("setns", SYS_setns, -1, 0, 0, 0, 0, 0, EPERM);
    expect("clone(CLONE_NEWUSER)", SYS_clone, NEWUSER | FS, 0, 0, 0, 0, 0, EPERM);
    expect("clone(CLONE_NEWPID)", SYS_clone, NEWPID | FS, 0, 0, 0, 0, 0, EPERM);
    expect("clone(CLONE_NEWNET)", SYS_clone, NEWNET | FS, 0, 0, 0, 0, 0, EPERM);
    expect("clone3", SYS_clone3, 0, 0, 0, 0, 0, 0, ENOSYS);
    expect("mount", SYS_mount, 1, 1, 1, 0, 1, 0, EPERM);
    expect("umount2", SYS_umount2, 1, 0, 0, 0, 0, 0, EPERM);
    expect("pivot_root", SYS_pivot_root, 1, 1, 0, 0, 0, 0, EPERM);
    expect("chroot", SYS_chroot, 1, 0, 0, 0, 0, 0, EPERM);
    expect("fsopen", SYS_fsopen, 1, 0, 0, 0, 0, 0, EPERM);
    expect("fsconfig", SYS_fsconfig, -1, 0, 0, 0, 0, 0, EPERM);
    expect("fsmount", SYS_fsmount, -1, 0, 0, 0, 0, 0, EPERM);
    expect("move_mount", SYS_move_mount, -1, 1, -1, 1, 0, 0, EPERM);
    expect("open_tree", SYS_open_tree, -1, 1, 0, 0, 0, 0, EPERM);
    expect("fspick", SYS_fspick, -1, 1, 0, 0, 0, 0, EPERM);
    expect("mount_setattr", 442, -1, 1, 0, 0, 0, 0, EPERM);
    expect("keyctl(KEYCTL_GET_KEYRING_ID)", SYS_keyctl, 0, -2, 1, 0, 0, 0, EPERM);
    expect("add_key", SYS_add_key, 1, 1, 1, 0, 0, 0, EPERM);
    expect("request_key", SYS_request_key, 1, 1, 1, 0, 0, 0, EPERM);
    expect("bpf", SYS_bpf, 0, 1, 16, 0, 0, 0, EPERM);
    expect("perf_event_open", SYS_perf_event_open, 1, 0, -1, -1, 0, 0, EPERM);
    expect("userfaultfd(UFFD_USER_MODE_ONLY)", SYS_userfaultfd, 0x80000 | 1, 0, 0, 0, 0, 0, EPERM);
    expect("io_uring_setup", SYS_io_uring_setup, 1, 1, 0, 0, 0, 0, EPERM);
    expect("io_uring_enter", SYS_io_uring_enter, -1, 0, 0, 0, 0, 0, EPERM);
    expect("io_uring_register", SYS_io_uring_register, -1, 0, 0, 0, 0, 0, EPERM);
    expect("ptrace(PTRACE_TRACEME)", SYS_ptrace, 0, 0, 0, 0, 0, 0, EPERM);
    expect("process_vm_readv", SYS_process_vm_readv, 1, 1, 1, 1, 1, 0, EPERM);
    expect("process_vm_writev", SYS_process_vm_writev, 1, 1, 1, 1, 1, 0, EPERM);
    expect("kexec_load", SYS_kexec_load, 0, 0, 1, 0, 0, 0, EPERM);
    expect("kexec_file_load", SYS_kexec_file_load, -1, -1, 0, 0, 0, 0, EPERM);
    expect("init_module", SYS_init_module, 1, 0, 1, 0, 0, 0, EPERM);
    expect("finit_module", SYS_finit_module, -1, 0, 0, 0, 0, 0, EPERM);
    expect("delete_module", SYS_delete_module, 1, 0, 0, 0, 0, 0, EPERM);
    expect("ioctl(TIOCSTI)", SYS_ioctl, 0, 0x5412, ptr, 0, 0, 0, EPERM);
    expect("ioctl(TIOCSTI with upper bits set)", SYS_ioctl, 0, (1L << 32) | 0x5412, ptr, 0, 0, 0,
           EPERM);
    expect("ioctl(TIOCLINUX)", SYS_ioctl, 0, 0x541C, ptr, 0, 0, 0, EPERM);
    expect("socket(AF_PACKET, invalid type)", SYS_socket, AF_PACKET, 12, 0, 0, 0, 0, EPERM);
    expect("socket(AF_PACKET, SOCK_RAW)", SYS_socket, AF_PACKET, SOCK_RAW, 0, 0, 0, 0, EPERM);
    expect("socket(AF_INET, SOCK_RAW, invalid protocol)", SYS_socket, AF_INET, SOCK_RAW, 256, 0, 0,
           0, EPERM);
    expect("socket(AF_INET6, SOCK_RAW|SOCK_CLOEXEC, invalid protocol)", SYS_socket, AF_INET6,
           SOCK_RAW | SOCK_CLOEXEC, 256, 0, 0, 0, EPERM);
    /* Netlink other than NETLINK_ROUTE (here the kernel's uevents, which the kernel would give
     * any user), socketpair other than AF_UNIX (the kernel: EOPNOTSUPP), prlimit64 on another
     * process (pid 1, the init: the kernel would let the same uid read it), AIO (the kernel:
     * EFAULT for the NULL context; the filter: ENOSYS). */
    expect("socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)", SYS_socket, AF_NETLINK, SOCK_RAW, 15, 0, 0,
           0, EPERM);
    expect("socketpair(AF_INET)", SYS_socketpair, AF_INET, SOCK_STREAM, 0, (long)ptr, 0, 0, EPERM);
    expect("prlimit64(1, RLIMIT_CPU) read", SYS_prlimit64, 1, 0, 0, (long)ptr, 0, 0, EPERM);
    expect("prlimit64(1, RLIMIT_CPU, 0)", SYS_prlimit64, 1, 0, (long)ptr, 0, 0, 0, EPERM);
    expect("io_setup(1, NULL)", SYS_io_setup, 1, 0, 0, 0, 0, 0, ENOSYS);
    expect("io_submit", SYS_io_submit, 0, 1, 0, 0, 0, 0, ENOSYS);

    int fds[2];
    allowed("pipe", pipe(fds) == 0);
    allowed("prlimit64(0) of itself", syscall(SYS_prlimit64, 0, 7, 0, (long)ptr) == 0);
    int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);
    allowed("socket(AF_NETLINK, NETLINK_ROUTE)", nl >= 0);
    close(nl);
    int sp[2];
    allowed("socketpair(AF_UNIX)", socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    close(sp[0]);
    close(sp[1]);
    int n = -1;
    allowed("ioctl(FIONREAD) on a pipe", syscall(SYS_ioctl, fds[0], 0x541B, &n) == 0 && n == 0);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    allowed("socket(AF_INET, SOCK_STREAM)", s >= 0);
    close(s);
    s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    allowed("socket(AF_INET, SOCK_DGRAM)", s >= 0);
    close(s);
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    allowed("socket(AF_UNIX)", s >= 0);
    close(s);
    pid_t p = fork();
    if (p == 0)
        _exit(7);
    int st = 0;
    allowed("fork", p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 7);
    allowed("personality(query)", syscall(SYS_personality, 0xffffffffL) >= 0);

    printf("bad=%d\n", bad);
    foreign("i386 int 0x80", 0);
    foreign("x32", 1);
    return 0;
}

/* ---- doors ------------------------------------------------------------------------------ */
/* Each door is tried with arguments that an unprivileged process of a kernel without this
 * sandbox's hardening would get through; "closed" says why it did not (the errno, or what the
 * kernel did with a signal). The init is pid 1 in every backend. */

#include <fcntl.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/uio.h>

#define INIT_PID 1
#define AF_PACKET_ 17
#define AF_ALG_ 38
#define AF_VSOCK_ 40
static int doors_open;

static void door(const char *name, int closed, const char *detail)
{
    doors_open += !closed;
    printf("%s %s: %s\n", closed ? "closed" : "OPEN", name, detail);
}

/* A system call whose failure closes the door (any errno: the detail says which). */
static void door_call(const char *name, long r)
{
    char d[96];
    if (r < 0)
        snprintf(d, sizeof(d), "%s", strerror(errno));
    else
        snprintf(d, sizeof(d), "succeeded (%ld)", r);
    door(name, r < 0, d);
    if (r > 2 && strncmp(name, "socket", 6) == 0)
        close((int)r);
}

/* A call on another process: closed only by a refusal (a permission error, or no such call); any
 * other error means that the permission check let it through. */
static void door_refused(const char *name, long r)
{
    int e = r < 0 ? errno : 0;
    door(name, r < 0 && (e == EPERM || e == EACCES || e == ENOSYS),
         r < 0 ? strerror(e) : "succeeded");
}

/* Runs fn in a child: its exit status, or minus the signal that ended it. */
static int in_child(int (*fn)(void))
{
    fflush(stdout);
    pid_t p = fork();
    if (p < 0)
        return 255;
    if (p == 0)
        _exit(fn());
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
}

/* One system call in a child, for a door that would change the caller (a namespace, a root, a
 * uid): like syscall(), with the child's errno. */
static long child_nr, child_args[5];
static int child_call(void)
{
    long r = syscall(child_nr, child_args[0], child_args[1], child_args[2], child_args[3],
                     child_args[4]);
    return r < 0 ? (errno > 0 && errno < 255 ? errno : 254) : 0;
}
static long in_child_call(long nr, long a, long b, long c, long d, long e)
{
    child_nr = nr;
    child_args[0] = a, child_args[1] = b, child_args[2] = c, child_args[3] = d, child_args[4] = e;
    int r = in_child(child_call);
    if (r == 0)
        return 0;
    errno = r < 0 ? EINTR : r; /* a child killed by a signal did not get through either */
    return -1;
}

/* In a child (a user namespace of its own changes the caller): 1 when there is no user namespace,
 * else 2 and a bit for each step that got through: 4 chroot, 8 a network namespace of its own,
 * 16 a packet socket in it. */
#define USERNS_CHROOT 4
#define USERNS_NET 8
#define USERNS_PACKET 16
static int userns_steps(void)
{
    if (syscall(SYS_unshare, NEWUSER) != 0)
        return 1;
    int got = 2;
    if (syscall(SYS_chroot, ".") == 0)
        got |= USERNS_CHROOT;
    if (syscall(SYS_unshare, NEWNET) == 0) {
        got |= USERNS_NET;
        if (syscall(SYS_socket, AF_PACKET_, SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */) >= 0)
            got |= USERNS_PACKET;
    }
    return got;
}

static void doors_userns(void)
{
    static const struct {
        const char *name;
        int bit;
    } steps[] = {
        {"chroot after unshare(CLONE_NEWUSER)", USERNS_CHROOT},
        {"unshare(CLONE_NEWNET) after unshare(CLONE_NEWUSER)", USERNS_NET},
        {"socket(AF_PACKET) in a network namespace of its own", USERNS_PACKET},
    };
    int r = in_child(userns_steps);
    char d[64];
    snprintf(d, sizeof(d), "%s (status %d)",
             r == 1 ? "no user namespace" : (r < 0 ? "killed" : "in a user namespace"), r);
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        door(steps[i].name, r == 1 || r < 0 || !(r & steps[i].bit), d);
}

static int clone_userns(void)
{
    long r = syscall(SYS_clone, NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (r == 0)
        _exit(0);
    if (r < 0)
        return errno;
    waitpid((pid_t)r, NULL, 0);
    return 0;
}

/* TIOCSTI on the caller's own controlling terminal, the kernel's condition for it: 0 when a
 * character was pushed, 200 without a terminal to try, else the errno. */
static int tiocsti(void)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0)
        return 200;
    const char *name = ptsname(m);
    if (!name || setsid() < 0)
        return 200;
    int t = open(name, O_RDWR);
    if (t < 0)
        return 200;
    char c = 'x';
    return syscall(SYS_ioctl, t, 0x5412 /* TIOCSTI */, &c) == 0 ? 0 : errno;
}

/* i386 getpid through int 0x80: 0 when the kernel ran it (it answered the pid). gVisor serves
 * int 0x80 as a 64-bit system call (20 is writev there): it answers something else. */
static int i386_call(void)
{
    long r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    return r == getpid() ? 0 : 1;
}

/* int 0x80 with the 64-bit number and arguments of unshare(CLONE_NEWUSER) (in the registers of
 * both conventions): 0 when it made a user namespace. Where int 0x80 is i386 (Linux), 272 is
 * another call, which the filter kills for its architecture; where it is served as a 64-bit call
 * (gVisor), it must meet the same filter as any other. */
static int i386_unshare(void)
{
    long r;
    __asm__ volatile("int $0x80"
                     : "=a"(r)
                     : "a"((long)SYS_unshare), "D"(NEWUSER), "b"(NEWUSER)
                     : "memory", "rcx", "r11");
    return r == 0 ? 0 : 1;
}

/* x32 getpid: 0 when the kernel ran it, 1 when the kernel has no x32 (ENOSYS). */
static int x32_call(void)
{
    long r = syscall(0x40000000L + 39);
    return r > 0 ? 0 : 1;
}

static void door_child(const char *name, int (*fn)(void))
{
    int r = in_child(fn);
    char d[96];
    if (r < 0)
        snprintf(d, sizeof(d), "killed by signal %d", -r);
    else if (r == 200)
        snprintf(d, sizeof(d), "nothing to try it on");
    else if (r)
        snprintf(d, sizeof(d), "%s", r == 1 ? "refused" : strerror(r));
    else
        snprintf(d, sizeof(d), "succeeded");
    door(name, r != 0, d);
}

/* PTRACE_SEIZE does not stop the init, and the tracer's exit detaches it. */
static int ptrace_init(void)
{
    return syscall(SYS_ptrace, 0x4206 /* PTRACE_SEIZE */, INIT_PID, 0, 0) == 0 ? 0 : errno;
}

/* One line of /proc/PID/status ("State:", "ShdPnd:"...), the value's first word in out. */
static int status_field(pid_t pid, const char *key, char *out, size_t cap)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int found = -1;
    size_t klen = strlen(key);
    while (found && fgets(line, sizeof(line), f))
        if (strncmp(line, key, klen) == 0 && sscanf(line + klen, "%63s", out) == 1)
            found = 0;
    fclose(f);
    (void)cap;
    return found;
}

/* Whether sig, sent to pid and accepted (kill returned 0), took: still pending, or done (stopped;
 * for SIGKILL, gone or dying). The pending sets are read first: a signal dequeued after that read
 * has already set the state that the second read sees. Dropped by the kernel, it is neither. */
static int signal_took(pid_t pid, int sig)
{
    char v[64];
    for (const char *k = "ShdPnd:"; k; k = strcmp(k, "ShdPnd:") == 0 ? "SigPnd:" : NULL)
        if (status_field(pid, k, v, sizeof(v)) == 0 && (strtoull(v, NULL, 16) >> (sig - 1)) & 1)
            return 1;
    if (status_field(pid, "State:", v, sizeof(v)) != 0)
        return sig == SIGKILL;
    return sig == SIGSTOP ? (v[0] == 'T' || v[0] == 't') : (v[0] == 'Z' || v[0] == 'X');
}

static void door_signal(const char *name, int sig)
{
    printf("trying %s\n", name);
    fflush(stdout);
    if (kill(INIT_PID, sig) != 0) {
        door(name, 1, strerror(errno));
        return;
    }
    int took = signal_took(INIT_PID, sig);
    if (sig == SIGSTOP)
        kill(INIT_PID, SIGCONT); /* let the run go on to report */
    door(name, !took, took ? "the signal took" : "accepted, and dropped by the kernel");
}

int probe_doors(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char v[64] = "?", comm[64] = "?";
    FILE *f = fopen("/proc/1/comm", "re");
    if (f) {
        if (!fgets(comm, sizeof(comm), f))
            comm[0] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    printf("info init: pid %d, %s\n", INIT_PID, comm);
    f = fopen("/proc/sys/user/max_user_namespaces", "re");
    if (f) {
        if (fscanf(f, "%63s", v) != 1)
            v[0] = '\0';
        fclose(f);
    }
    printf("info user.max_user_namespaces: %s\n", f ? v : "absent");

    /* Privilege. */
    door("no_new_privs", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1, "PR_GET_NO_NEW_PRIVS");
    long mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
    snprintf(v, sizeof(v), "PR_GET_SECCOMP %ld", mode);
    door("seccomp filter", mode == 2, v);
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct caps[2] = {{0}};
    long cr = syscall(SYS_capget, &hdr, caps);
    int anycap = cr != 0 || caps[0].effective || caps[0].permitted || caps[0].inheritable ||
                 caps[1].effective || caps[1].permitted || caps[1].inheritable;
    door("capabilities", !anycap, anycap ? "some set is not empty" : "every set empty");
    door_call("setresuid(0, 0, 0)", in_child_call(SYS_setresuid, 0, 0, 0, 0, 0));

    /* Namespaces, and what a user namespace would open. */
    door_call("unshare(CLONE_NEWUSER)", in_child_call(SYS_unshare, NEWUSER, 0, 0, 0, 0));
    door_call("unshare(CLONE_NEWNET)", in_child_call(SYS_unshare, NEWNET, 0, 0, 0, 0));
    door_call("unshare(CLONE_NEWNS)", in_child_call(SYS_unshare, NEWNS, 0, 0, 0, 0));
    door_child("clone(CLONE_NEWUSER)", clone_userns);
    doors_userns();
    door_call("chroot", in_child_call(SYS_chroot, (long)"/tmp", 0, 0, 0, 0));
    /* In the scratch directory (the probe's cwd, worker's), a directory to mount on. */
    char dir[] = "probe-mnt-XXXXXX";
    if (mkdtemp(dir)) {
        door_call("mount(tmpfs)",
                  in_child_call(SYS_mount, (long)"none", (long)dir, (long)"tmpfs", 0, 0));
        rmdir(dir);
    } else {
        door("mount(tmpfs)", 0, "no directory to try it on");
    }

    /* Sockets. */
    door_call("socket(AF_PACKET, SOCK_RAW)", syscall(SYS_socket, AF_PACKET_, SOCK_RAW, 0x0300));
    door_call("socket(AF_INET, SOCK_RAW, ICMP)", syscall(SYS_socket, AF_INET, SOCK_RAW, 1));
    door_call("socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)",
              syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 15));
    door_call("socket(AF_VSOCK)", syscall(SYS_socket, AF_VSOCK_, SOCK_STREAM, 0));
    door_call("socket(AF_ALG)", syscall(SYS_socket, AF_ALG_, SOCK_SEQPACKET, 0));

    /* Kernel interfaces. */
    door_call("add_key", syscall(SYS_add_key, "user", "probe", "x", 1L, -2L /* process ring */));
    door_call("keyctl(KEYCTL_GET_KEYRING_ID, session, create)",
              syscall(SYS_keyctl, 0L, -3L, 1L, 0L, 0L));
    uint32_t map[12] = {2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1};
    door_call("bpf(BPF_MAP_CREATE)", syscall(SYS_bpf, 0L, map, (long)sizeof(map)));
    uint32_t attr[32] = {1 /* PERF_TYPE_SOFTWARE */, 128 /* size */, 1 /* TASK_CLOCK */};
    attr[10] = (1u << 5) | (1u << 6); /* exclude_kernel, exclude_hv */
    long pfd = syscall(SYS_perf_event_open, attr, 0L, -1L, -1L, 0L);
    door_call("perf_event_open(task clock, self)", pfd);
    if (pfd >= 0)
        close((int)pfd);
    long uffd = syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */);
    door_call("userfaultfd", uffd);
    if (uffd >= 0)
        close((int)uffd);
    uint32_t params[30] = {0};
    long ring = syscall(SYS_io_uring_setup, 1L, params);
    door_call("io_uring_setup", ring);
    if (ring >= 0)
        close((int)ring);
    door_child("ioctl(TIOCSTI) on its own terminal", tiocsti);
    door_child("i386 system call (int 0x80)", i386_call);
    door_child("unshare(CLONE_NEWUSER) through int 0x80", i386_unshare);
    door_child("x32 system call", x32_call);

    /* The init. Each of these may end the sandbox when the door is open: the line before it
     * says which one did. */
    printf("trying the init's doors\n");
    door_child("ptrace(PTRACE_SEIZE, init)", ptrace_init);
    char buf[8];
    struct iovec local = {buf, sizeof(buf)}, remote = {(void *)0x10000, sizeof(buf)};
    door_refused("process_vm_readv(init)",
                 syscall(SYS_process_vm_readv, INIT_PID, &local, 1L, &remote, 1L, 0L));
    door_call("open /proc/1/mem", open("/proc/1/mem", O_RDONLY | O_CLOEXEC));
    door_call("open /proc/1/oom_score_adj for writing",
              open("/proc/1/oom_score_adj", O_WRONLY | O_CLOEXEC));
    long pidfd = syscall(SYS_pidfd_open, INIT_PID, 0L);
    if (pidfd >= 0) {
        door_call("pidfd_getfd(init, its channel)", syscall(SYS_pidfd_getfd, pidfd, 3L, 0L));
        close((int)pidfd);
    } else {
        door("pidfd_getfd(init, its channel)", 1, "pidfd_open refused");
    }
    struct rlimit rl;
    door_call("prlimit64(init) read", syscall(SYS_prlimit64, INIT_PID, RLIMIT_CORE, 0L, &rl));
    struct rlimit zero = {0, 0}; /* the init's own RLIMIT_CORE in every backend: harmless */
    door_call("prlimit64(init) set", syscall(SYS_prlimit64, INIT_PID, RLIMIT_CORE, &zero, 0L));
    door_signal("kill(init, SIGSTOP)", SIGSTOP);
    door_signal("kill(init, SIGKILL)", SIGKILL); /* last: if it takes, nothing reports after it */

    printf("open=%d\n", doors_open);
    return 0;
}
