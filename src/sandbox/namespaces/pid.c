/*
 * pid.c - the clone() into new namespaces, and the end of the sandbox's init.
 *
 * The child gets new PID, mount, network, IPC and UTS namespaces at clone(); the user and cgroup
 * namespaces come later (user.c says why). It becomes PID 1 of its namespace, so when it dies the
 * kernel kills every other process in the sandbox: killing the init is killing the machine.
 *
 * clone() gets its own stack and fork semantics (no CLONE_VM): the child has a private copy of the
 * server's memory, so nothing it does can disturb the server's other threads. A pidfd names the
 * child without the races of a pid number, which lets another thread kill it safely.
 *
 * sibling: CLONE_PARENT, for the launcher (launcher.c): the child is the launcher's sibling, a
 * child of the server, which waits for it, kills it and reaps it as if it had cloned it itself.
 * With CLONE_PARENT the kernel gives the child the caller's own exit signal (SIGCHLD: the launcher
 * was forked).
 */
#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

/* Large enough for the child's steps even under AddressSanitizer, which grows frames. */
#define CHILD_STACK (512 * 1024)

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* clone3() with CLONE_INTO_CGROUP: the child is born in the cgroup, so the kernel never takes
 * cgroup_threadgroup_rwsem for writing (the 10-19 ms cost of a cgroup.procs write on a quiet host,
 * bench/PROFILE.md 1.1) and the child never runs outside its limits. No stack is given: without
 * CLONE_VM the child continues on its own copy of this thread's stack, like fork(); it calls fn
 * and never returns here. 1 = not available (fall back), 0 = cloned, < 0 = failed. */
static int clone_into_cgroup(int (*fn)(void *), void *arg, int cgroup_fd, bool sibling, pid_t *pid,
                             int *pidfd)
{
    int fd = -1;
    struct clone_args args;
    memset(&args, 0, sizeof(args));
    args.flags =
        CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD | CLONE_INTO_CGROUP;
    if (sibling)
        args.flags |= CLONE_PARENT;
    args.pidfd = (uint64_t)(uintptr_t)&fd;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)cgroup_fd;
    long p = syscall(SYS_clone3, &args, sizeof(args));
    if (p == 0)
        _exit(fn(arg));
    if (p < 0) {
        int err = errno;
        /* Before 5.7 (E2BIG: struct too large; ENOSYS), or a filter in front of us. */
        if (err == ENOSYS || err == E2BIG || err == EINVAL || err == EPERM)
            return 1;
        return -err;
    }
    *pid = (pid_t)p;
    *pidfd = fd;
    return 0;
}

int eph_ns_pid_clone_into_cgroup(int (*fn)(void *), void *arg, int cgroup_fd, bool sibling,
                                 pid_t *pid, int *pidfd)
{
    static atomic_bool unavailable;
    if (cgroup_fd < 0 || atomic_load(&unavailable))
        return 1;
    int rc = clone_into_cgroup(fn, arg, cgroup_fd, sibling, pid, pidfd);
    if (rc == 1)
        atomic_store(&unavailable, true);
    return rc;
}

int eph_ns_pid_clone(int (*fn)(void *), void *arg, bool sibling, pid_t *pid, int *pidfd)
{
    void *stack = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -errno;
    int fd = -1;
    int flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD | SIGCHLD;
    if (sibling)
        flags |= CLONE_PARENT;
    pid_t p = clone(fn, (char *)stack + CHILD_STACK, flags, arg, &fd);
    int err = errno;
    /* The child runs on its own copy of the stack; this one is ours to free. */
    munmap(stack, CHILD_STACK);
    if (p < 0)
        return -err;
    *pid = p;
    *pidfd = fd;
    return 0;
}

int eph_ns_pid_kill(int pidfd)
{
    if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) != 0 && errno != ESRCH)
        return -errno;
    return 0;
}

int eph_ns_pid_reap(pid_t pid, int *status)
{
    for (;;) {
        pid_t r = waitpid(pid, status, __WALL);
        if (r == pid)
            return 0;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -errno : -ECHILD;
    }
}
