/*
 * fence.c - a node's runs stop before their lease can be called expired (docs/RUN.md,
 * "Fencing"). Shared stores only: on one node nobody else can take a run over.
 *
 * Each run worked here has a fence (eph_live_set_fence): the monotonic instant three quarters of a
 * lease after the last renewal of its lease was sent. Two things enforce it, neither of which
 * needs the store:
 *
 *   - the watchdog, a process of its own forked at start (it keeps running when this process is
 *     stopped: SIGSTOP, a debugger, a long swap-in). It holds a pidfd of each sandbox's machine
 *     (received over a socket) and reads each one's deadline from a page it shares with this
 *     process; when a deadline passes it SIGKILLs the machine, which ends everything in it. It
 *     uses system calls only (it is forked from a threaded process) and exits when this process's
 *     end of the socket closes.
 *   - the fence thread, in this process, every 100 ms: while a run's fence is ahead it sets the
 *     watchdog's deadline to the fence. Shortly before the fence (an eighth of a lease), when the
 *     lease could not be renewed (the store is out of reach, or the keeper is stuck), it pauses the
 *     sandbox (SIGSTOP to everything in it), and from then on sets the watchdog's deadline a
 *     quarter of a lease (at least a second) ahead of now, as a sign that this process is alive
 *     and keeps it paused. When a renewal
 *     moves the fence on, it resumes the sandbox. When the renewal finds the run lost, the worker
 *     destroys it (disarm kills a paused one first).
 *
 * So a node stopped as a whole loses its sandboxes at their fence, before any other node may
 * settle their runs; a node that only lost the store keeps its runs, paused, for as long as the
 * store is away, and no other node settles them (lease.c counts only time in contact).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "run/live.h"
#include "run/fence.h"

#define TICK_MS 100
#define WATCHDOG_FD 3

enum { OP_ARM = 1, OP_DISARM = 2 };

struct fence_msg {
    uint32_t op;
    uint32_t slot;
};

/* One per sandbox slot, in the page shared with the watchdog. */
struct shared_slot {
    _Atomic uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: never */
    atomic_uint killed;           /* set by the watchdog when it killed the machine */
    int fd;                       /* the watchdog's own: its pidfd of the machine, or -1 */
};

struct entry {
    struct eph_live *live; /* a reference; NULL: the slot is free */
    struct eph_sandbox *sb;
    bool paused;
    bool cannot_pause; /* said once */
};

struct eph_fence {
    struct eph_service *svc;
    struct shared_slot *shared; /* mmap'd, MAP_SHARED */
    size_t nslots;
    int sock; /* this process's end; -1 once the watchdog is gone */
    pid_t watchdog;
    pthread_mutex_t lock; /* guards entries, sock and the thread's stop flag */
    pthread_cond_t cond;
    struct entry *entries;
    bool stop;
    bool started; /* the thread */
    pthread_t thread;
    unsigned kills;
};

/* ---- the watchdog (a forked child: system calls only) ---- */

static uint64_t wd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void wd_receive(struct shared_slot *slots, size_t n)
{
    struct fence_msg m;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof(m)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf)};
    ssize_t r = recvmsg(WATCHDOG_FD, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r == 0)
        _exit(0); /* the server is gone (its sandboxes die with it: parent-death signal) */
    if (r < 0)
        return;
    int fd = -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof(fd));
    if (r != (ssize_t)sizeof(m) || m.slot >= n) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct shared_slot *s = &slots[m.slot];
    if (s->fd >= 0)
        close(s->fd);
    s->fd = m.op == OP_ARM ? fd : -1;
    if (m.op != OP_ARM && fd >= 0)
        close(fd);
}

static void __attribute__((noreturn)) watchdog_main(struct shared_slot *slots, size_t n)
{
    for (size_t i = 0; i < n; i++)
        slots[i].fd = -1;
    for (;;) {
        struct pollfd p = {.fd = WATCHDOG_FD, .events = POLLIN};
        int r = poll(&p, 1, TICK_MS);
        if (r > 0 && (p.revents & (POLLHUP | POLLERR)) && !(p.revents & POLLIN))
            _exit(0);
        if (r > 0)
            wd_receive(slots, n);
        uint64_t now = wd_now();
        for (size_t i = 0; i < n; i++) {
            struct shared_slot *s = &slots[i];
            uint64_t d = atomic_load(&s->deadline_ns);
            if (s->fd < 0 || !d || now < d)
                continue;
            syscall(SYS_pidfd_send_signal, s->fd, SIGKILL, NULL, 0);
            atomic_store(&s->killed, 1u);
            close(s->fd);
            s->fd = -1;
        }
    }
}

