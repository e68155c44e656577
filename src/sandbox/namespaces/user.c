/*
 * user.c - the user namespace: who the sandbox's processes are.
 *
 * Inside, the commands run as worker (uid and gid 1000). On the host, worker is a dedicated id in
 * a range no host user owns (EPH_NS_HOST_ID_BASE + n), leased for the sandbox's life so that no
 * two live sandboxes on the host share it, whichever server made them (sandbox/hostid.h). A
 * process that got out would own nothing and could signal nothing of the host's or of another
 * sandbox's. Only that one id is mapped: there is no root inside at all, and host root is never
 * mapped.
 *
 * The mounts and the hostname are set up by the child while it is still host root, in mount and
 * UTS namespaces the host's user namespace owns (so that no sandbox process ever holds a
 * capability over them). Then the child becomes its host id and creates the user namespace, which
 * that id therefore owns: every per-user counter the kernel keeps (inotify instances, pending
 * signals, message queues, user namespaces) is charged up the chain of owners to that id, never to
 * host root, and the rlimits in force at that moment are the namespace's own ceilings. The network
 * namespace is created with it. Supplementary groups are cleared before, in the host namespace,
 * because the kernel keeps unmapped groups for permission checks and setgroups is denied
 * afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

int eph_ns_user_clear_groups(void)
{
    /* Raw system call: glibc's setgroups would try to broadcast to the server's other threads,
     * which do not exist in this child. */
    if (syscall(SYS_setgroups, 0, NULL) != 0)
        return -errno;
    return 0;
}

int eph_ns_user_become_host_id(uid_t host_id)
{
    /* Keep the capabilities across the change of uid: the unshare that follows must not depend on
     * the host allowing unprivileged user namespaces (some distributions restrict them), and the
     * new namespaces are created with full capabilities in the new user namespace anyway. */
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0)
        return -errno;
    if (syscall(SYS_setresgid, host_id, host_id, host_id) != 0)
        return -errno;
    if (syscall(SYS_setresuid, host_id, host_id, host_id) != 0)
        return -errno;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) != 0)
        return -errno;
    data[0].effective = data[0].permitted;
    data[1].effective = data[1].permitted;
    if (syscall(SYS_capset, &hdr, data) != 0)
        return -errno;
    return 0;
}

int eph_ns_user_unshare(void)
{
    /* Created by the sandbox's own host id, so that it owns the user namespace: the kernel
     * charges per-user counters up the chain of owners, and host root's stay untouched. The
     * cgroup namespace is created here rather than at clone() because its root is the cgroup the
     * process is in when it is created (the sandbox's). The network namespace, so that the
     * sandbox's user namespace owns it (the kernel sends host uevents only to network namespaces
     * the host's user namespace owns). */
    if (unshare(CLONE_NEWUSER | CLONE_NEWCGROUP | CLONE_NEWNET) != 0)
        return -errno;
    return 0;
}

static int write_file(const char *path, const char *data)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = strlen(data);
    ssize_t w;
    do
        w = write(fd, data, n);
    while (w < 0 && errno == EINTR);
    int rc = w == (ssize_t)n ? 0 : (w < 0 ? -errno : -EIO);
    close(fd);
    return rc;
}

int eph_ns_user_write_maps(pid_t pid, uid_t host_id)
{
    char path[64], map[64];
    snprintf(map, sizeof(map), "%d %u 1\n", EPH_NS_WORKER_UID, (unsigned)host_id);
    snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
    int rc = write_file(path, "deny");
    if (rc)
        return rc;
    snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
    rc = write_file(path, map);
    if (rc)
        return rc;
    snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
    return write_file(path, map);
}

int eph_ns_user_become_worker(void)
{
    /* gid first: once the uid is dropped, the gid could no longer be changed. */
    if (syscall(SYS_setresgid, EPH_NS_WORKER_UID, EPH_NS_WORKER_UID, EPH_NS_WORKER_UID) != 0)
        return -errno;
    if (syscall(SYS_setresuid, EPH_NS_WORKER_UID, EPH_NS_WORKER_UID, EPH_NS_WORKER_UID) != 0)
        return -errno;
    return 0;
}
