/*
 * cgroup.c - memory, process and CPU limits for the sandbox as a whole.
 *
 * cgroup v2 when the unified hierarchy has the memory, pids and cpu controllers available, else v1
 * with one directory in each of the memory, pids and cpu hierarchies. Each sandbox gets
 * ephemeral/<tag>-<server pid>-<n> (the server's pid in the name is what lets a later server tell
 * an orphan from a live sandbox). Limits: memory with swap disabled (memory.swap.max = 0, or v1
 * memsw equal to the memory limit, or swappiness 0 where memsw is not compiled in), pids.max, and
 * a CFS quota of vcpus whole CPUs. The child is in it before it creates anything that could
 * outlive it: on v2 born there (clone3 with CLONE_INTO_CGROUP, pid.c), else it joins as its first
 * step after the descriptors, by writing "0" into descriptors the parent opened (see
 * eph_ns_cgroup_join: on v1 that avoids the kernel's slow global lock entirely).
 *
 * Destroy kills whatever is still in it (cgroup.kill on v2; the listed pids on v1: these are
 * sandbox processes, which cannot leave the cgroup), then removes the directories, retrying while
 * the kernel is still tearing the last tasks down.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/text.h"
#include "sandbox/backend.h"
#include "sandbox/namespaces/namespaces.h"

#define PARENT "ephemeral"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int detected_version;
static char v2_root[PATH_MAX];
static char v1_roots[3][PATH_MAX]; /* memory, pids, cpu */
static char detect_why[200];
static const char *const v1_names[3] = {"memory", "pids", "cpu"};

static int write_str(const char *dir, const char *file, const char *value)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = strlen(value);
    ssize_t w;
    do
        w = write(fd, value, n);
    while (w < 0 && errno == EINTR);
    int rc = w == (ssize_t)n ? 0 : (w < 0 ? -errno : -EIO);
    close(fd);
    return rc;
}

static int read_str(const char *path, char *out, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n;
    do
        n = read(fd, out, cap - 1);
    while (n < 0 && errno == EINTR);
    int rc = n < 0 ? -errno : 0;
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return rc;
}

static bool has_word(const char *list, const char *word, char sep)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n) {
        bool start = p == list || p[-1] == sep || p[-1] == ' ';
        bool end = p[n] == '\0' || p[n] == sep || p[n] == ' ' || p[n] == '\n';
        if (start && end)
            return true;
    }
    return false;
}

/* Finds the hierarchies in our mount table: a cgroup2 mount, and v1 mounts by controller. */
static void detect(void)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) {
        snprintf(detect_why, sizeof(detect_why), "cannot read /proc/self/mountinfo");
        return;
    }
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint options ... - fstype source superoptions */
        char mnt[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
            continue;
        const char *dash = strstr(line, " - ");
        if (!dash)
            continue;
        char fstype[32], source[64], super[512];
        if (sscanf(dash + 3, "%31s %63s %511s", fstype, source, super) != 3)
            continue;
        if (strcmp(fstype, "cgroup2") == 0 && !v2_root[0]) {
            snprintf(v2_root, sizeof(v2_root), "%s", mnt);
        } else if (strcmp(fstype, "cgroup") == 0) {
            for (int i = 0; i < 3; i++)
                if (!v1_roots[i][0] && has_word(super, v1_names[i], ','))
                    snprintf(v1_roots[i], sizeof(v1_roots[i]), "%s", mnt);
        }
    }
    fclose(f);
    if (v2_root[0]) {
        char path[PATH_MAX + 32], ctl[256];
        snprintf(path, sizeof(path), "%s/cgroup.controllers", v2_root);
        if (read_str(path, ctl, sizeof(ctl)) == 0 && has_word(ctl, "memory", ' ') &&
            has_word(ctl, "pids", ' ') && has_word(ctl, "cpu", ' ')) {
            detected_version = 2;
            return;
        }
    }
    if (v1_roots[0][0] && v1_roots[1][0] && v1_roots[2][0]) {
        detected_version = 1;
        return;
    }
    eph_text_format_cut(
        detect_why, sizeof(detect_why),
        "no cgroup hierarchy with the memory, pids and cpu controllers (cgroup2 at '%s' "
        "delegates none of them, v1 lacks some)",
        v2_root[0] ? v2_root : "none");
}

int eph_ns_cgroup_probe(char *why, size_t whylen)
{
    pthread_once(&once, detect);
    if (detected_version)
        return 0;
    if (why)
        eph_text_format_cut(why, whylen, "%s", detect_why);
    return -ENOTSUP;
}