static int watchdog_start(struct eph_fence *f)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int rc = -errno;
        close(sv[0]);
        close(sv[1]);
        return rc;
    }
    if (pid == 0) {
        /* Nothing of the server but its end of the socket: no listening socket, no database
         * connection, no sandbox channel stays open here. */
        if (sv[1] != WATCHDOG_FD && dup2(sv[1], WATCHDOG_FD) < 0)
            _exit(1);
        syscall(SYS_close_range, WATCHDOG_FD + 1, ~0u, 0);
        /* A session of its own: a stop sent to the server's process group (a shell's job
         * control) does not stop the watchdog with it. */
        setsid();
        prctl(PR_SET_NAME, "eph-fence", 0, 0, 0);
        watchdog_main(f->shared, f->nslots);
    }
    close(sv[1]);
    f->sock = sv[0];
    f->watchdog = pid;
    return 0;
}

/* ---- this process ---- */

/* Sends a message (and a descriptor) to the watchdog; call with f->lock. */
static int tell(struct eph_fence *f, uint32_t op, size_t slot, int fd)
{
    if (f->sock < 0)
        return -EPIPE;
    struct fence_msg m = {.op = op, .slot = (uint32_t)slot};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof(cm));
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof(m)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof(cm.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(fd));
    }
    ssize_t w;
    /* Never blocks a worker: a watchdog that does not read (stopped by hand) misses the message,
     * and that sandbox is fenced by this process alone. */
    do
        w = sendmsg(f->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w == (ssize_t)sizeof(m))
        return 0;
    int rc = w < 0 ? -errno : -EIO;
    if (rc == -EAGAIN) {
        EPH_WARN("fence", "the fence's watchdog does not keep up; a sandbox is fenced by this "
                          "process alone");
        return rc;
    }
    EPH_ERROR("fence",
              "the fence's watchdog is gone (%s): sandboxes are fenced by this process "
              "alone",
              strerror(-rc));
    close(f->sock);
    f->sock = -1;
    return rc;
}

static uint64_t lead_ns(const struct eph_config *cfg)
{
    return (uint64_t)(cfg->lease_seconds ? cfg->lease_seconds : 30) * 1000000000u / 8;
}

/* While a sandbox is paused, how far ahead of now the watchdog's deadline is kept: nothing runs in
 * it, so this only bounds how long a node stopped meanwhile leaves it in memory; generous enough
 * that a busy host's late tick does not kill a paused sandbox. */
static uint64_t keepalive_ns(const struct eph_config *cfg)
{
    uint64_t q = (uint64_t)(cfg->lease_seconds ? cfg->lease_seconds : 30) * 1000000000u / 4;
    return q > 1000000000u ? q : 1000000000u;
}

/* One run's sandbox, once a tick; call with f->lock. */
static void tick_one(struct eph_fence *f, size_t i, uint64_t now)
{
    struct entry *e = &f->entries[i];
    struct shared_slot *s = &f->shared[i];
    uint64_t fence = eph_live_fence(e->live);
    uint64_t lead = lead_ns(f->svc->cfg);
    if (!fence || eph_live_is_lease_lost(e->live) || atomic_load(&s->killed)) {
        atomic_store(&s->deadline_ns, fence);
        return;
    }
    if (now + lead < fence) {
        atomic_store(&s->deadline_ns, fence);
        if (e->paused) {
            int rc = e->sb->ops->pause(e->sb, false);
            EPH_INFO("fence", "run %s: lease renewed; its sandbox runs again%s%s",
                     eph_live_id(e->live), rc ? ": " : "", rc ? strerror(-rc) : "");
            e->paused = false;
        }
        return;
    }
    /* The lease could not be renewed in time: stop everything in the sandbox before the fence,
     * until it is renewed or found lost. */
    if (!e->paused && !e->cannot_pause) {
        int rc = e->sb->ops->pause ? e->sb->ops->pause(e->sb, true) : -ENOTSUP;
        if (rc == 0) {
            e->paused = true;
            EPH_WARN("fence",
                     "run %s: its lease could not be renewed in time; its sandbox is "
                     "paused until it is",
                     eph_live_id(e->live));
        } else {
            e->cannot_pause = true;
            EPH_WARN("fence",
                     "run %s: its lease could not be renewed in time and its sandbox "
                     "cannot be paused (%s): it is killed at the fence",
                     eph_live_id(e->live), strerror(-rc));
        }
    }
    /* Paused, nothing runs in it: this process, alive, keeps it so; should it stop too, the
     * watchdog kills the sandbox within a lead. */
    atomic_store(&s->deadline_ns, e->paused ? now + keepalive_ns(f->svc->cfg) : fence);
}

