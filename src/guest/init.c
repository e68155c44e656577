/*
 * init.c - ephemeral-init, the sandbox's PID 1 and the guest end of the protocol.
 *
 *   ephemeral-init [--keeper] SCRATCH_DIR HOME_DIR      (the channel is fd 3)
 *   ephemeral-init --keeper --make-dirs RUN_DIR SCRATCH_DIR HOME_DIR   (gvisor: the channel is fd
 * 0)
 *
 * The jail starts it as worker (uid 1000) with no capabilities, no_new_privs and seccomp already
 * in force; runsc (gvisor) and the guest kernel (microvm) start it as root with --keeper, and it
 * makes itself the sandbox's keeper with the same filter and no capability, which every command
 * runs under as worker (harden.h). It is static and unsanitized so that it needs nothing from the
 * image. It serves one request at a time from the channel: exec (runs /bin/sh -c, or a command
 * that needs no shell directly (argv.h), as a new process
 * group in the scratch directory with a clean environment, streams capped output, kills the group
 * at the timeout), write_file, read_file, list_files, ping, shutdown. As PID 1 it reaps every
 * orphan.
 *
 * Nothing it reads is trusted: malformed frames get an error reply and are skipped, and the loop
 * goes on. When the channel closes, the host is gone: init kills everything and exits, which ends
 * the PID namespace.
 *
 * Signals: the kernel drops signals sent to a namespace's init from inside unless init handles
 * them, so `kill -9 1` from a command does nothing; gVisor does not, and there the keeper's uids
 * refuse it (harden.h). SIGCHLD is blocked and read from a signalfd.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "guest/argv.h"
#include "guest/harden.h"
#include "guest/protocol.h"
#include "guest/tunnel.h"
#include "guest/vm.h"

#define CHANNEL_FD 3
/* After the shell exits, how long init keeps reading output still held open by a background
 * process before it reports: the command is over, its stragglers do not get to stall the caller. */
#define DRAIN_GRACE_MS 250
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static uint8_t rx_payload[EPH_PROTO_MAX_PAYLOAD];
static uint8_t rx_raw[4 * EPH_PROTO_CHUNK]; /* several tunnel frames per read */
static uint8_t tx[EPH_PROTO_HEADER_SIZE + EPH_PROTO_CHUNK + 64];
static uint8_t tx_small[EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_ERROR_MSG + 64];
static struct eph_proto_decoder dec;
static const char *scratch_dir;
static const char *home_dir;
static int sig_fd = -1;
static bool channel_broken;
static size_t rx_off, rx_len; /* rx_raw[rx_off..rx_len): read from the channel, not decoded yet */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Kills every process init may signal (everything in the sandbox but itself) and exits: the PID
 * namespace dies with its init. */
static void __attribute__((noreturn)) die_all(int status)
{
    kill(-1, SIGKILL);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
    _exit(status);
}

static void send_all(const uint8_t *p, size_t n)
{
    if (channel_broken)
        return;
    while (n) {
        ssize_t w = send(CHANNEL_FD, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(CHANNEL_FD, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                struct pollfd pfd = {.fd = CHANNEL_FD, .events = POLLOUT};
                poll(&pfd, 1, -1);
                continue;
            }
            /* The host is gone: nothing left to serve. */
            channel_broken = true;
            die_all(0);
        }
        p += w;
        n -= (size_t)w;
    }
}

static void reply_error(uint32_t id, int err, const char *msg)
{
    int len = eph_proto_error_encode(tx_small, sizeof(tx_small), id, err, msg);
    if (len > 0)
        send_all(tx_small, (size_t)len);
}

static void reply_empty(uint8_t type, uint32_t id, const void *payload, size_t plen)
{
    int len = eph_proto_raw_encode(tx_small, sizeof(tx_small), type, 0, id, payload, plen);
    if (len > 0)
        send_all(tx_small, (size_t)len);
}

/* Reaps every child that has exited; reports the status of `want` if it was among them. */
static bool reap(pid_t want, int *status)
{
    bool found = false;
    struct signalfd_siginfo si;
    while (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p < 0 && errno == EINTR)
            continue;
        if (p <= 0)
            break;
        if (p == want) {
            *status = st;
            found = true;
        }
    }
    return found;
}

/* ---- exec ------------------------------------------------------------------------------- */

