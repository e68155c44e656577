/*
 * launcher.c - the small process that clones a server's sandboxes.
 *
 * A clone copies its caller: the page tables and mappings at the clone, then a copy-on-write fault
 * for each page the child writes before it execs, then the teardown of the copy. By the time a
 * server runs sandboxes it is large and multithreaded (its heap, its threads' stacks, libcurl,
 * libpq, OpenSSL), and each of those costs grows with it: a sandbox cloned from the server itself
 * cost it about 3.5 ms that a small process does not pay. The launcher is a fork of the server made
 * first thing at its start, before any thread or most of the heap exists. It is single-threaded
 * and small, waits on a socket for a sandbox's plan, and clones the child from its own copy.
 *
 * The child is cloned with CLONE_PARENT: it is the launcher's sibling and the server's own child,
 * so everything after the clone is exactly as if the server had cloned it. The server writes its
 * uid and gid maps, runs the parent's side of the setup, waits for it, kills and reaps it through
 * the pidfd; the child's parent-death signal follows the server's thread that forked the launcher
 * (its main thread), not a worker thread. The launcher never has a child of its own to reap.
 *
 * Protocol, on a SOCK_SEQPACKET pair, one request at a time (the server's side holds a lock):
 *
 *   request   struct launch_req (the plan, every path and option string the child needs)
 *             + SCM_RIGHTS: chan, init, sync, [the cgroup's directory], the cgroup join fds
 *   reply     struct launch_rep {rc, pid} + SCM_RIGHTS: the pidfd, when rc is 0
 *
 * The launcher checks each request (its size, the descriptor count, every string terminated)
 * and answers a bad one with -EPROTO, then waits for the next; it exits when the server's end
 * closes (a zero-length message reads the same), and dies with the server (parent-death signal).
 * Without a launcher, or once it is gone, the server clones itself as before: a request that could
 * not be sent falls back at once, one sent but never answered fails its sandbox (-EIO, since the
 * child may exist and holds that sandbox's sockets) and the next ones fall back.
 *
 * What runs in the launcher is system calls only: it may be forked from a process that already has
 * threads (a test, a benchmark), whose locks (malloc's, the log's) it must never take.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "sandbox/backend.h"
#include "sandbox/namespaces/namespaces.h"

#define COMPONENT "sandbox"
#define LAUNCH_MAGIC 0x4c4e4345u /* "ECNL" */
#define LAUNCH_MAX_FDS 7         /* chan, init, sync, cgroup directory, three join fds */
#define LAUNCH_REPLY_MS 10000u   /* the clone itself: well under a millisecond */
#define LAUNCHER_FD 3

struct launch_req {
    uint32_t magic;
    int32_t join_n;         /* 0..3 join fds after the others */
    int32_t has_cgroup_dir; /* 0 or 1: a v2 cgroup directory for clone3 */
    struct eph_ns_plan plan;
};

struct launch_rep {
    uint32_t magic;
    int32_t rc; /* 0 or a negative errno */
    int32_t pid;
};

/* The server's side. */
static struct {
    pthread_mutex_t lock;
    int fd; /* our end, -1 when there is no launcher */
    pid_t pid;
    unsigned long served;
} L = {PTHREAD_MUTEX_INITIALIZER, -1, 0, 0};

/* ---- both sides ------------------------------------------------------------------------- */

static int send_with_fds(int fd, const void *msg, size_t len, const int *fds, int nfds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * LAUNCH_MAX_FDS)];
    } cm;
    memset(&cm, 0, sizeof(cm));
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t w;
    do
        w = sendmsg(fd, &mh, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        return -errno;
    return w == (ssize_t)len ? 0 : -EIO;
}

/* One message into msg (len bytes exactly, else *bad) and its descriptors (at most max; any beyond,
 * or of another kind, set *bad). Returns the byte count, 0 at end of file, or a negative errno. */
