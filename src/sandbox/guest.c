/*
 * guest.c - the generic guest layer: everything a sandbox does that does not depend on how its
 * machine was booted. See backend.h.
 *
 * Lifecycle of every guest-based sandbox:
 *
 *   create: allocate the backend's state, fill limits, owner tag, names and run directory
 *           boot (backend): start the machine, watch its process, hand back the channel
 *           the guest's hello within the backend's timeout            -> ready
 *   calls:  exec, write_file, read_file, list_files, open_tunnel over the guest client;
 *           refused once interrupted, and any failure after an interrupt is -ECANCELED
 *   interrupt (any thread): shutdown() the channel and kill the machine, under the lock
 *   destroy: (optionally) ask the guest to shut down, kill it unless it ended cleanly, close the
 *           channel, release (backend): reap, remove host-side traces; free
 */
#include "sandbox/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <poll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "common/text.h"

#define COMPONENT "sandbox"
#define DEFAULT_HELLO_TIMEOUT_MS 10000u
/* How long a write_file, read_file or open_tunnel may take. */
#define FILE_TIMEOUT_MS 30000u
/* How long the guest gets to confirm a shutdown (shutdown_before_close backends). */
#define SHUTDOWN_TIMEOUT_MS 3000u
/* After a kill, how long the watched process gets to be reaped before it is reported stuck. */
#define REAP_AFTER_KILL_MS 10000u

static struct eph_guest_sandbox *guest_of(struct eph_sandbox *sb)
{
    return (struct eph_guest_sandbox *)sb;
}

static uint64_t deadline_in(uint32_t ms)
{
    return eph_clock_mono_ns() + (uint64_t)ms * 1000000u;
}

/* ---- names --------------------------------------------------------------------------------- */