struct stream {
    int fd;
    uint8_t type;
    uint64_t cap; /* of the head, with a tail */
    uint64_t sent;
    uint64_t total;
    /* EPH_PROTO_CAP_HEAD_TAIL: the last ring_cap bytes past the head, sent at the end */
    uint8_t *ring;
    size_t ring_cap, ring_len, ring_pos; /* ring_pos: where the next byte goes */
    uint8_t live_type;                   /* exec_live_stdout or _stderr */
    uint64_t *live_left; /* the exec's live budget, both streams: bytes past the heads sent as
                            they come; NULL or 0: none */
};

/* Sets the stream's caps from the request's word: the head, and the tail's ring when asked. 0 or
 * -ENOMEM. */
static int stream_init(struct stream *s, int fd, uint8_t type, uint32_t cap)
{
    *s = (struct stream){.fd = fd, .type = type, .cap = cap & ~EPH_PROTO_CAP_HEAD_TAIL};
    if (!(cap & EPH_PROTO_CAP_HEAD_TAIL) || s->cap < 2)
        return 0;
    s->ring_cap = (size_t)(s->cap / 2);
    s->cap -= s->ring_cap;
    s->ring = malloc(s->ring_cap);
    return s->ring ? 0 : -ENOMEM;
}

/* Keeps bytes past the head in the ring, the oldest overwritten first. */
static void ring_put(struct stream *s, const uint8_t *p, size_t n)
{
    if (n >= s->ring_cap) {
        memcpy(s->ring, p + n - s->ring_cap, s->ring_cap);
        s->ring_pos = 0;
        s->ring_len = s->ring_cap;
        return;
    }
    size_t first = s->ring_cap - s->ring_pos < n ? s->ring_cap - s->ring_pos : n;
    memcpy(s->ring + s->ring_pos, p, first);
    memcpy(s->ring, p + first, n - first);
    s->ring_pos = (s->ring_pos + n) % s->ring_cap;
    s->ring_len = s->ring_len + n < s->ring_cap ? s->ring_len + n : s->ring_cap;
}

/* Sends the ring's bytes in order (after the command ended) and frees it. */
static void ring_flush(struct stream *s, uint32_t id)
{
    size_t start = (s->ring_pos + s->ring_cap - s->ring_len) % (s->ring_cap ? s->ring_cap : 1);
    size_t left = s->ring_len;
    while (left) {
        size_t n = left < EPH_PROTO_CHUNK ? left : EPH_PROTO_CHUNK;
        for (size_t i = 0; i < n; i++)
            tx[EPH_PROTO_HEADER_SIZE + i] = s->ring[(start + i) % s->ring_cap];
        eph_proto_header_encode(tx, s->type, 0, id, (uint32_t)n);
        send_all(tx, EPH_PROTO_HEADER_SIZE + n);
        s->sent += n;
        start = (start + n) % s->ring_cap;
        left -= n;
    }
    free(s->ring);
    s->ring = NULL;
}

/* Reads what is available on one pipe: counts it all, forwards only what fits under the cap (the
 * rest goes to the tail's ring when there is one). Returns false at EOF (or on an error, which
 * ends the stream the same way). */
static bool stream_pump(struct stream *s, uint32_t id)
{
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = read(s->fd, tx + EPH_PROTO_HEADER_SIZE, EPH_PROTO_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        s->total += (uint64_t)n;
        uint64_t room = s->cap > s->sent ? s->cap - s->sent : 0;
        size_t fwd = (uint64_t)n < room ? (size_t)n : (size_t)room;
        if (fwd) {
            eph_proto_header_encode(tx, s->type, 0, id, (uint32_t)fwd);
            send_all(tx, EPH_PROTO_HEADER_SIZE + fwd);
            s->sent += fwd;
        }
        if (s->ring && (size_t)n > fwd)
            ring_put(s, tx + EPH_PROTO_HEADER_SIZE + fwd, (size_t)n - fwd);
        if (s->live_left && *s->live_left && (size_t)n > fwd) {
            /* Past the head, as it comes: its header goes just before the bytes, over the head's
             * bytes already sent. */
            size_t lv = (uint64_t)n - fwd < *s->live_left ? (size_t)n - fwd : (size_t)*s->live_left;
            eph_proto_header_encode(tx + fwd, s->live_type, 0, id, (uint32_t)lv);
            send_all(tx + fwd, EPH_PROTO_HEADER_SIZE + lv);
            *s->live_left -= lv;
        }
    }
    return true;
}

/* Builds the command's environment: the fixed base, then the request's entries, each replacing a
 * base entry of the same name. */