static ssize_t recv_with_fds(int fd, void *msg, size_t len, int *fds, int max, int *nfds, bool *bad)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * LAUNCH_MAX_FDS)];
    } cm;
    char extra;
    struct iovec iov[2] = {{.iov_base = msg, .iov_len = len}, {.iov_base = &extra, .iov_len = 1}};
    struct msghdr mh = {
        .msg_iov = iov, .msg_iovlen = 2, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf)};
    ssize_t r;
    do
        r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    *nfds = 0;
    *bad = false;
    if (r < 0)
        return -errno;
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
        *bad = true;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            *bad = true;
            continue;
        }
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int f;
            memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(f));
            if (*nfds < max) {
                fds[(*nfds)++] = f;
            } else {
                close(f);
                *bad = true;
            }
        }
    }
    if ((size_t)r != len)
        *bad = true;
    return r;
}

/* ---- the launcher ----------------------------------------------------------------------- */

#define TERMINATED(field) (memchr((field), '\0', sizeof(field)) != NULL)

static bool plan_sane(const struct eph_ns_plan *p)
{
    return TERMINATED(p->root) && TERMINATED(p->run_rel) && TERMINATED(p->scratch_rel) &&
           TERMINATED(p->home_rel) && TERMINATED(p->scratch) && TERMINATED(p->home) &&
           TERMINATED(p->tmp_opts) && TERMINATED(p->meminfo_rel) &&
           p->meminfo_len <= sizeof(p->meminfo) && p->root[0] == '/';
}

int eph_ns_launcher_serve_one(int fd)
{
    struct launch_req req;
    int fds[LAUNCH_MAX_FDS], nfds;
    bool bad;
    ssize_t r = recv_with_fds(fd, &req, sizeof(req), fds, LAUNCH_MAX_FDS, &nfds, &bad);
    if (r < 0)
        return (int)r;
    if (r == 0 && nfds == 0)
        return 1;
    int rc = 0;
    if (bad || req.magic != LAUNCH_MAGIC || req.join_n < 0 || req.join_n > 3 ||
        (req.has_cgroup_dir != 0 && req.has_cgroup_dir != 1) ||
        nfds != 3 + req.has_cgroup_dir + req.join_n || !plan_sane(&req.plan))
        rc = -EPROTO;
    pid_t pid = 0;
    int pidfd = -1;
    if (!rc) {
        req.plan.chan_fd = fds[0];
        req.plan.init_fd = fds[1];
        req.plan.sync_fd = fds[2];
        int cgroup_dir = req.has_cgroup_dir ? fds[3] : -1;
        rc = eph_ns_jail_clone(&req.plan, cgroup_dir, fds + 3 + req.has_cgroup_dir, req.join_n,
                               true, &pid, &pidfd);
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    struct launch_rep rep;
    memset(&rep, 0, sizeof(rep));
    rep.magic = LAUNCH_MAGIC;
    rep.rc = rc;
    rep.pid = rc ? 0 : (int32_t)pid;
    int src = send_with_fds(fd, &rep, sizeof(rep), &pidfd, !rc && pidfd >= 0 ? 1 : 0);
    if (pidfd >= 0)
        close(pidfd);
    return src;
}

static _Noreturn void launcher_main(int fd, pid_t server)
{
    /* Dies with the server; the server may have died before the first line. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != server)
        _exit(0);
    (void)prctl(PR_SET_NAME, "eph-launcher", 0, 0, 0);
    /* Nothing of the server's but the socket: not its listening sockets, its database, its log. */
    if (fd != LAUNCHER_FD && dup3(fd, LAUNCHER_FD, O_CLOEXEC) < 0)
        _exit(1);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        _exit(1);
    for (int i = 0; i < 3; i++)
        if (dup2(null, i) < 0)
            _exit(1);
    if (close_range(LAUNCHER_FD + 1, ~0u, 0) != 0)
        _exit(1);
    for (;;) {
        int rc = eph_ns_launcher_serve_one(LAUNCHER_FD);
        if (rc == 1)
            _exit(0);
        if (rc < 0 && rc != -EPROTO)
            _exit(1);
    }
}

/* ---- the server's side ------------------------------------------------------------------ */

/* With L.lock held: the launcher is gone or broken. It is ours: killed (if it still runs) and
 * reaped, and every later sandbox is cloned by this process. */
static void launcher_lost(const char *why)
{
    EPH_WARN(COMPONENT, "the sandbox launcher %s: this process now clones its sandboxes itself",
             why);
    close(L.fd);
    L.fd = -1;
    (void)kill(L.pid, SIGKILL);
    (void)eph_guest_child_wait(L.pid, -1, LAUNCH_REPLY_MS, NULL);
    L.pid = 0;
}

int eph_sandbox_launcher_start(void)
{
    pthread_mutex_lock(&L.lock);
    if (L.fd >= 0) {
        pthread_mutex_unlock(&L.lock);
        return -EALREADY;
    }
    eph_ns_mount_prepare(); /* before the fork: the children read what it found */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        int rc = -errno;
        pthread_mutex_unlock(&L.lock);
        return rc;
    }
    pid_t server = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        launcher_main(sv[1], server);
    }
    int rc = pid < 0 ? -errno : 0;
    close(sv[1]);
    if (rc) {
        close(sv[0]);
    } else {
        L.fd = sv[0];
        L.pid = pid;
        L.served = 0;
    }
    pthread_mutex_unlock(&L.lock);
    return rc;
}