/* The owner tag is part of names that orphan sweeps parse: [a-z0-9_]{1,16}, or "eph". */
static const char *owner_tag(const char *tag)
{
    if (tag && tag[0] && strlen(tag) <= 16 &&
        strspn(tag, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(tag))
        return tag;
    return "eph";
}

static int names_prepare(struct eph_guest_sandbox *g, const struct eph_sandbox_config *cfg,
                         const char *prefix)
{
    static atomic_uint seq;
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[6];
    char suffix[7];
    int rc = eph_random_bytes(rnd, sizeof(rnd));
    if (rc)
        return rc;
    for (int i = 0; i < 6; i++)
        suffix[i] = alphabet[rnd[i] % (sizeof(alphabet) - 1)];
    suffix[6] = '\0';
    /* Whole or not at all: these name things on the host that orphan sweeps parse. */
    rc = eph_text_format(g->run_dir, sizeof(g->run_dir), "/tmp/ephemeral-run-%s", suffix);
    if (!rc)
        rc = eph_text_format(g->scratch, sizeof(g->scratch), "%s/scratch", g->run_dir);
    if (!rc)
        rc = eph_text_format(g->home, sizeof(g->home), "%s/home", g->run_dir);
    if (!rc)
        rc = eph_text_format(g->name, sizeof(g->name), "%s-%d-%s%u", owner_tag(cfg->owner_tag),
                             (int)getpid(), prefix ? prefix : "", atomic_fetch_add(&seq, 1));
    return rc;
}

bool eph_guest_name_orphaned(const char *name, const char *prefix)
{
    const char *p = name;
    while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')
        p++;
    if (p == name || *p != '-')
        return false;
    char *end;
    long pid = strtol(p + 1, &end, 10);
    size_t plen = strlen(prefix);
    if (end == p + 1 || *end != '-' || pid <= 0 || strncmp(end + 1, prefix, plen) != 0)
        return false;
    const char *n = end + 1 + plen;
    if (!*n || strspn(n, "0123456789") != strlen(n))
        return false;
    if (pid == (long)getpid())
        return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

void eph_guest_cgroup_mounts(void (*fn)(const char *mnt, int version, void *arg), void *arg)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint options ... - fstype source superoptions */
        char mnt[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
            continue;
        const char *dash = strstr(line, " - ");
        char fstype[32];
        if (!dash || sscanf(dash + 3, "%31s", fstype) != 1)
            continue;
        if (strcmp(fstype, "cgroup") == 0)
            fn(mnt, 1, arg);
        else if (strcmp(fstype, "cgroup2") == 0)
            fn(mnt, 2, arg);
    }
    fclose(f);
}

static void limits_fill(struct eph_sandbox_limits *l, const struct eph_sandbox_limits *in)
{
    struct eph_sandbox_limits d;
    eph_sandbox_limits_default(&d);
    *l = *in;
    if (!l->vcpus)
        l->vcpus = d.vcpus;
    if (!l->memory_mib)
        l->memory_mib = d.memory_mib;
    if (!l->pids)
        l->pids = d.pids;
    if (!l->disk_mib)
        l->disk_mib = d.disk_mib;
    if (!l->nofile)
        l->nofile = d.nofile;
    if (!l->fsize_bytes)
        l->fsize_bytes = (uint64_t)l->disk_mib << 20;
}

/* ---- the watched process ------------------------------------------------------------------- */

int eph_guest_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

void eph_guest_sandbox_watch(struct eph_guest_sandbox *g, pid_t pid, int pidfd)
{
    pthread_mutex_lock(&g->lock);
    g->pid = pid;
    g->pidfd = pidfd;
    pthread_mutex_unlock(&g->lock);
}

/* SIGKILLs the watched process, which has not been reaped (reap takes it under the same lock), so
 * its pid cannot have been reused. Call with g->lock. */
static void kill_locked(struct eph_guest_sandbox *g)
{
    const struct eph_sandbox_backend *be = g->base.ops->backend;
    if (be->kill) {
        be->kill(g);
        return;
    }
    if (g->pid <= 0)
        return;
#ifdef SYS_pidfd_send_signal
    if (g->pidfd >= 0 && syscall(SYS_pidfd_send_signal, g->pidfd, SIGKILL, NULL, 0) == 0)
        return;
#endif
    kill(g->pid, SIGKILL);
}

int eph_guest_child_wait(pid_t pid, int pidfd, uint32_t timeout_ms, int *status)
{
    uint64_t deadline = deadline_in(timeout_ms);
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return -errno;
        uint64_t now = eph_clock_mono_ns();
        if (now >= deadline)
            return -ETIMEDOUT;
        int ms = (int)((deadline - now) / 1000000u) + 1;
        if (pidfd >= 0) {
            struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
            (void)poll(&pfd, 1, ms);
        } else {
            struct timespec pause = {0, 5 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
    }
    if (status)
        *status = st;
    return 0;
}

int eph_guest_sandbox_reap(struct eph_guest_sandbox *g, uint32_t grace_ms, int *status)
{
    if (g->pid <= 0)
        return 0;
    int st = 0;
    int rc = grace_ms ? eph_guest_child_wait(g->pid, g->pidfd, grace_ms, &st) : -ETIMEDOUT;
    if (rc == -ETIMEDOUT) {
        if (grace_ms)
            EPH_DEBUG(COMPONENT, "%s: process %d did not exit in %u ms; killing it", g->name,
                      (int)g->pid, grace_ms);
        pthread_mutex_lock(&g->lock);
        kill_locked(g);
        pthread_mutex_unlock(&g->lock);
        rc = eph_guest_child_wait(g->pid, g->pidfd, REAP_AFTER_KILL_MS, &st);
    }
    if (rc) {
        EPH_ERROR(COMPONENT, "cannot reap the process of %s: %s", g->name, strerror(-rc));
        return rc;
    }
    pthread_mutex_lock(&g->lock);
    g->pid = 0;
    if (g->pidfd >= 0)
        close(g->pidfd);
    g->pidfd = -1;
    pthread_mutex_unlock(&g->lock);
    if (status)
        *status = st;
    return 0;
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

int eph_guest_sandbox_create(const struct eph_sandbox_ops *ops,
                             const struct eph_sandbox_config *cfg, void *boot_arg,
                             struct eph_sandbox **out)
{
    const struct eph_sandbox_backend *be = ops->backend;
    struct eph_guest_sandbox *g = calloc(1, be->size);
    if (!g)
        return -ENOMEM;
    g->base.ops = ops;
    g->boot_arg = boot_arg;
    g->chan_fd = -1;
    g->pidfd = -1;
    pthread_mutex_init(&g->lock, NULL);
    atomic_init(&g->interrupted, false);
    limits_fill(&g->limits, &cfg->limits);

    int chan = -1;
    int rc = names_prepare(g, cfg, be->name_prefix);
    if (rc) {
        pthread_mutex_destroy(&g->lock);
        free(g);
        return rc;
    }
    rc = be->boot(g, cfg, &chan);
    if (!rc && chan < 0)
        rc = -EINVAL;
    if (rc) {
        if (chan >= 0)
            close(chan);
        goto fail;
    }
    rc = eph_guest_client_init(&g->client, chan);
    g->client_ready = true;
    pthread_mutex_lock(&g->lock);
    g->chan_fd = chan;
    pthread_mutex_unlock(&g->lock);
    if (rc)
        goto fail;
    rc = eph_guest_client_hello(
        &g->client,
        deadline_in(g->hello_timeout_ms ? g->hello_timeout_ms : DEFAULT_HELLO_TIMEOUT_MS));
    if (rc) {
        if (atomic_load(&g->interrupted))
            rc = -ECANCELED;
        if (be->boot_failed)
            be->boot_failed(g, rc);
        else
            EPH_ERROR(COMPONENT, "ephemeral-init did not start: %s", strerror(-rc));
        goto fail;
    }
    EPH_DEBUG(COMPONENT, "%s sandbox %s up", ops->name, g->name);
    *out = &g->base;
    return 0;

fail:
    eph_guest_sandbox_destroy(&g->base);
    return rc;
}

int eph_guest_sandbox_destroy(struct eph_sandbox *sb)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    const struct eph_sandbox_backend *be = sb->ops->backend;
    /* A guest that broke the protocol, timed out or was interrupted is not waited for: its init
     * may be stopped or gone, so the machine is killed at once. */
    bool cooperative =
        g->client_ready && !eph_guest_client_broken(&g->client) && !atomic_load(&g->interrupted);
    if (cooperative && be->shutdown_before_close) {
        int s = eph_guest_client_shutdown(&g->client, deadline_in(SHUTDOWN_TIMEOUT_MS));
        if (s) {
            EPH_DEBUG(COMPONENT, "%s did not confirm the shutdown: %s", g->name, strerror(-s));
            cooperative = false;
        }
    }
    pthread_mutex_lock(&g->lock);
    g->chan_fd = -1;
    if (!cooperative)
        kill_locked(g);
    pthread_mutex_unlock(&g->lock);
    if (g->client_ready)
        eph_guest_client_release(&g->client);
    g->client_ready = false;
    int rc = be->release(g);
    if (g->pid > 0) {
        /* A backend that did not reap: do it here, so no child is ever left behind. */
        int r = eph_guest_sandbox_reap(g, 0, NULL);
        if (r && !rc)
            rc = r;
    }
    pthread_mutex_destroy(&g->lock);
    free(g);
    return rc;
}

void eph_guest_sandbox_interrupt(struct eph_sandbox *sb)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    atomic_store(&g->interrupted, true);
    pthread_mutex_lock(&g->lock);
    /* shutdown(), not close(): a call waiting on the channel wakes up with a hangup, and the
     * descriptor number stays ours until destroy releases it. */
    if (g->chan_fd >= 0)
        (void)shutdown(g->chan_fd, SHUT_RDWR);
    kill_locked(g);
    pthread_mutex_unlock(&g->lock);
}

int eph_guest_sandbox_watch_fd(struct eph_sandbox *sb)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    pthread_mutex_lock(&g->lock);
    int fd = g->pid > 0 && g->pidfd >= 0 ? fcntl(g->pidfd, F_DUPFD_CLOEXEC, 3) : -2;
    int rc = fd >= 0 ? fd : fd == -2 ? -ENOTSUP : -errno;
    pthread_mutex_unlock(&g->lock);
    return rc;
}