static int mkdir_ok(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* v2: the parent directory with the controllers enabled for its children. */
static int v2_parent(char *out, size_t cap)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (eph_text_format(out, cap, "%s/" PARENT, v2_root))
        return -ENAMETOOLONG;
    pthread_mutex_lock(&lock);
    int rc = write_str(v2_root, "cgroup.subtree_control", "+memory +pids +cpu");
    if (rc)
        EPH_DEBUG("sandbox", "enabling controllers at the cgroup2 root: %s", strerror(-rc));
    rc = mkdir_ok(out);
    if (!rc)
        rc = write_str(out, "cgroup.subtree_control", "+memory +pids +cpu");
    pthread_mutex_unlock(&lock);
    return rc;
}

int eph_ns_cgroup_create(struct eph_ns_cgroup *cg, const char *name,
                         const struct eph_sandbox_limits *l)
{
    char parent[PATH_MAX], val[64];
    int rc = eph_ns_cgroup_probe(NULL, 0);
    memset(cg, 0, sizeof(*cg));
    if (rc)
        return rc;
    uint64_t mem = (uint64_t)l->memory_mib << 20;
    if (detected_version == 2) {
        rc = v2_parent(parent, sizeof(parent));
        if (rc)
            return rc;
        if (eph_text_format(cg->dirs[0], sizeof(cg->dirs[0]), "%s/%s", parent, name))
            return -ENAMETOOLONG;
        if (mkdir(cg->dirs[0], 0755) != 0)
            return -errno;
        cg->version = 2;
        cg->n = 1;
        snprintf(val, sizeof(val), "%llu", (unsigned long long)mem);
        rc = write_str(cg->dirs[0], "memory.max", val);
        if (!rc) {
            int s = write_str(cg->dirs[0], "memory.swap.max", "0");
            if (s && s != -ENOENT)
                rc = s; /* no swap accounting compiled in means no swap to limit */
        }
        snprintf(val, sizeof(val), "%u", l->pids);
        if (!rc)
            rc = write_str(cg->dirs[0], "pids.max", val);
        snprintf(val, sizeof(val), "%u 100000", l->vcpus * 100000u);
        if (!rc)
            rc = write_str(cg->dirs[0], "cpu.max", val);
    } else {
        cg->version = 1;
        for (int i = 0; i < 3; i++) {
            rc = eph_text_format(parent, sizeof(parent), "%s/" PARENT, v1_roots[i]);
            if (!rc)
                rc = mkdir_ok(parent);
            if (!rc && eph_text_format(cg->dirs[i], sizeof(cg->dirs[i]), "%s/%s", parent, name))
                rc = -ENAMETOOLONG;
            if (rc) {
                cg->dirs[i][0] = '\0';
                break;
            }
            if (mkdir(cg->dirs[i], 0755) != 0) {
                rc = -errno;
                cg->dirs[i][0] = '\0';
                break;
            }
            cg->n = i + 1;
        }
        snprintf(val, sizeof(val), "%llu", (unsigned long long)mem);
        if (!rc)
            rc = write_str(cg->dirs[0], "memory.limit_in_bytes", val);
        if (!rc) {
            /* memsw is memory + swap: equal to the memory limit means no swap at all. */
            int s = write_str(cg->dirs[0], "memory.memsw.limit_in_bytes", val);
            if (s == -ENOENT)
                s = write_str(cg->dirs[0], "memory.swappiness", "0");
            rc = s;
        }
        /* v1 charges socket buffers to a cgroup only once its TCP limit is set (v2 always does):
         * without it a sandbox could queue far more than its memory in loopback connections it
         * never reads, out of the host-wide TCP memory that the server's own connections use. */
        if (!rc) {
            int s = write_str(cg->dirs[0], "memory.kmem.tcp.limit_in_bytes", val);
            rc = s == -ENOENT ? 0 : s; /* a kernel without kmem accounting: SECURITY.md */
        }
        snprintf(val, sizeof(val), "%u", l->pids);
        if (!rc)
            rc = write_str(cg->dirs[1], "pids.max", val);
        if (!rc)
            rc = write_str(cg->dirs[2], "cpu.cfs_period_us", "100000");
        snprintf(val, sizeof(val), "%u", l->vcpus * 100000u);
        if (!rc)
            rc = write_str(cg->dirs[2], "cpu.cfs_quota_us", val);
    }
    if (rc) {
        EPH_WARN("sandbox", "cannot set up cgroup '%s': %s", name, strerror(-rc));
        eph_ns_cgroup_destroy(cg);
    }
    return rc;
}

int eph_ns_cgroup_open_join(const struct eph_ns_cgroup *cg, int fds[3], int *n)
{
    *n = 0;
    for (int i = 0; i < cg->n; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/%s", cg->dirs[i],
                 cg->version == 1 ? "tasks" : "cgroup.procs");
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            int rc = -errno;
            while (*n > 0)
                close(fds[--*n]);
            return rc;
        }
        fds[(*n)++] = fd;
    }
    return 0;
}