void eph_sandbox_launcher_stop(void)
{
    pthread_mutex_lock(&L.lock);
    if (L.fd >= 0) {
        close(L.fd); /* the launcher sees the end of file and exits */
        L.fd = -1;
        if (eph_guest_child_wait(L.pid, -1, LAUNCH_REPLY_MS, NULL) == -ETIMEDOUT) {
            (void)kill(L.pid, SIGKILL);
            (void)eph_guest_child_wait(L.pid, -1, LAUNCH_REPLY_MS, NULL);
        }
        L.pid = 0;
    }
    pthread_mutex_unlock(&L.lock);
}

void eph_sandbox_launcher_info(pid_t *pid, unsigned long *served)
{
    pthread_mutex_lock(&L.lock);
    *pid = L.fd >= 0 ? L.pid : 0;
    *served = L.served;
    pthread_mutex_unlock(&L.lock);
}

int eph_ns_launcher_clone(const struct eph_ns_plan *p, int cgroup_dir, const int *join_fd,
                          int join_n, pid_t *pid, int *pidfd)
{
    if (join_n < 0 || join_n > 3)
        return -EINVAL;
    pthread_mutex_lock(&L.lock);
    if (L.fd < 0) {
        pthread_mutex_unlock(&L.lock);
        return 1;
    }
    struct launch_req req;
    memset(&req, 0, sizeof(req));
    req.magic = LAUNCH_MAGIC;
    req.join_n = join_n;
    req.has_cgroup_dir = cgroup_dir >= 0;
    req.plan = *p;
    int fds[LAUNCH_MAX_FDS], n = 0;
    fds[n++] = p->chan_fd;
    fds[n++] = p->init_fd;
    fds[n++] = p->sync_fd;
    if (cgroup_dir >= 0)
        fds[n++] = cgroup_dir;
    for (int i = 0; i < join_n; i++)
        fds[n++] = join_fd[i];
    int rc = send_with_fds(L.fd, &req, sizeof(req), fds, n);
    if (rc) {
        /* Nothing was sent: no child can exist, so this sandbox too can take the fallback. */
        launcher_lost(rc == -EPIPE || rc == -ECONNRESET ? "is gone" : "cannot be written to");
        pthread_mutex_unlock(&L.lock);
        return 1;
    }
    struct pollfd pfd = {.fd = L.fd, .events = POLLIN};
    int ready;
    do
        ready = poll(&pfd, 1, (int)LAUNCH_REPLY_MS);
    while (ready < 0 && errno == EINTR);
    struct launch_rep rep;
    int got[LAUNCH_MAX_FDS], ngot = 0;
    bool bad = true;
    ssize_t r = ready > 0 ? recv_with_fds(L.fd, &rep, sizeof(rep), got, 1, &ngot, &bad) : 0;
    if (ready <= 0 || r <= 0 || bad || rep.magic != LAUNCH_MAGIC || rep.rc > 0 || rep.rc < -4095 ||
        (rep.rc == 0 && (rep.pid <= 0 || ngot > 1)) || (rep.rc && ngot)) {
        for (int i = 0; i < ngot; i++)
            close(got[i]);
        launcher_lost(ready == 0 ? "did not answer" : "is gone or answered out of turn");
        pthread_mutex_unlock(&L.lock);
        return -EIO;
    }
    if (rep.rc == 0) {
        *pid = (pid_t)rep.pid;
        *pidfd = ngot ? got[0] : -1;
        L.served++;
    }
    pthread_mutex_unlock(&L.lock);
    return rep.rc;
}
