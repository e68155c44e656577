/*
 * sandbox_probe.c - run inside a sandbox by sandbox_seccomp.sh: calls each system call the filter
 * must refuse, with arguments for which the kernel itself would answer something other than
 * EPERM (EFAULT, EBADF, EINVAL, ENOTTY, or success), so that EPERM proves the filter refused it
 * before the kernel saw it; then checks that the allowed neighbours still work, and prints how
 * system calls of foreign architectures (i386 int 0x80, x32) ended ("foreign NAME signal|exit N"),
 * which the test compares with the same probe run on the bare host (`probe foreign`). Prints one
 * line per check and "bad=N". Built static by the test: it needs nothing from the image.
 */
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

int main(int argc, char **argv)
{
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
