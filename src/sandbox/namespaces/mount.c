/*
 * mount.c - the sandbox's file system, ending in pivot_root.
 *
 * Run by the child while it is still host root in a mount namespace the host's user namespace
 * owns (so nothing inside can ever undo these mounts: no sandbox process has a capability over
 * this namespace). In order:
 *
 *   1. every mount private, so nothing done here propagates to the host;
 *   2. the image bind-mounted onto itself (this namespace only) as the new root;
 *   3. /tmp: a size-limited tmpfs (nosuid, nodev) holding ephemeral-run-XXXXXX/{scratch,home},
 *      owned by worker;
 *   4. a fresh /proc for the new PID namespace, with sys, sysrq-trigger, irq and bus read-only, a
 *      few kernel-information files masked, and meminfo replaced by a read-only file that shows the
 *      sandbox's memory limit instead of the host's memory;
 *   5. a minimal /dev on a small tmpfs: null zero full random urandom tty bind-mounted from the
 *      host, a private devpts (ptmx) of at most EPH_NS_PTYS_MAX terminals (the kernel's
 *      kernel.pty.max is one pool for the whole host), a tmpfs /dev/shm, and the fd symlinks; then
 *      read-only;
 *   6. the root remounted read-only, nosuid, nodev;
 *   7. pivot_root into it, the old root detached.
 *
 * Paths are relative to the new root (the child chdir()s into it after step 2) and prepared by the
 * parent; nothing here allocates.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

static int do_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                    const char *data)
{
    if (mount(src, dst, type, flags, data) != 0)
        return -errno;
    return 0;
}

/* Bind src (a host path, or one inside the new root) over dst, then remount the bind with flags:
 * a bind mount takes its flags only from the remount. */
static int bind_with(const char *src, const char *dst, unsigned long flags)
{
    int rc = do_mount(src, dst, NULL, MS_BIND | MS_REC, NULL);
    if (rc)
        return rc;
    return do_mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | flags, NULL);
}

static int setup_tmp(const struct eph_ns_plan *p)
{
    int rc = do_mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, p->tmp_opts);
    if (rc)
        return rc;
    if (mkdir(p->run_rel, 0755) != 0 || mkdir(p->scratch_rel, 0755) != 0 ||
        mkdir(p->home_rel, 0700) != 0)
        return -errno;
    /* Root's (nobody's, inside) and read-only: the text bound over /proc/meminfo below. */
    int fd = open(p->meminfo_rel, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0)
        return -errno;
    ssize_t w = write(fd, p->meminfo, p->meminfo_len);
    int err = errno;
    close(fd);
    if (w != (ssize_t)p->meminfo_len)
        return w < 0 ? -err : -EIO;
    /* The host id that worker maps to: inside, these are worker's. */
    if (chown(p->scratch_rel, p->host_id, p->host_id) != 0 ||
        chown(p->home_rel, p->host_id, p->host_id) != 0)
        return -errno;
    return 0;
}

static const char *const proc_readonly[] = {"proc/sys", "proc/sysrq-trigger", "proc/irq",
                                            "proc/bus"};
/* Kernel information an unprivileged user has no use for (Docker masks the first five), and what
 * names the host: its boot command line, its disks, its boot id. */
static const char *const proc_masked[] = {
    "proc/kcore",         "proc/keys",    "proc/timer_list", "proc/sched_debug",
    "proc/latency_stats", "proc/cmdline", "proc/partitions", "proc/sys/kernel/random/boot_id"};
#define N_READONLY (sizeof(proc_readonly) / sizeof(proc_readonly[0]))
#define N_MASKED (sizeof(proc_masked) / sizeof(proc_masked[0]))

/* Bit i set: the i-th of proc_readonly then proc_masked is known to be absent from a fresh procfs
 * of this kernel, so the child need not try it (a failing mount call per entry, every sandbox).
 * Written once, before any child exists (eph_ns_mount_prepare); 0 (try them all) unless proved. */
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static unsigned proc_absent;

/* Looks into a new, detached procfs instance (fsopen/fsmount: default options, unlike the host's
 * /proc, which may be mounted with subset=pid or have entries masked over), never attached to any
 * mount tree. These entries are global to the kernel, not per PID namespace, so what is absent
 * here is absent from every sandbox's /proc. On any failure nothing is marked absent. */
