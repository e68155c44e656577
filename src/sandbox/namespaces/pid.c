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
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

/* Large enough for the child's steps even under AddressSanitizer, which grows frames. */
#define CHILD_STACK (512 * 1024)

int eph_ns_pid_clone(int (*fn)(void *), void *arg, pid_t *pid, int *pidfd)
{
    void *stack = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -errno;
    int fd = -1;
    int flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                CLONE_PIDFD | SIGCHLD;
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