int eph_guest_sandbox_pause(struct eph_sandbox *sb, bool paused)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    const struct eph_sandbox_backend *be = sb->ops->backend;
    if (!be->pause)
        return -ENOTSUP;
    pthread_mutex_lock(&g->lock);
    int rc = g->pid > 0 ? be->pause(g, paused) : -ESRCH;
    pthread_mutex_unlock(&g->lock);
    return rc;
}

int eph_guest_pause_watched(struct eph_guest_sandbox *g, bool paused)
{
    int sig = paused ? SIGSTOP : SIGCONT;
#ifdef SYS_pidfd_send_signal
    if (g->pidfd >= 0)
        return syscall(SYS_pidfd_send_signal, g->pidfd, sig, NULL, 0) == 0 ? 0 : -errno;
#endif
    return kill(g->pid, sig) == 0 ? 0 : -errno;
}

/* ---- calls --------------------------------------------------------------------------------- */

/* Whatever the channel said after an interrupt, the interrupt is the reason. */
static int after_interrupt(struct eph_guest_sandbox *g, int rc)
{
    return rc && atomic_load(&g->interrupted) ? -ECANCELED : rc;
}

int eph_guest_sandbox_exec(struct eph_sandbox *sb, const struct eph_exec_request *req,
                           struct eph_exec_result *res)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    if (atomic_load(&g->interrupted))
        return -ECANCELED;
    return after_interrupt(g, eph_guest_client_exec(&g->client, req, res));
}