static int build_env(const struct eph_proto_exec *ex, const char **envp, size_t max)
{
    static char home[EPH_PROTO_MAX_PATH + 8];
    snprintf(home, sizeof(home), "HOME=%s", home_dir);
    const char *base[] = {home, "PATH=" DEFAULT_PATH, "LANG=C.UTF-8", "TMPDIR=/tmp"};
    size_t n = 0;
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        envp[n++] = base[i];
    /* With the broker tunnel on, every program finds the proxy the usual way. */
    const char *const *proxy = eph_gtunnel_env();
    for (size_t i = 0; proxy && proxy[i] && n + 1 < max; i++)
        envp[n++] = proxy[i];
    for (uint32_t i = 0; i < ex->env_count && n + 1 < max; i++) {
        const char *e = ex->env[i];
        size_t klen = (size_t)(strchr(e, '=') - e) + 1;
        bool replaced = false;
        for (size_t j = 0; j < n; j++) {
            if (strncmp(envp[j], e, klen) == 0) {
                envp[j] = e;
                replaced = true;
                break;
            }
        }
        if (!replaced)
            envp[n++] = e;
    }
    envp[n] = NULL;
    return 0;
}

/* A command that needs no shell (argv.h) is exec'd as /bin/sh would exec it: its first word as a
 * path when it has a slash, else the first match in the command's PATH, with PWD set as the shell
 * sets it (the working directory, physical). Returns only when that was not done: a PWD the
 * caller set, a PATH with a relative or empty entry, or an exec that failed otherwise than "not
 * here" - then the shell runs the command, and reports a failure in its own words. */
static void exec_direct(const char *command, const char *const *envp)
{
    static char words[4096];
    static char *argv[EPH_GUEST_ARGV_MAX + 1];
    static const char *env[EPH_PROTO_MAX_ENV + 32];
    static char pwd[EPH_PROTO_MAX_PATH + 8] = "PWD=";
    static char full[EPH_PROTO_MAX_PATH + 256];
    if (!eph_guest_argv_split(command, words, sizeof(words), argv))
        return;
    const char *path = NULL;
    size_t n = 0;
    for (; envp[n]; n++) {
        if (strncmp(envp[n], "PWD=", 4) == 0 || n + 2 >= sizeof(env) / sizeof(env[0]))
            return;
        if (strncmp(envp[n], "PATH=", 5) == 0)
            path = envp[n] + 5;
        env[n] = envp[n];
    }
    if (!getcwd(pwd + 4, sizeof(pwd) - 4))
        return;
    env[n++] = pwd;
    env[n] = NULL;
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, (char *const *)env);
        return;
    }
    for (const char *d = path; d && *d;) {
        const char *end = strchr(d, ':');
        size_t dl = end ? (size_t)(end - d) : strlen(d);
        if (dl == 0 || d[0] != '/' ||
            (size_t)snprintf(full, sizeof(full), "%.*s/%s", (int)dl, d, argv[0]) >= sizeof(full))
            return;
        execve(full, argv, (char *const *)env);
        if (errno != ENOENT && errno != ENOTDIR)
            return;
        d = end ? end + 1 : d + dl;
    }
}

static void __attribute__((noreturn))
exec_child(const struct eph_proto_exec *ex, const char *const *envp, int out_w, int err_w)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    /* Every command is the OOM killer's first choice, before init (which the host set to -1000
     * where it could, and the fork copied) and before anything else on the host. Raising needs
     * no privilege. Dumpable first (this copy's own memory: init's stays not dumpable), or
     * /proc/self would be root's and not writable. */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (adj >= 0) {
        if (write(adj, "1000", 4) != 4)
            dprintf(2, "ephemeral-init: cannot reset oom_score_adj: %s\n", strerror(errno));
        close(adj);
    }
    /* Under the keeper the command is still root in its real and saved uid: worker in all. */
    int hc = eph_guest_harden_child();
    if (hc) {
        dprintf(err_w, "ephemeral-init: cannot become worker: %s\n", strerror(-hc));
        _exit(126);
    }
    setpgid(0, 0);
    umask(022);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0)
        dup2(null, 0);
    dup2(out_w, 1);
    dup2(err_w, 2);
    const char *cwd = ex->cwd[0] ? ex->cwd : scratch_dir;
    if (chdir(cwd) != 0) {
        dprintf(2, "ephemeral-init: cannot enter '%s': %s\n", cwd, strerror(errno));
        _exit(126);
    }
    exec_direct(ex->command, envp);
    char *argv[] = {"sh", "-c", (char *)ex->command, NULL};
    execve("/bin/sh", argv, (char *const *)envp);
    dprintf(2, "ephemeral-init: cannot run /bin/sh: %s\n", strerror(errno));
    _exit(127);
}

