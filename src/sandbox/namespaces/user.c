/*
 * user.c - the user namespace: who the sandbox's processes are.
 *
 * Inside, the commands run as worker (uid and gid 1000). On the host, worker is a dedicated id in
 * a range no host user owns (EPH_NS_HOST_ID_BASE + a per-process offset + a per-sandbox slot), so
 * a process that got out would own nothing and could signal nothing of the host's or of another
 * sandbox's. Only that one id is mapped: there is no root inside at all, and host root is never
 * mapped.
 *
 * The user namespace is created late (after the mounts and the network are set up by the child
 * while it is still host root in namespaces the host user namespace owns), so that no sandbox
 * process ever holds a capability over its own mount or network namespace: they belong to the
 * host's user namespace. Supplementary groups are cleared before, in the host namespace, because
 * the kernel keeps unmapped groups for permission checks and setgroups is denied afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t slot_used[EPH_NS_SLOTS / 64];

int eph_ns_user_slot_acquire(unsigned *slot)
{
    int rc = -EAGAIN;
    pthread_mutex_lock(&slot_lock);
    for (unsigned i = 0; i < EPH_NS_SLOTS; i++) {
        if (!(slot_used[i / 64] & (1ull << (i % 64)))) {
            slot_used[i / 64] |= 1ull << (i % 64);
            *slot = i;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&slot_lock);
    return rc;
}

void eph_ns_user_slot_release(unsigned slot)
{
    if (slot >= EPH_NS_SLOTS)
        return;
    pthread_mutex_lock(&slot_lock);
    slot_used[slot / 64] &= ~(1ull << (slot % 64));
    pthread_mutex_unlock(&slot_lock);
}

uid_t eph_ns_user_host_id(unsigned slot)
{
    /* The offset keeps two servers on one host from handing out the same ids, most of the time;
     * a collision would only make two sandboxes share an unprivileged id, in separate namespaces.
     */
    uint32_t offset = ((uint32_t)getpid() & 0x3ffu) * EPH_NS_SLOTS;
    return (uid_t)(EPH_NS_HOST_ID_BASE + offset + slot);
}

int eph_ns_user_clear_groups(void)
{
    /* Raw system call: glibc's setgroups would try to broadcast to the server's other threads,
     * which do not exist in this child. */
    if (syscall(SYS_setgroups, 0, NULL) != 0)
        return -errno;
    return 0;
}

int eph_ns_user_unshare(void)
{
    /* The cgroup namespace is created here rather than at clone() because its root is the cgroup
     * the process is in when it is created: the parent has just moved us into the sandbox's. */
    if (unshare(CLONE_NEWUSER | CLONE_NEWCGROUP) != 0)
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