int eph_ns_cgroup_dir_fd(const struct eph_ns_cgroup *cg)
{
    if (cg->version != 2 || cg->n != 1)
        return -1;
    return open(cg->dirs[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* In the child, before it runs anything else. "0" names the writer itself: on v1 a write of "0"
 * to `tasks` moves only the calling thread, which the kernel does without write-locking the
 * global cgroup_threadgroup_rwsem (cgroup_procs_write_start: a thread moving itself cannot exit or
 * exec under the migration). That lock is what costs 10-19 ms on a quiet host (its percpu rwsem
 * waits for an RCU grace period); this write takes ~0.05 ms. The child is single-threaded, so the
 * thread is the whole process, and everything it forks later is born inside. */
int eph_ns_cgroup_join(const int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        ssize_t w;
        do
            w = write(fds[i], "0", 1);
        while (w < 0 && errno == EINTR);
        if (w != 1)
            return w < 0 ? -errno : -EIO;
        close(fds[i]);
    }
    return 0;
}

/* Kills every task listed in dir/cgroup.procs; returns how many were listed. */
static int kill_listed(const char *dir)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int n = 0, pid;
    while (fscanf(f, "%d", &pid) == 1) {
        if (pid > 1)
            kill(pid, SIGKILL);
        n++;
    }
    fclose(f);
    return n;
}

#define SIGNAL_PASSES 64
#define SIGNAL_MAX_PIDS 8192

int eph_ns_cgroup_signal_all(const struct eph_ns_cgroup *cg, int sig)
{
    if (!cg->n || !cg->dirs[0][0])
        return -ESRCH;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/cgroup.procs", cg->dirs[0]);
    int *seen = malloc(SIGNAL_MAX_PIDS * sizeof(*seen));
    if (!seen)
        return -ENOMEM;
    size_t nseen = 0;
    int rc = -EAGAIN;
    for (int pass = 0; pass < SIGNAL_PASSES && rc == -EAGAIN; pass++) {
        FILE *f = fopen(path, "re");
        if (!f) {
            rc = -errno;
            break;
        }
        unsigned fresh = 0;
        int pid;
        while (fscanf(f, "%d", &pid) == 1) {
            if (pid <= 1)
                continue;
            size_t i = 0;
            while (i < nseen && seen[i] != pid)
                i++;
            if (i < nseen)
                continue;
            fresh++;
            (void)kill(pid, sig);
            if (nseen < SIGNAL_MAX_PIDS)
                seen[nseen++] = pid;
        }
        fclose(f);
        if (!fresh)
            rc = 0;
    }
    free(seen);
    return rc;
}

static int remove_dir(const char *dir, int version)
{
    struct timespec pause = {0, 2 * 1000 * 1000};
    if (version == 2)
        (void)write_str(dir, "cgroup.kill", "1");
    /* Bounded: about two seconds for the kernel to finish killing what was in it. */
    for (int tries = 0; tries < 1000; tries++) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            return -errno;
        kill_listed(dir);
        nanosleep(&pause, NULL);
    }
    return -EBUSY;
}

int eph_ns_cgroup_destroy(struct eph_ns_cgroup *cg)
{
    int first = 0;
    for (int i = 0; i < cg->n; i++) {
        if (!cg->dirs[i][0])
            continue;
        int rc = remove_dir(cg->dirs[i], cg->version);
        if (rc) {
            EPH_WARN("sandbox", "cannot remove cgroup '%s': %s", cg->dirs[i], strerror(-rc));
            if (!first)
                first = rc;
        }
    }
    cg->n = 0;
    cg->version = 0;
    return first;
}

static int sweep(const char *parent, int version)
{
    DIR *d = opendir(parent);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR || !eph_guest_name_orphaned(e->d_name, ""))
            continue;
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/%.200s", parent, e->d_name);
        kill_listed(dir);
        if (remove_dir(dir, version) == 0) {
            EPH_INFO("sandbox", "removed orphaned cgroup '%s'", dir);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

int eph_ns_cgroup_cleanup_orphans(void)
{
    char parent[PATH_MAX];
    if (eph_ns_cgroup_probe(NULL, 0))
        return 0;
    int removed = 0;
    if (detected_version == 2) {
        if (!eph_text_format(parent, sizeof(parent), "%s/" PARENT, v2_root))
            removed += sweep(parent, 2);
    }
    /* v1 directories may exist even when v2 is in use now (an older server): sweep both. */
    for (int i = 0; i < 3; i++) {
        if (!v1_roots[i][0])
            continue;
        if (!eph_text_format(parent, sizeof(parent), "%s/" PARENT, v1_roots[i]))
            removed += sweep(parent, 1);
    }
    return removed;
}