/* The command starts with clone(CLONE_VFORK) and without CLONE_VM: init sleeps until the child
 * has exec'd or exited (so its process group is set before init goes on), and the child has a copy
 * of init's memory of its own, because it must make that memory dumpable to reset its
 * oom_score_adj (exec_child): doing so on a shared memory would open init's to the worker's
 * other processes for that moment. init is small and static, so the copy is cheap. What
 * exec_child changes is the child's own (signal mask and dispositions, process group, umask,
 * descriptors, cwd). */
struct spawn_arg {
    const struct eph_proto_exec *ex;
    const char *const *envp;
    int out_w, err_w;
};

static int spawn_child(void *arg)
{
    const struct spawn_arg *a = arg;
    exec_child(a->ex, a->envp, a->out_w, a->err_w);
}

static pid_t spawn(const struct eph_proto_exec *ex, const char *const *envp, int out_w, int err_w)
{
    static char stack[64 * 1024] __attribute__((aligned(16)));
    struct spawn_arg a = {ex, envp, out_w, err_w};
    return clone(spawn_child, stack + sizeof(stack), CLONE_VFORK | SIGCHLD, &a);
}

static bool channel_read(void);
static void channel_drain(bool busy);

/* Runs the command's streams and the tunnel until it has exited and its pipes are drained (a
 * grace after its exit), killing its group at the timeout. Returns its wait status. */
static int exec_wait(uint32_t id, const struct eph_proto_exec *ex, pid_t pid, struct stream *so,
                     struct stream *se, bool *out_open, bool *err_open, bool *timed_out)
{
    bool exited = false;
    int status = 0;
    uint64_t start = mono_ms();
    uint64_t deadline = ex->timeout_ms ? start + ex->timeout_ms : 0;
    uint64_t drain_until = 0;

    /* Tunnel frames that came in the same read as this request. */
    channel_drain(true);
    while (!exited || ((*out_open || *err_open) && mono_ms() < drain_until)) {
        struct pollfd pfd[4 + EPH_GTUNNEL_MAX_POLLFDS] = {
            {.fd = *out_open ? so->fd : -1, .events = POLLIN},
            {.fd = *err_open ? se->fd : -1, .events = POLLIN},
            {.fd = sig_fd, .events = POLLIN},
            /* events 0 without the tunnel: only hangup and error (no request comes while this
             * one runs). With it, the host's tunnel frames are read while the command runs,
             * since the command is usually the proxy's client. */
            {.fd = CHANNEL_FD, .events = eph_gtunnel_on() ? POLLIN : 0},
        };
        size_t nt = eph_gtunnel_pollfds(pfd + 4, EPH_GTUNNEL_MAX_POLLFDS);
        int wait_ms = -1;
        uint64_t now = mono_ms();
        uint64_t until = exited ? drain_until : (*timed_out ? 0 : deadline);
        if (until)
            wait_ms = until > now ? (int)(until - now) : 0;
        int n = poll(pfd, 4 + nt, wait_ms);
        if (n < 0 && errno != EINTR)
            break;
        if (pfd[3].revents & POLLIN) {
            if (!channel_read())
                die_all(0);
            channel_drain(true);
        } else if (pfd[3].revents & (POLLHUP | POLLERR)) {
            die_all(0);
        }
        if (n > 0)
            eph_gtunnel_service(pfd + 4, nt);
        if (pfd[0].revents)
            *out_open = stream_pump(so, id);
        if (pfd[1].revents)
            *err_open = stream_pump(se, id);
        if (pfd[2].revents && reap(pid, &status)) {
            exited = true;
            drain_until = mono_ms() + DRAIN_GRACE_MS;
        }
        if (!exited && !*timed_out && deadline && mono_ms() >= deadline) {
            *timed_out = true;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
        }
    }
    return status;
}