static void *fence_main(void *arg)
{
    struct eph_fence *f = arg;
    pthread_mutex_lock(&f->lock);
    while (!f->stop) {
        uint64_t now = eph_clock_mono_ns();
        for (size_t i = 0; i < f->nslots; i++)
            if (f->entries[i].live)
                tick_one(f, i, now);
        struct timespec ts;
        eph_clock_timespec(eph_clock_mono_ns() + (uint64_t)TICK_MS * 1000000u, &ts);
        pthread_cond_timedwait(&f->cond, &f->lock, &ts);
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

int eph_fence_start(struct eph_service *svc)
{
    svc->fence = NULL;
    if (!svc->store->ops->shared)
        return 0;
    struct eph_fence *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->svc = svc;
    f->sock = -1;
    f->nslots = svc->cfg->max_concurrent_runs ? svc->cfg->max_concurrent_runs : 1;
    f->entries = calloc(f->nslots, sizeof(*f->entries));
    f->shared = mmap(NULL, f->nslots * sizeof(*f->shared), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!f->entries || f->shared == MAP_FAILED) {
        if (f->shared != MAP_FAILED)
            munmap(f->shared, f->nslots * sizeof(*f->shared));
        free(f->entries);
        free(f);
        return -ENOMEM;
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &a);
    pthread_condattr_destroy(&a);
    int rc = watchdog_start(f);
    if (rc)
        EPH_ERROR("fence",
                  "cannot start the fence's watchdog: %s; sandboxes are fenced by this "
                  "process alone",
                  strerror(-rc));
    svc->fence = f;
    rc = pthread_create(&f->thread, NULL, fence_main, f);
    if (rc) {
        eph_fence_stop(svc);
        return -rc;
    }
    f->started = true;
    return 0;
}

void eph_fence_stop(struct eph_service *svc)
{
    struct eph_fence *f = svc->fence;
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stop = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    if (f->started)
        pthread_join(f->thread, NULL);
    for (size_t i = 0; i < f->nslots; i++)
        eph_live_put(f->entries[i].live);
    if (f->sock >= 0)
        close(f->sock);
    if (f->watchdog > 0)
        while (waitpid(f->watchdog, NULL, 0) < 0 && errno == EINTR)
            ;
    munmap(f->shared, f->nslots * sizeof(*f->shared));
    free(f->entries);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    free(f);
    svc->fence = NULL;
}

void eph_fence_arm(struct eph_fence *f, struct eph_live *l, struct eph_sandbox *sb)
{
    if (!f || !l || !sb)
        return;
    struct eph_live *ref = eph_live_get(f->svc->live, eph_live_id(l));
    if (ref != l) {
        eph_live_put(ref);
        return;
    }
    pthread_mutex_lock(&f->lock);
    size_t i = 0;
    while (i < f->nslots && f->entries[i].live)
        i++;
    if (i == f->nslots) {
        pthread_mutex_unlock(&f->lock);
        eph_live_put(ref);
        EPH_ERROR("fence", "run %s: no fence slot left; its sandbox is not fenced", eph_live_id(l));
        return;
    }
    f->entries[i] = (struct entry){.live = ref, .sb = sb};
    atomic_store(&f->shared[i].deadline_ns, eph_live_fence(l));
    atomic_store(&f->shared[i].killed, 0u);
    int fd = sb->ops->watch_fd ? sb->ops->watch_fd(sb) : -ENOTSUP;
    if (fd >= 0) {
        tell(f, OP_ARM, i, fd);
        close(fd);
    } else {
        EPH_WARN("fence",
                 "run %s: the sandbox has no process to fence (%s); only this process "
                 "fences it",
                 eph_live_id(l), strerror(-fd));
    }
    pthread_mutex_unlock(&f->lock);
}

void eph_fence_disarm(struct eph_fence *f, struct eph_live *l)
{
    if (!f || !l)
        return;
    pthread_mutex_lock(&f->lock);
    struct eph_live *ref = NULL;
    for (size_t i = 0; i < f->nslots; i++) {
        struct entry *e = &f->entries[i];
        if (e->live != l)
            continue;
        /* A paused sandbox is not resumed to be destroyed: its lease is lost or in doubt. */
        if (e->paused)
            e->sb->ops->interrupt(e->sb);
        if (atomic_load(&f->shared[i].killed)) {
            f->kills++;
            EPH_WARN("fence",
                     "run %s: its sandbox was killed at its fence (the lease was not "
                     "renewed in time)",
                     eph_live_id(l));
        }
        atomic_store(&f->shared[i].deadline_ns, 0);
        tell(f, OP_DISARM, i, -1);
        ref = e->live;
        *e = (struct entry){0};
        break;
    }
    pthread_mutex_unlock(&f->lock);
    eph_live_put(ref);
}

unsigned eph_fence_kills(struct eph_fence *f)
{
    if (!f)
        return 0;
    pthread_mutex_lock(&f->lock);
    unsigned n = f->kills;
    pthread_mutex_unlock(&f->lock);
    return n;
}