static void probe_proc(void)
{
    int fs = (int)syscall(SYS_fsopen, "proc", FSOPEN_CLOEXEC);
    if (fs < 0)
        return;
    int mnt = -1;
    if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
        mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOEXEC);
    close(fs);
    if (mnt < 0)
        return;
    unsigned absent = 0;
    /* Sanity: a procfs has these; if not, this is not what we think it is. */
    if (faccessat(mnt, "self", F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
        faccessat(mnt, "sys", F_OK, 0) == 0) {
        for (size_t i = 0; i < N_READONLY + N_MASKED; i++) {
            const char *rel = (i < N_READONLY ? proc_readonly[i] : proc_masked[i - N_READONLY]) +
                              sizeof("proc/") - 1;
            if (faccessat(mnt, rel, F_OK, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
                absent |= 1u << i;
        }
    }
    close(mnt);
    proc_absent = absent;
}

void eph_ns_mount_prepare(void)
{
    pthread_once(&probe_once, probe_proc);
}

size_t eph_ns_mount_meminfo(char *out, size_t cap, unsigned memory_mib)
{
    /* The fields free, top and most runtimes read; everything is the limit or zero (no swap: the
     * cgroup allows none). A snapshot, not live: "free" inside is the limit, not what is left. */
    unsigned long long kib = (unsigned long long)memory_mib * 1024u;
    int n = snprintf(out, cap,
                     "MemTotal:       %8llu kB\nMemFree:        %8llu kB\n"
                     "MemAvailable:   %8llu kB\nBuffers:               0 kB\n"
                     "Cached:                0 kB\nSwapCached:            0 kB\n"
                     "Shmem:                 0 kB\nSReclaimable:          0 kB\n"
                     "SwapTotal:             0 kB\nSwapFree:              0 kB\n",
                     kib, kib, kib);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static int setup_proc(const struct eph_ns_plan *p)
{
    const char *const *readonly = proc_readonly, *const *masked = proc_masked;
    int rc = do_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    if (rc)
        return rc;
    rc = bind_with(p->meminfo_rel, "proc/meminfo", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
    if (rc)
        return rc;
    for (size_t i = 0; i < N_READONLY; i++) {
        if (proc_absent & (1u << i))
            continue;
        rc = bind_with(readonly[i], readonly[i], MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
        if (rc == -ENOENT)
            continue; /* not every kernel has every one of these */
        if (rc)
            return rc;
    }
    /* The first masked entry gets /dev/null read-only; the others are binds of that bind, which
     * carry its flags with them (a bind copies the source mount's flags): one call each, not two.
     */
    const char *first = NULL;
    for (size_t i = 0; i < N_MASKED; i++) {
        if (proc_absent & (1u << (N_READONLY + i)))
            continue;
        if (first)
            rc = do_mount(first, masked[i], NULL, MS_BIND, NULL);
        else
            rc = bind_with("/dev/null", masked[i], MS_RDONLY | MS_NOSUID | MS_NOEXEC);
        if (rc == -ENOENT)
            continue;
        if (rc)
            return rc;
        if (!first)
            first = masked[i];
    }
    return 0;
}

static int setup_dev(void)
{
    static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
    static const char *const links[][2] = {
        {"/proc/self/fd", "dev/fd"},       {"/proc/self/fd/0", "dev/stdin"},
        {"/proc/self/fd/1", "dev/stdout"}, {"/proc/self/fd/2", "dev/stderr"},
        {"pts/ptmx", "dev/ptmx"},
    };
    char host[32], inside[32];
    int rc =
        do_mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755");
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        size_t n = strlen(nodes[i]);
        memcpy(host, "/dev/", 5);
        memcpy(host + 5, nodes[i], n + 1);
        memcpy(inside, "dev/", 4);
        memcpy(inside + 4, nodes[i], n + 1);
        int fd = open(inside, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0)
            return -errno;
        close(fd);
        rc = do_mount(host, inside, NULL, MS_BIND, NULL);
        if (rc)
            return rc;
    }
    /* nosuid and noexec on every node at once (and on the tmpfs under them, which has them):
     * one call instead of a remount per node. */
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC};
    if (syscall(SYS_mount_setattr, AT_FDCWD, "dev", AT_RECURSIVE, &attr, sizeof(attr)) != 0)
        return -errno;
    if (mkdir("dev/pts", 0755) != 0 || mkdir("dev/shm", 01777) != 0 || chmod("dev/shm", 01777))
        return -errno;
    rc = do_mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620,max=" EPH_NS_PTYS_MAX);
    if (rc)
        return rc;
    rc = do_mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=64m,nr_inodes=4096,mode=1777");
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
        if (symlink(links[i][0], links[i][1]) != 0)
            return -errno;
    /* Nothing may be added to /dev once it is built. */
    return do_mount(NULL, "dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
                    "size=64k,nr_inodes=64,mode=0755");
}

int eph_ns_mount_setup(const struct eph_ns_plan *p)
{
    int rc = do_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    if (rc)
        return rc;
    /* Not recursive: whatever is mounted inside the image directory on the host stays out. */
    rc = do_mount(p->root, p->root, NULL, MS_BIND, NULL);
    if (rc)
        return rc;
    /* After the bind, so that "." is the new mount rather than the directory under it. */
    if (chdir(p->root) != 0)
        return -errno;
    rc = setup_tmp(p);
    if (rc)
        return rc;
    rc = setup_proc(p);
    if (rc)
        return rc;
    rc = setup_dev();
    if (rc)
        return rc;
    rc = do_mount(NULL, ".", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
    if (rc)
        return rc;
    /* pivot_root(".", "."): the old root ends up stacked under the new one and is detached at
     * once, so no directory for it is needed in the (read-only) image. */
    if (syscall(SYS_pivot_root, ".", ".") != 0)
        return -errno;
    if (umount2(".", MNT_DETACH) != 0)
        return -errno;
    if (chdir("/") != 0)
        return -errno;
    return 0;
}