static void do_exec(uint32_t id, const uint8_t *payload, size_t len)
{
    static struct eph_proto_exec ex;
    static const char *envp[EPH_PROTO_MAX_ENV + 16];
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    struct stream so = {.fd = -1}, se = {.fd = -1};

    int rc = eph_proto_exec_decode(payload, len, &ex);
    if (rc) {
        reply_error(id, rc, "malformed exec request");
        return;
    }
    build_env(&ex, envp, sizeof(envp) / sizeof(envp[0]));
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
        reply_error(id, -errno, "pipe failed");
        goto out;
    }
    if (stream_init(&so, out[0], EPH_PROTO_EXEC_STDOUT, ex.stdout_cap) ||
        stream_init(&se, err[0], EPH_PROTO_EXEC_STDERR, ex.stderr_cap)) {
        reply_error(id, -ENOMEM, "no memory for the output's tail");
        goto out;
    }
    uint64_t live_left = ex.live_cap;
    so.live_type = EPH_PROTO_EXEC_LIVE_STDOUT;
    se.live_type = EPH_PROTO_EXEC_LIVE_STDERR;
    so.live_left = se.live_left = &live_left;
    uint64_t t0 = mono_us();
    pid_t pid = spawn(&ex, envp, out[1], err[1]);
    if (pid < 0) {
        reply_error(id, -errno, "fork failed");
        goto out;
    }
    /* The child has set its own group before exec (init slept until then); this one normally
     * fails with EACCES after the exec and is kept as the belt to that brace. */
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    out[1] = err[1] = -1;
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);

    bool out_open = true, err_open = true, timed_out = false;
    int status = exec_wait(id, &ex, pid, &so, &se, &out_open, &err_open, &timed_out);
    /* What is left in the pipes now belongs to no one: read what is there, then stop. */
    if (out_open)
        stream_pump(&so, id);
    if (err_open)
        stream_pump(&se, id);
    if (so.ring)
        ring_flush(&so, id);
    if (se.ring)
        ring_flush(&se, id);

    struct eph_proto_exit e = {0};
    e.duration_us = mono_us() - t0;
    if (WIFSIGNALED(status))
        e.signal = (uint32_t)WTERMSIG(status);
    else
        e.exit_code = WEXITSTATUS(status);
    e.flags = (timed_out ? EPH_PROTO_EXIT_TIMED_OUT : 0) |
              (so.total > so.sent ? EPH_PROTO_EXIT_STDOUT_TRUNCATED : 0) |
              (se.total > se.sent ? EPH_PROTO_EXIT_STDERR_TRUNCATED : 0);
    e.stdout_total = so.total;
    e.stderr_total = se.total;
    int flen = eph_proto_exit_encode(tx_small, sizeof(tx_small), id, &e);
    if (flen > 0)
        send_all(tx_small, (size_t)flen);
out:
    free(so.ring);
    free(se.ring);
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
}

/* ---- files ------------------------------------------------------------------------------ */

/* Opens path component by component under the scratch directory (or / for an absolute path),
 * refusing symlinks at every step, so a link planted by a command cannot redirect the write.
 * The path was already checked for "..". Creates missing parents when asked. */
