/*
 * hostid.c - host ids leased by lock files (hostid.h says why).
 *
 * The search skips the ids this process holds already (a bitmap, no system call) and tries the
 * others in increasing order with a non-blocking flock(): the first it gets is its. Lock files are
 * never removed (removing a lock file races with a process that has just opened it), so there are
 * as many as the host ever had sandboxes alive at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/hostid.h"

#define MAX_IDS 65536u

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* The ids this process holds, by offset from 0x7c000000 (every range leased lies above it). */
#define ID_FLOOR 0x7c000000u
#define ID_SPAN (4u * 0x1000000u)
static uint64_t *held;

static int lock_dir(char *out, size_t len)
{
    const char *env = getenv("EPHEMERAL_RUN_DIR");
    const char *root = env && *env ? env : "/run/ephemeral";
    if (mkdir(root, 0700) != 0 && errno != EEXIST)
        return -errno;
    int n = snprintf(out, len, "%s/ids", root);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    if (mkdir(out, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static bool held_test(uint32_t id)
{
    uint32_t i = id - ID_FLOOR;
    return held && (held[i / 64] >> (i % 64)) & 1u;
}

static void held_set(uint32_t id, bool on)
{
    uint32_t i = id - ID_FLOOR;
    if (on)
        held[i / 64] |= 1ull << (i % 64);
    else
        held[i / 64] &= ~(1ull << (i % 64));
}

int eph_hostid_acquire(uint32_t base, uint32_t count, struct eph_hostid_lease *lease)
{
    lease->fd = -1;
    if (count > MAX_IDS || base < ID_FLOOR || base - ID_FLOOR > ID_SPAN - count)
        return -EINVAL;
    char dir[PATH_MAX - 16];
    int rc = lock_dir(dir, sizeof(dir));
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (!held && !(held = calloc(ID_SPAN / 64, sizeof(uint64_t)))) {
        pthread_mutex_unlock(&lock);
        return -ENOMEM;
    }
    rc = -EAGAIN;
    for (uint32_t id = base; id < base + count; id++) {
        if (held_test(id))
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%08x", dir, (unsigned)id);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            rc = -errno;
            break;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            held_set(id, true);
            lease->id = id;
            lease->fd = fd;
            rc = 0;
            break;
        }
        int e = errno;
        close(fd);
        if (e != EWOULDBLOCK) {
            rc = -e;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void eph_hostid_release(struct eph_hostid_lease *lease)
{
    if (lease->fd < 0)
        return;
    pthread_mutex_lock(&lock);
    held_set(lease->id, false);
    close(lease->fd);
    lease->fd = -1;
    pthread_mutex_unlock(&lock);
}
