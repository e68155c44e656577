/*
 * snapshot.c - the microvm backend's saved machines. See snapshot.h.
 *
 * The saving QEMU is ours (the guest in it has run nothing but ephemeral-init), yet its monitor's
 * answers are read as any peer's are: lines capped, parsed, and a deadline over the whole
 * conversation.
 */
#include "sandbox/microvm/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/text.h"

/* A monitor's line: its answers here are small; an event or a greeting is a few hundred bytes. */
#define QMP_LINE_MAX 65536u
/* How often the migration's state is asked for while it runs. */
#define QMP_POLL_MS 10

int eph_vm_snapshot_key(const char *text, const char *const *files, size_t nfiles, char key[17])
{
    struct eph_buf b;
    eph_buf_init(&b, 1u << 20);
    int rc = eph_buf_append(&b, text, strlen(text));
    for (size_t i = 0; !rc && i < nfiles; i++) {
        struct stat st;
        if (stat(files[i], &st) != 0) {
            rc = -errno;
            break;
        }
        char id[160];
        int n =
            snprintf(id, sizeof(id), "\n%llu:%llu:%lld:%lld.%09ld", (unsigned long long)st.st_dev,
                     (unsigned long long)st.st_ino, (long long)st.st_size,
                     (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
        rc = eph_buf_append(&b, id, (size_t)n);
    }
    if (!rc) {
        char hex[65];
        eph_sha256_hex(b.data, b.len, hex);
        memcpy(key, hex, 16);
        key[16] = '\0';
    }
    eph_buf_release(&b);
    return rc;
}

static int wait_readable(int fd, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = eph_clock_mono_ns();
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)((deadline_ns - now) / 1000000u) + 1);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

int eph_vm_wait_parked(int chan, uint64_t deadline_ns)
{
    static const char want[] = EPH_VM_PARKED_LINE;
    size_t got = 0;
    while (got < sizeof(want) - 1) {
        int rc = wait_readable(chan, deadline_ns);
        if (rc)
            return rc;
        char c[sizeof(want)];
        /* Never past the line: nothing else is expected, and what is read is compared. */
        ssize_t n = read(chan, c, sizeof(want) - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EPIPE;
        if (memcmp(c, want + got, (size_t)n) != 0)
            return -EPROTO;
        got += (size_t)n;
    }
    return 0;
}

/* ---- the monitor ------------------------------------------------------------------------ */

struct qmp {
    int fd;
    uint64_t deadline_ns;
    char buf[QMP_LINE_MAX];
    size_t len; /* bytes in buf */
};

/* The next line the monitor sends, parsed (the caller decrefs), or NULL with *rc set. */
static json_t *qmp_read(struct qmp *q, int *rc)
{
    for (;;) {
        char *nl = memchr(q->buf, '\n', q->len);
        if (nl) {
            size_t line = (size_t)(nl - q->buf) + 1;
            json_error_t err;
            json_t *v = json_loadb(q->buf, line, JSON_REJECT_DUPLICATES, &err);
            memmove(q->buf, q->buf + line, q->len - line);
            q->len -= line;
            if (!json_is_object(v)) {
                json_decref(v);
                *rc = -EPROTO;
                return NULL;
            }
            return v;
        }
        if (q->len == sizeof(q->buf)) {
            *rc = -EMSGSIZE;
            return NULL;
        }
        if ((*rc = wait_readable(q->fd, q->deadline_ns)))
            return NULL;
        ssize_t n = read(q->fd, q->buf + q->len, sizeof(q->buf) - q->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *rc = n < 0 ? -errno : -EPIPE;
            return NULL;
        }
        q->len += (size_t)n;
    }
}

/* Sends one command (with a descriptor when fd >= 0) and returns its answer's "return" value
 * (the caller decrefs the object *whole), skipping events; an "error" answer is -EIO with QEMU's
 * description in why. */
static int qmp_call(struct qmp *q, const char *cmd, int fd, json_t **whole, json_t **ret, char *why,
                    size_t whylen)
{
    size_t len = strlen(cmd);
    struct iovec iov = {.iov_base = (void *)cmd, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&u, 0, sizeof(u));
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof(u.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(q->fd, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)len)
        return n < 0 ? -errno : -EIO;
    for (;;) {
        int rc = 0;
        json_t *v = qmp_read(q, &rc);
        if (!v)
            return rc;
        json_t *r = json_object_get(v, "return");
        if (r) {
            *whole = v;
            *ret = r;
            return 0;
        }
        json_t *e = json_object_get(v, "error");
        if (e) {
            const char *desc = json_string_value(json_object_get(e, "desc"));
            eph_text_format_cut(why, whylen, "%s", desc ? desc : "an error without a description");
            json_decref(v);
            return -EIO;
        }
        json_decref(v); /* an event */
    }
}

static int qmp_simple(struct qmp *q, const char *cmd, int fd, char *why, size_t whylen)
{
    json_t *whole = NULL, *ret = NULL;
    int rc = qmp_call(q, cmd, fd, &whole, &ret, why, whylen);
    json_decref(whole);
    return rc;
}

int eph_vm_qmp_save(int qmp_fd, int state_fd, uint64_t deadline_ns, char *why, size_t whylen)
{
    struct qmp *q = malloc(sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->fd = qmp_fd;
    q->deadline_ns = deadline_ns;
    q->len = 0;
    why[0] = '\0';
    int rc = 0;
    json_t *greeting = qmp_read(q, &rc);
    if (greeting && !json_object_get(greeting, "QMP"))
        rc = -EPROTO;
    json_decref(greeting);
    if (!rc)
        rc = qmp_simple(q, "{\"execute\": \"qmp_capabilities\"}\n", -1, why, whylen);
    /* Unthrottled (the default caps the stream's rate), and the last pass's pause unbounded:
     * nothing runs in the guest but an init waiting for the host. */
    if (!rc)
        rc = qmp_simple(q,
                        "{\"execute\": \"migrate-set-parameters\", \"arguments\": "
                        "{\"max-bandwidth\": 68719476736, \"downtime-limit\": 2000}}\n",
                        -1, why, whylen);
    if (!rc)
        rc = qmp_simple(q, "{\"execute\": \"getfd\", \"arguments\": {\"fdname\": \"snapshot\"}}\n",
                        state_fd, why, whylen);
    if (!rc)
        rc =
            qmp_simple(q, "{\"execute\": \"migrate\", \"arguments\": {\"uri\": \"fd:snapshot\"}}\n",
                       -1, why, whylen);
    while (!rc) {
        json_t *whole = NULL, *ret = NULL;
        rc = qmp_call(q, "{\"execute\": \"query-migrate\"}\n", -1, &whole, &ret, why, whylen);
        if (rc)
            break;
        const char *status = json_string_value(json_object_get(ret, "status"));
        if (status && strcmp(status, "completed") == 0) {
            json_decref(whole);
            break;
        }
        if (!status || strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0) {
            const char *desc = json_string_value(json_object_get(ret, "error-desc"));
            eph_text_format_cut(why, whylen, "migration %s%s%s",
                                status ? status : "without a state", desc ? ": " : "",
                                desc ? desc : "");
            rc = -EIO;
        }
        json_decref(whole);
        if (rc)
            break;
        if (eph_clock_mono_ns() >= deadline_ns) {
            rc = -ETIMEDOUT;
            break;
        }
        struct timespec pause = {0, QMP_POLL_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
    /* Saved or not, this QEMU's work is over. (Its exit may close the monitor before it
     * answers: the caller reaps it either way.) */
    if (!rc)
        (void)qmp_simple(q, "{\"execute\": \"quit\"}\n", -1, why, whylen);
    free(q);
    return rc;
}

/* ---- a restore's first words ------------------------------------------------------------ */

int eph_vm_resume_line(char *buf, size_t cap, const char *run_dir,
                       const struct eph_sandbox_limits *l)
{
    uint8_t seed[32], id[16];
    int rc = eph_random_bytes(seed, sizeof(seed));
    if (!rc)
        rc = eph_random_bytes(id, sizeof(id));
    if (rc)
        return rc;
    char seed_hex[65], id_hex[33];
    for (size_t i = 0; i < sizeof(seed); i++)
        snprintf(seed_hex + 2 * i, 3, "%02x", seed[i]);
    /* A version 4 UUID, as the kernel makes its own. */
    id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);
    id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
    for (size_t i = 0; i < sizeof(id); i++)
        snprintf(id_hex + 2 * i, 3, "%02x", id[i]);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (cap > EPH_VM_RESUME_MAX)
        cap = EPH_VM_RESUME_MAX;
    int n = snprintf(
        buf, cap,
        EPH_PROTO_VM_RESUME_WORD " ephemeral.run=%s ephemeral.disk_mib=%u "
                                 "ephemeral.nofile=%u ephemeral.fsize=%llu ephemeral.nproc=%u "
                                 "ephemeral.seed=%s ephemeral.time=%llu "
                                 "ephemeral.boot_id=%.8s-%.4s-%.4s-%.4s-%.12s\n",
        run_dir, l->disk_mib, l->nofile, (unsigned long long)l->fsize_bytes, l->pids + 16u,
        seed_hex, (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec,
        id_hex, id_hex + 8, id_hex + 12, id_hex + 16, id_hex + 20);
    explicit_bzero(seed, sizeof(seed));
    explicit_bzero(seed_hex, sizeof(seed_hex));
    if (n < 0 || (size_t)n >= cap)
        return -ENAMETOOLONG;
    return n;
}

/* ---- the directory ---------------------------------------------------------------------- */

struct kept {
    char name[NAME_MAX + 1];
    struct timespec mtime;
};

static int newest_first(const void *a, const void *b)
{
    const struct kept *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* "<key>.state.tmp-<pid>-<n>" of a process that is gone. */
static bool tmp_orphaned(const char *name)
{
    const char *t = strstr(name, ".state.tmp-");
    if (!t)
        return false;
    char *end;
    long pid = strtol(t + strlen(".state.tmp-"), &end, 10);
    if (pid <= 0 || *end != '-')
        return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int eph_vm_snapshot_prune(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    struct kept *all = NULL;
    size_t n = 0, cap = 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (tmp_orphaned(e->d_name)) {
            if (unlinkat(dfd, e->d_name, 0) == 0)
                removed++;
            continue;
        }
        if (len < 7 || strcmp(e->d_name + len - 6, ".state") != 0)
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            struct kept *more = realloc(all, ncap * sizeof(*all));
            if (!more)
                break;
            all = more;
            cap = ncap;
        }
        snprintf(all[n].name, sizeof(all[n].name), "%s", e->d_name);
        all[n].mtime = st.st_mtim;
        n++;
    }
    if (n > EPH_VM_SNAPSHOTS_KEPT) {
        qsort(all, n, sizeof(*all), newest_first);
        /* A restore that has the file open keeps reading it: removing it is safe. */
        for (size_t i = EPH_VM_SNAPSHOTS_KEPT; i < n; i++)
            if (unlinkat(dfd, all[i].name, 0) == 0)
                removed++;
    }
    free(all);
    closedir(d);
    return removed;
}