static int open_beneath(const char *path, int flags, mode_t mode, bool mkparents)
{
    char buf[EPH_PROTO_MAX_PATH + 1];
    size_t n = strlen(path);
    if (n > EPH_PROTO_MAX_PATH)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    char *p = buf;
    EPH_AUTOCLOSE int dfd = open(*p == '/' ? "/" : scratch_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    if (*p == '/')
        p++;
    for (;;) {
        char *slash = strchr(p, '/');
        if (!slash) {
            int fd = openat(dfd, p, flags | O_NOFOLLOW | O_CLOEXEC, mode);
            return fd < 0 ? -errno : fd;
        }
        *slash = '\0';
        if (mkparents && mkdirat(dfd, p, 0755) != 0 && errno != EEXIST)
            return -errno;
        int nfd = openat(dfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0)
            return -errno;
        /* O_NOFOLLOW with O_DIRECTORY refuses a link to a directory on Linux, but gVisor follows
         * it: check that the name is a directory itself, the very one opened (a link swapped in
         * after the open shows as a link, or as another inode). */
        struct stat opened, named;
        if (fstat(nfd, &opened) != 0 || fstatat(dfd, p, &named, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(named.st_mode) || opened.st_dev != named.st_dev ||
            opened.st_ino != named.st_ino) {
            close(nfd);
            return -ENOTDIR;
        }
        close(dfd);
        dfd = nfd;
        p = slash + 1;
    }
}

static void do_write_file(uint32_t id, const uint8_t *payload, size_t len)
{
    struct eph_proto_write_file wf;
    if (eph_proto_write_file_decode(payload, len, &wf)) {
        reply_error(id, -EPROTO, "malformed write_file request");
        return;
    }
    int flags = O_WRONLY | O_CREAT | ((wf.flags & EPH_PROTO_WRITE_APPEND) ? O_APPEND : O_TRUNC);
    int fd = open_beneath(wf.path, flags, (mode_t)(wf.mode & 0777), true);
    if (fd < 0) {
        reply_error(id, fd, "cannot open the file");
        return;
    }
    /* Creation used the umask; an explicit mode is what the caller asked for. */
    if (!(wf.flags & EPH_PROTO_WRITE_APPEND))
        fchmod(fd, (mode_t)(wf.mode & 0777));
    size_t off = 0;
    while (off < wf.len) {
        ssize_t w = write(fd, wf.data + off, wf.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            reply_error(id, -e, "cannot write the file");
            return;
        }
        off += (size_t)w;
    }
    if (close(fd) != 0) {
        reply_error(id, -errno, "cannot write the file");
        return;
    }
    reply_empty(EPH_PROTO_OK, id, NULL, 0);
}

static void do_read_file(uint32_t id, const uint8_t *payload, size_t len)
{
    struct eph_proto_read_file rf;
    if (eph_proto_read_file_decode(payload, len, &rf)) {
        reply_error(id, -EPROTO, "malformed read_file request");
        return;
    }
    EPH_AUTOCLOSE int fd = open_beneath(rf.path, O_RDONLY | O_NONBLOCK, 0, false);
    if (fd < 0) {
        reply_error(id, fd, "cannot open the file");
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        reply_error(id, -EINVAL, "not a regular file");
        return;
    }
    if ((uint64_t)st.st_size > rf.cap) {
        reply_error(id, -EMSGSIZE, "the file is larger than the cap");
        return;
    }
    uint64_t total = 0;
    for (;;) {
        ssize_t n = EPH_RETRY_EINTR(read(fd, tx + EPH_PROTO_HEADER_SIZE, EPH_PROTO_CHUNK));
        if (n < 0) {
            reply_error(id, -errno, "cannot read the file");
            return;
        }
        if (n == 0)
            break;
        /* The file may grow while it is read: the cap holds for what is sent, not what stat saw. */
        if (total + (uint64_t)n > rf.cap) {
            reply_error(id, -EMSGSIZE, "the file is larger than the cap");
            return;
        }
        total += (uint64_t)n;
        eph_proto_header_encode(tx, EPH_PROTO_FILE_DATA, 0, id, (uint32_t)n);
        send_all(tx, EPH_PROTO_HEADER_SIZE + (size_t)n);
    }
    uint8_t sz[8];
    for (int i = 0; i < 8; i++)
        sz[i] = (uint8_t)(total >> (8 * i));
    reply_empty(EPH_PROTO_FILE_END, id, sz, sizeof(sz));
}

/* ---- list_files --------------------------------------------------------------------------- */

struct walk {
    uint32_t id;
    uint32_t max_entries, max_depth;
    uint32_t sent;
    bool truncated;
    char path[EPH_PROTO_MAX_PATH + 1]; /* the entry's path relative to the scratch directory */
};

static bool walk_send(struct walk *w, uint32_t kind, uint64_t size, const char *target)
{
    if (w->sent >= w->max_entries) {
        w->truncated = true;
        return false;
    }
    struct eph_proto_file_entry e = {.kind = kind, .size = size, .path = w->path, .target = target};
    int len = eph_proto_file_entry_encode(tx, sizeof(tx), w->id, &e);
    if (len < 0) {
        w->truncated = true; /* a name the listing cannot carry (not UTF-8, control bytes) */
        return true;
    }
    send_all(tx, (size_t)len);
    w->sent++;
    return true;
}

/* Lists the directory dfd (whose path is w->path[0..plen)), at depth (1 = the scratch directory's
 * own entries). Never follows a symlink: each name is looked at with AT_SYMLINK_NOFOLLOW, and a
 * directory is entered only through openat(O_NOFOLLOW) checked to be that very inode. Returns false
 * once the entry cap is reached. dfd is consumed. */
static bool walk_dir(struct walk *w, int dfd, size_t plen, uint32_t depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return true;
    }
    bool go = true;
    struct dirent *de;
    while (go && (de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        size_t nl = strlen(name);
        if (plen + (plen ? 1 : 0) + nl > EPH_PROTO_MAX_PATH) {
            w->truncated = true;
            continue;
        }
        size_t at = plen;
        if (plen)
            w->path[at++] = '/';
        memcpy(w->path + at, name, nl + 1);
        struct stat st;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            w->path[plen] = '\0';
            continue;
        }
        if (S_ISREG(st.st_mode)) {
            go = walk_send(w, EPH_PROTO_KIND_FILE, (uint64_t)st.st_size, "");
        } else if (S_ISLNK(st.st_mode)) {
            char target[EPH_PROTO_MAX_PATH + 1];
            ssize_t tn = readlinkat(dirfd(d), name, target, EPH_PROTO_MAX_PATH);
            if (tn > 0) {
                target[tn] = '\0';
                go = walk_send(w, EPH_PROTO_KIND_SYMLINK, (uint64_t)tn, target);
            }
        } else if (S_ISDIR(st.st_mode)) {
            go = walk_send(w, EPH_PROTO_KIND_DIR, 0, "");
            if (go && depth >= w->max_depth) {
                w->truncated = true;
            } else if (go) {
                int nfd = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct stat opened;
                if (nfd >= 0 && (fstat(nfd, &opened) != 0 || opened.st_dev != st.st_dev ||
                                 opened.st_ino != st.st_ino)) {
                    close(nfd); /* swapped for something else between the stat and the open */
                    nfd = -1;
                }
                if (nfd >= 0)
                    go = walk_dir(w, nfd, at + nl, depth + 1);
            }
        } /* sockets, fifos, devices: not outputs */
        w->path[plen] = '\0';
    }
    closedir(d);
    return go;
}

static struct walk walk_state;

static void do_list_files(uint32_t id, const uint8_t *payload, size_t len)
{
    struct walk *w = &walk_state;
    memset(w, 0, sizeof(*w));
    w->id = id;
    if (eph_proto_list_files_decode(payload, len, &w->max_entries, &w->max_depth)) {
        reply_error(id, -EPROTO, "malformed list_files request");
        return;
    }
    int dfd = open(scratch_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        reply_error(id, -errno, "cannot open the scratch directory");
        return;
    }
    walk_dir(w, dfd, 0, 1);
    int n = eph_proto_list_end_encode(tx_small, sizeof(tx_small), id,
                                      w->truncated ? EPH_PROTO_LIST_TRUNCATED : 0, w->sent);
    if (n > 0)
        send_all(tx_small, (size_t)n);
}

/* ---- main loop -------------------------------------------------------------------------- */

static void dispatch(const struct eph_proto_frame *f)
{
    switch (f->hdr.type) {
    case EPH_PROTO_PING:
        reply_empty(EPH_PROTO_PONG, f->hdr.id, f->payload, f->hdr.length);
        break;
    case EPH_PROTO_EXEC:
        do_exec(f->hdr.id, f->payload, f->hdr.length);
        break;
    case EPH_PROTO_WRITE_FILE:
        do_write_file(f->hdr.id, f->payload, f->hdr.length);
        break;
    case EPH_PROTO_READ_FILE:
        do_read_file(f->hdr.id, f->payload, f->hdr.length);
        break;
    case EPH_PROTO_LIST_FILES:
        do_list_files(f->hdr.id, f->payload, f->hdr.length);
        break;
    case EPH_PROTO_TUNNEL_LISTEN: {
        uint16_t port;
        uint32_t max;
        int rc = eph_proto_tunnel_listen_decode(f->payload, f->hdr.length, &port, &max);
        if (!rc)
            rc = eph_gtunnel_listen(port, max);
        if (rc)
            reply_error(f->hdr.id, rc, "cannot open the proxy listener");
        else
            reply_empty(EPH_PROTO_OK, f->hdr.id, NULL, 0);
        break;
    }
    case EPH_PROTO_SHUTDOWN:
        kill(-1, SIGKILL);
        reap(0, NULL);
        reply_empty(EPH_PROTO_OK, f->hdr.id, NULL, 0);
        die_all(0);
    default:
        reply_error(f->hdr.id, -EPROTO, "unexpected frame type");
        break;
    }
}

static bool is_tunnel_frame(uint8_t type)
{
    return type == EPH_PROTO_TUNNEL_DATA || type == EPH_PROTO_TUNNEL_WINDOW ||
           type == EPH_PROTO_TUNNEL_CLOSE;
}

/* Reads what the channel has into rx_raw (only once what was read before is decoded). Returns
 * false when the host closed the channel. */
static bool channel_read(void)
{
    if (rx_off < rx_len)
        return true;
    ssize_t n = read(CHANNEL_FD, rx_raw, sizeof(rx_raw));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0)
        return false;
    rx_off = 0;
    rx_len = (size_t)n;
    return true;
}