int eph_guest_sandbox_write_file(struct eph_sandbox *sb, const char *path, const void *data,
                                 size_t len, unsigned mode)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    if (atomic_load(&g->interrupted))
        return -ECANCELED;
    return after_interrupt(g, eph_guest_client_write_file(&g->client, path, data, len, mode,
                                                          deadline_in(FILE_TIMEOUT_MS)));
}

int eph_guest_sandbox_read_file(struct eph_sandbox *sb, const char *path, size_t cap,
                                struct eph_buf *out)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    if (atomic_load(&g->interrupted))
        return -ECANCELED;
    return after_interrupt(
        g, eph_guest_client_read_file(&g->client, path, cap, out, deadline_in(FILE_TIMEOUT_MS)));
}

int eph_guest_sandbox_list_files(struct eph_sandbox *sb, uint32_t max_entries, uint32_t max_depth,
                                 struct eph_sandbox_listing *out)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    if (atomic_load(&g->interrupted))
        return -ECANCELED;
    return after_interrupt(g, eph_guest_client_list_files(&g->client, max_entries, max_depth, out,
                                                          deadline_in(FILE_TIMEOUT_MS)));
}

int eph_guest_sandbox_open_tunnel(struct eph_sandbox *sb, const struct eph_sandbox_tunnel *t)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    if (atomic_load(&g->interrupted))
        return -ECANCELED;
    return after_interrupt(
        g, eph_guest_client_open_tunnel(&g->client, t, deadline_in(FILE_TIMEOUT_MS)));
}

int eph_guest_sandbox_ping(struct eph_sandbox *sb, uint32_t timeout_ms)
{
    struct eph_guest_sandbox *g = guest_of(sb);
    if (atomic_load(&g->interrupted))
        return -ECANCELED;
    return after_interrupt(g, eph_guest_client_ping(&g->client, deadline_in(timeout_ms)));
}

const char *eph_guest_sandbox_scratch_dir(struct eph_sandbox *sb)
{
    return guest_of(sb)->scratch;
}