/* Decodes and serves every frame read so far. busy: an exec runs, so only tunnel frames may come;
 * a request is answered with an error. An exec dispatched from here drains the rest itself (the
 * state is shared), so the loop simply finds nothing left when it returns. */
static void channel_drain(bool busy)
{
    while (rx_off < rx_len) {
        struct eph_proto_frame f;
        size_t used = 0;
        int rc = eph_proto_decode(&dec, rx_raw + rx_off, rx_len - rx_off, &used, &f);
        rx_off += used;
        if (rc < 0) {
            /* The stream is out of step: say so once, drop what was read and start over on
             * the next read, rather than die on garbage. */
            reply_error(0, rc, "bad frame");
            eph_proto_decoder_reset(&dec);
            rx_off = rx_len;
            return;
        }
        if (rc != 1)
            continue;
        if (is_tunnel_frame(f.hdr.type))
            eph_gtunnel_frame(&f);
        else if (busy)
            reply_error(f.hdr.id, -EBUSY, "a request is already in flight");
        else
            dispatch(&f);
    }
}

/* gvisor's start, as root before the keeper is made: the run directory and the two directories
 * of the commands (worker's; home private), the channel moved from stdin to fd 3, and stderr to
 * /dev/null (the commands get their own). fds 0 and 1 stay open: when the last guest reference to
 * an imported host socket goes, the Sentry shuts it down, and they are the channel. Done here
 * rather than by the image's shell, so that no other program runs before the init (and a start
 * costs no shell, mkdir and chown processes). */
static int make_dirs(const char *run, const char *scratch, const char *home)
{
    umask(022);
    if (mkdir(run, 0755) != 0 || mkdir(scratch, 0755) != 0 || mkdir(home, 0700) != 0 ||
        chown(scratch, 1000, 1000) != 0 || chown(home, 1000, 1000) != 0)
        return -errno;
    if (dup2(0, CHANNEL_FD) != CHANNEL_FD)
        return -errno;
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 2) != 2)
        return -errno;
    close(null);
    return 0;
}

int main(int argc, char **argv)
{
    /* Started by a kernel (the microvm backend): build the sandbox first (guest/vm.c). */
    if (eph_guest_vm_started_by_kernel(argc)) {
        argv = eph_guest_vm_setup();
        argc = 4;
    }
    bool keeper = (argc == 4 || argc == 6) && strcmp(argv[1], "--keeper") == 0;
    if (keeper) {
        argc--;
        argv++;
    }
    if (keeper && argc == 5 && strcmp(argv[1], "--make-dirs") == 0 && argv[2][0] == '/') {
        int mrc = make_dirs(argv[2], argv[3], argv[4]);
        if (mrc) {
            dprintf(2, "ephemeral-init: cannot make the run directories: %s\n", strerror(-mrc));
            return 2;
        }
        argc -= 2;
        argv += 2;
    }
    if (argc != 3 || argv[1][0] != '/' || argv[2][0] != '/') {
        dprintf(2, "usage: ephemeral-init [--keeper] SCRATCH_DIR HOME_DIR (channel on fd 3)\n");
        return 2;
    }
    scratch_dir = argv[1];
    home_dir = argv[2];
    const char *what;
    int hrc = keeper ? eph_guest_harden(&what) : 0;
    if (hrc) {
        dprintf(2, "ephemeral-init: %s: %s\n", what, strerror(-hrc));
        return 2;
    }
    /* Commands run as init's effective uid: keep them out of init's memory and fds. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (fcntl(CHANNEL_FD, F_SETFD, FD_CLOEXEC) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    sig_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sig_fd < 0)
        return 2;
    if (chdir(scratch_dir) != 0)
        return 2;
    eph_proto_decoder_init(&dec, EPH_PROTO_FROM_HOST, rx_payload, sizeof(rx_payload));
    eph_gtunnel_init(send_all);

    int hl = eph_proto_hello_encode(tx_small, sizeof(tx_small), (uint32_t)getpid());
    if (hl > 0)
        send_all(tx_small, (size_t)hl);

    for (;;) {
        struct pollfd pfd[2 + EPH_GTUNNEL_MAX_POLLFDS] = {{.fd = CHANNEL_FD, .events = POLLIN},
                                                          {.fd = sig_fd, .events = POLLIN}};
        size_t nt = eph_gtunnel_pollfds(pfd + 2, EPH_GTUNNEL_MAX_POLLFDS);
        if (poll(pfd, 2 + nt, -1) < 0) {
            if (errno == EINTR)
                continue;
            die_all(1);
        }
        if (pfd[1].revents)
            reap(0, NULL);
        eph_gtunnel_service(pfd + 2, nt);
        if (!pfd[0].revents)
            continue;
        if (!channel_read())
            die_all(0); /* the host closed the channel */
        channel_drain(false);
    }
}
