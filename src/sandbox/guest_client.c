/*
 * guest_client.c - the worker end of the guest protocol. See guest_client.h.
 */
#include "sandbox/guest_client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "sandbox/guest_tunnel.h"

#define COMPONENT "guest"
/* How long past a command's own timeout the guest gets to report its end: it kills the group at
 * the timeout and drains for a moment; a guest that has not answered by then is broken. */
#define EXEC_GRACE_MS 5000u
#define DEFAULT_TIMEOUT_MS 60000u
#define MAX_TIMEOUT_MS (24u * 3600u * 1000u)

/* A frame from the guest, queued for the caller. */
struct eph_guest_frame {
    struct eph_guest_frame *next;
    struct eph_proto_header hdr;
    uint8_t payload[];
};

/* While this many payload bytes wait for the caller, the channel is not read: what a slow caller
 * makes the host hold is bounded by this plus one frame. */
#define QUEUE_MAX ((size_t)EPH_PROTO_MAX_PAYLOAD)

static void *channel_main(void *arg);

static void wake(struct eph_guest_client *c)
{
    static const char one = 1;
    if (c->wake[1] >= 0 && write(c->wake[1], &one, 1) < 0) {
        /* EAGAIN: the pipe is full, the thread will wake anyway. */
    }
}

int eph_guest_client_init(struct eph_guest_client *c, int fd)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->next_id = 1;
    c->wake[0] = c->wake[1] = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* One request at a time, each at most one frame; room for a second in case the guest answers
     * before it has read the whole of the first. */
    eph_buf_init(&c->requests, 2u * (EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD));
    c->rx_payload = malloc(EPH_PROTO_MAX_PAYLOAD);
    c->tx = malloc(EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD);
    if (!c->rx_payload || !c->tx) {
        c->broken = -ENOMEM;
        return -ENOMEM;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    eph_proto_decoder_init(&c->dec, EPH_PROTO_FROM_GUEST, c->rx_payload, EPH_PROTO_MAX_PAYLOAD);
    return 0;
}

/* Hands the channel to a thread of its own (the tunnel's streams need serving between calls).
 * Called by the caller, between calls: nothing else drives the channel meanwhile. */
static int thread_start(struct eph_guest_client *c)
{
    if (c->running)
        return 0;
    if (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return -errno;
    int rc = pthread_create(&c->thread, NULL, channel_main, c);
    if (rc) {
        for (int i = 0; i < 2; i++) {
            close(c->wake[i]);
            c->wake[i] = -1;
        }
        return -rc;
    }
    c->running = true;
    return 0;
}

void eph_guest_client_release(struct eph_guest_client *c)
{
    if (c->running) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_mutex_unlock(&c->mu);
        wake(c);
        pthread_join(c->thread, NULL);
        c->running = false;
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    for (int i = 0; i < 2; i++)
        if (c->wake[i] >= 0)
            close(c->wake[i]);
    c->wake[0] = c->wake[1] = -1;
    free(c->rx_payload);
    free(c->tx);
    c->rx_payload = c->tx = NULL;
    free(c->cur);
    c->cur = NULL;
    while (c->head) {
        struct eph_guest_frame *n = c->head->next;
        free(c->head);
        c->head = n;
    }
    c->tail = NULL;
    eph_buf_release(&c->requests);
    eph_guest_tunnel_free(c->tunnel);
    c->tunnel = NULL;
    if (!c->broken)
        c->broken = -EPIPE;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

int eph_guest_client_broken(struct eph_guest_client *c)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->broken;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Call with mu. */
static int fail(struct eph_guest_client *c, int rc)
{
    if (!c->broken) {
        c->broken = rc;
        EPH_DEBUG(COMPONENT, "channel broken: %s", strerror(-rc));
        pthread_cond_broadcast(&c->cv);
    }
    return rc;
}

static bool is_tunnel_type(uint8_t type)
{
    return type == EPH_PROTO_TUNNEL_OPEN || type == EPH_PROTO_TUNNEL_DATA ||
           type == EPH_PROTO_TUNNEL_WINDOW || type == EPH_PROTO_TUNNEL_CLOSE;
}

/* ---- the channel thread (everything here runs with mu held, but poll) ---------------------- */

/* Decodes what was read while the queue has room: tunnel frames go to the tunnel, the others to
 * the queue. */
static int decode_some(struct eph_guest_client *c)
{
    while (c->rpos < c->rlen && c->queued < QUEUE_MAX) {
        struct eph_proto_frame f;
        size_t used = 0;
        int rc = eph_proto_decode(&c->dec, c->rbuf + c->rpos, c->rlen - c->rpos, &used, &f);
        c->rpos += used;
        if (rc < 0)
            return fail(c, rc);
        if (rc == 0)
            continue;
        if (is_tunnel_type(f.hdr.type)) {
            if (!c->tunnel)
                return fail(c, -EPROTO);
            rc = eph_guest_tunnel_frame(c->tunnel, &f);
            if (rc)
                return fail(c, rc);
            continue;
        }
        struct eph_guest_frame *q = malloc(sizeof(*q) + f.hdr.length);
        if (!q)
            return fail(c, -ENOMEM);
        q->next = NULL;
        q->hdr = f.hdr;
        if (f.hdr.length)
            memcpy(q->payload, f.payload, f.hdr.length);
        if (c->tail)
            c->tail->next = q;
        else
            c->head = q;
        c->tail = q;
        c->queued += f.hdr.length + sizeof(*q);
        pthread_cond_broadcast(&c->cv);
    }
    return 0;
}

/* Reads once from the channel (it was reported readable). */
static int read_some(struct eph_guest_client *c)
{
    ssize_t r = read(c->fd, c->rbuf, sizeof(c->rbuf));
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (r < 0)
        return fail(c, errno == ECONNRESET ? -EPIPE : -errno);
    if (r == 0) {
        /* The guest is gone. Mid-frame, that is a protocol error; between frames, a hangup. */
        int rc = eph_proto_decoder_finish(&c->dec);
        return fail(c, rc ? rc : -EPIPE);
    }
    c->rpos = 0;
    c->rlen = (size_t)r;
    return 0;
}

/* What to write next: the buffer being written, or the next non-empty one. Both hold whole
 * frames only, and one is written to its end before the other starts: tunnel frames never split
 * a request frame, nor the other way round. */
static struct eph_buf *out_buf(struct eph_guest_client *c)
{
    if (c->out_src == 0) {
        if (c->requests.len)
            c->out_src = 1;
        else if (c->tunnel && eph_guest_tunnel_out(c->tunnel)->len)
            c->out_src = 2;
        else
            return NULL;
        c->out_off = 0;
    }
    return c->out_src == 1 ? &c->requests : eph_guest_tunnel_out(c->tunnel);
}

/* Writes what it can without blocking. */
static int write_out(struct eph_guest_client *c)
{
    struct eph_buf *q;
    while ((q = out_buf(c))) {
        /* MSG_NOSIGNAL: a dead guest must be an error here, not a SIGPIPE for the whole server. */
        ssize_t w =
            send(c->fd, q->data + c->out_off, q->len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == ENOTSOCK)
            w = write(c->fd, q->data + c->out_off, q->len - c->out_off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return 0;
        if (w < 0)
            return fail(c, errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno);
        c->out_off += (size_t)w;
        if (c->out_off == q->len) {
            eph_buf_reset(q);
            c->out_src = 0;
            c->out_off = 0;
        }
    }
    return 0;
}

/* One round of driving the channel: decodes what was read, then waits (at most timeout_ms; -1,
 * no limit) for what the channel, the wake pipe (on the thread) and the tunnel's streams allow,
 * and does it: writes requests and tunnel frames, reads, serves the streams. until_frame: return
 * at once when a frame is queued for the caller. Call with mu; it is released during the wait. */
static void channel_round(struct eph_guest_client *c, int timeout_ms, bool until_frame)
{
    struct pollfd pfd[2 + EPH_GUEST_TUNNEL_MAX_STREAMS];
    /* A broken channel is out of step: nothing more is read or relayed. */
    if (!c->broken)
        (void)decode_some(c);
    if (until_frame && (c->head || c->broken))
        return;
    bool may_read = !c->broken && c->rpos >= c->rlen && c->queued < QUEUE_MAX;
    bool may_write = !c->broken && out_buf(c) != NULL;
    pfd[0] = (struct pollfd){
        .fd = c->fd, .events = (short)((may_read ? POLLIN : 0) | (may_write ? POLLOUT : 0))};
    pfd[1] = (struct pollfd){.fd = c->wake[0], .events = POLLIN}; /* -1 (no thread): ignored */
    struct eph_guest_tunnel *t = c->broken ? NULL : c->tunnel;
    size_t nt = t ? eph_guest_tunnel_pollfds(t, pfd + 2, EPH_GUEST_TUNNEL_MAX_STREAMS) : 0;
    pthread_mutex_unlock(&c->mu);
    int n = poll(pfd, 2 + nt, timeout_ms);
    pthread_mutex_lock(&c->mu);
    if (n < 0) {
        if (errno != EINTR)
            (void)fail(c, -errno);
        return;
    }
    if (pfd[1].revents & POLLIN) {
        char drain[64];
        while (read(c->wake[0], drain, sizeof(drain)) > 0)
            ;
    }
    if (c->stop || c->broken)
        return;
    if (may_write && (pfd[0].revents & (POLLOUT | POLLERR | POLLHUP)) && write_out(c))
        return;
    if (may_read && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_some(c))
        return;
    /* The tunnel may have been detached meanwhile (a listen that failed). */
    if (nt && t == c->tunnel)
        eph_guest_tunnel_service(t, pfd + 2, nt);
}

static void *channel_main(void *arg)
{
    struct eph_guest_client *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop)
        channel_round(c, -1, false);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The caller found the stream out of step: nothing queued can be trusted any more, and its error
 * (met earlier in the stream than one the thread may have met since) is the one that sticks. Call
 * with mu. */
static int fail_caller(struct eph_guest_client *c, int rc)
{
    if (!c->caller_broke) {
        c->caller_broke = true;
        c->broken = 0;
        (void)fail(c, rc);
    }
    return c->broken;
}

static int locked_fail(struct eph_guest_client *c, int rc)
{
    pthread_mutex_lock(&c->mu);
    rc = fail_caller(c, rc);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Whether a call may start: an error the channel thread met is the caller's only once it has
 * taken the frames that came before it (they were in step). */
static int call_check(struct eph_guest_client *c)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->broken;
    if (rc && !c->caller_broke && c->head)
        rc = 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- the caller's side ------------------------------------------------------------------- */

/* Hands a whole request frame to the channel thread. */
static int send_all(struct eph_guest_client *c, const uint8_t *p, size_t n, uint64_t deadline_ns)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->broken && (c->caller_broke || !c->head) ? c->broken : 0;
    if (!rc) {
        rc = eph_buf_append(&c->requests, p, n);
        if (rc)
            rc = fail_caller(c, rc == -EMSGSIZE ? -EPROTO : rc);
    }
    pthread_mutex_unlock(&c->mu);
    if (!rc)
        wake(c);
    return rc;
}

/* The next frame from the guest that is not a tunnel frame, by the deadline. The payload is valid
 * until the next call. wake_ns (0: none), when it comes first, returns -EAGAIN with nothing
 * taken: the stream is still in step. */
static int next_frame(struct eph_guest_client *c, uint64_t deadline_ns, uint64_t wake_ns,
                      struct eph_proto_frame *f)
{
    uint64_t stop_ns = wake_ns && wake_ns < deadline_ns ? wake_ns : deadline_ns;
    struct timespec until = {.tv_sec = (time_t)(stop_ns / 1000000000u),
                             .tv_nsec = (long)(stop_ns % 1000000000u)};
    free(c->cur);
    c->cur = NULL;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!c->head) {
        if (c->broken) {
            rc = c->broken;
            break;
        }
        uint64_t now = eph_clock_mono_ns();
        if (now >= deadline_ns) {
            rc = fail_caller(c, -ETIMEDOUT);
            break;
        }
        if (now >= stop_ns) {
            rc = -EAGAIN;
            break;
        }
        if (c->running) {
            (void)pthread_cond_timedwait(&c->cv, &c->mu, &until);
        } else {
            /* No thread yet (no tunnel): the caller drives the channel itself. */
            uint64_t ms = (stop_ns - now + 999999u) / 1000000u;
            channel_round(c, ms > INT_MAX ? INT_MAX : (int)ms, true);
        }
    }
    bool was_full = false;
    if (c->head) {
        /* Frames that came before a break are still answers: hand them out first. */
        rc = 0;
        c->cur = c->head;
        c->head = c->cur->next;
        if (!c->head)
            c->tail = NULL;
        was_full = c->queued >= QUEUE_MAX;
        c->queued -= c->cur->hdr.length + sizeof(*c->cur);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return rc;
    if (was_full)
        wake(c); /* room again: the thread may read */
    f->hdr = c->cur->hdr;
    f->payload = c->cur->payload;
    return 0;
}

/* Reads a reply to request id; anything for another id is a broken guest. */
static int next_reply(struct eph_guest_client *c, uint32_t id, uint64_t deadline_ns,
                      uint64_t wake_ns, struct eph_proto_frame *f)
{
    int rc = next_frame(c, deadline_ns, wake_ns, f);
    if (rc)
        return rc;
    if (f->hdr.id != id) {
        EPH_DEBUG(COMPONENT, "reply for request %u while waiting for %u", f->hdr.id, id);
        return locked_fail(c, -EPROTO);
    }
    return 0;
}

/* An error frame from the guest: its errno, or -EPROTO when the frame itself is malformed. */
static int guest_error(struct eph_guest_client *c, const struct eph_proto_frame *f)
{
    int err;
    const char *msg;
    if (eph_proto_error_decode(f->payload, f->hdr.length, &err, &msg))
        return locked_fail(c, -EPROTO);
    EPH_DEBUG(COMPONENT, "guest error: %s (%s)", msg, strerror(-err));
    return err;
}

int eph_guest_client_hello(struct eph_guest_client *c, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    int broken = call_check(c);
    if (broken)
        return broken;
    int rc = next_frame(c, deadline_ns, 0, &f);
    if (rc)
        return rc;
    uint32_t version, pid;
    if (f.hdr.type != EPH_PROTO_HELLO || f.hdr.id != 0 ||
        eph_proto_hello_decode(f.payload, f.hdr.length, &version, &pid))
        return locked_fail(c, -EPROTO);
    c->guest_pid = pid;
    return 0;
}

int eph_guest_client_ping(struct eph_guest_client *c, uint64_t deadline_ns)
{
    static const char token[] = "ephemeral-ping";
    struct eph_proto_frame f;
    int broken = call_check(c);
    if (broken)
        return broken;
    uint32_t id = c->next_id++;
    int len = eph_proto_raw_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD,
                                   EPH_PROTO_PING, 0, id, token, sizeof(token));
    if (len < 0)
        return len;
    int rc = send_all(c, c->tx, (size_t)len, deadline_ns);
    if (rc)
        return rc;
    rc = next_reply(c, id, deadline_ns, 0, &f);
    if (rc)
        return rc;
    if (f.hdr.type != EPH_PROTO_PONG || f.hdr.length != sizeof(token) ||
        memcmp(f.payload, token, sizeof(token)) != 0)
        return locked_fail(c, -EPROTO);
    return 0;
}

int eph_guest_client_exec(struct eph_guest_client *c, const struct eph_exec_request *req,
                          struct eph_exec_result *res)
{
    struct eph_proto_frame f;
    int broken = call_check(c);
    if (broken)
        return broken;
    if (!req->command || !req->command[0])
        return -EINVAL;
    uint32_t timeout = req->timeout_ms ? req->timeout_ms : DEFAULT_TIMEOUT_MS;
    if (timeout > MAX_TIMEOUT_MS)
        timeout = MAX_TIMEOUT_MS;
    eph_buf_release(&res->out);
    eph_buf_release(&res->err);
    eph_buf_init(&res->out, req->stdout_cap);
    eph_buf_init(&res->err, req->stderr_cap);
    res->exit_code = -1;
    res->signal = 0;
    res->timed_out = false;
    res->duration_us = 0;
    res->stdout_total = res->stderr_total = 0;

    if ((req->stdout_cap | req->stderr_cap) & EPH_PROTO_CAP_HEAD_TAIL)
        return -EINVAL;
    uint32_t tail = req->head_tail ? EPH_PROTO_CAP_HEAD_TAIL : 0;
    uint32_t id = c->next_id++;
    int len =
        eph_proto_exec_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD, id, timeout,
                              req->stdout_cap | tail, req->stderr_cap | tail, req->command,
                              req->cwd ? req->cwd : "", req->env, req->on_live ? req->live_cap : 0);
    if (len < 0)
        return len; /* the request is too large or malformed: the stream is still in step */
    uint64_t deadline = eph_clock_mono_ns() + ((uint64_t)timeout + EXEC_GRACE_MS) * 1000000u;
    int rc = send_all(c, c->tx, (size_t)len, deadline);
    if (rc)
        return rc;
    uint64_t tick_ns = req->on_tick && req->tick_ms ? (uint64_t)req->tick_ms * 1000000u : 0;
    uint64_t live_left = req->on_live ? req->live_cap : 0;
    for (;;) {
        rc = next_reply(c, id, deadline, tick_ns ? eph_clock_mono_ns() + tick_ns : 0, &f);
        if (rc == -EAGAIN) {
            req->on_tick(req->on_output_arg);
            continue;
        }
        if (rc)
            return rc;
        switch (f.hdr.type) {
        case EPH_PROTO_EXEC_STDOUT:
        case EPH_PROTO_EXEC_STDERR: {
            struct eph_buf *b = f.hdr.type == EPH_PROTO_EXEC_STDOUT ? &res->out : &res->err;
            /* The guest was told the cap; more than that is a guest that does not follow the
             * protocol, and nothing it says from here on can be trusted. */
            rc = eph_buf_append(b, f.payload, f.hdr.length);
            if (rc == -EMSGSIZE)
                return locked_fail(c, -EPROTO);
            if (rc)
                return locked_fail(c, rc);
            if (req->on_output)
                req->on_output(req->on_output_arg, f.hdr.type == EPH_PROTO_EXEC_STDOUT ? 1 : 2,
                               f.payload, f.hdr.length);
            break;
        }
        case EPH_PROTO_EXEC_LIVE_STDOUT:
        case EPH_PROTO_EXEC_LIVE_STDERR:
            /* Only what was asked for: live bytes not asked, or past the budget, are a guest
             * that does not follow the protocol. */
            if (f.hdr.length > live_left)
                return locked_fail(c, -EPROTO);
            live_left -= f.hdr.length;
            req->on_live(req->on_output_arg, f.hdr.type == EPH_PROTO_EXEC_LIVE_STDOUT ? 1 : 2,
                         f.payload, f.hdr.length);
            break;
        case EPH_PROTO_EXEC_EXIT: {
            struct eph_proto_exit e;
            if (eph_proto_exit_decode(f.payload, f.hdr.length, &e))
                return locked_fail(c, -EPROTO);
            res->exit_code = e.signal ? -1 : e.exit_code;
            res->signal = (int)e.signal;
            res->timed_out = (e.flags & EPH_PROTO_EXIT_TIMED_OUT) != 0;
            res->duration_us = e.duration_us;
            /* Totals are the guest's word; they can at least not be less than what came. */
            res->stdout_total = e.stdout_total < res->out.len ? res->out.len : e.stdout_total;
            res->stderr_total = e.stderr_total < res->err.len ? res->err.len : e.stderr_total;
            return 0;
        }
        case EPH_PROTO_ERROR:
            rc = guest_error(c, &f);
            return rc == -EPROTO ? rc : -EIO;
        default:
            return locked_fail(c, -EPROTO);
        }
    }
}

int eph_guest_client_write_file(struct eph_guest_client *c, const char *path, const void *data,
                                size_t len, unsigned mode, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    const uint8_t *p = data;
    size_t off = 0;
    int broken = call_check(c);
    if (broken)
        return broken;
    if (eph_proto_path_check(path))
        return -EINVAL;
    size_t chunk = EPH_PROTO_MAX_PAYLOAD - 12 - (strlen(path) + 1);
    do {
        size_t n = len - off < chunk ? len - off : chunk;
        uint32_t id = c->next_id++;
        int flen = eph_proto_write_file_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD,
                                               id, path, mode & 0777u,
                                               off ? EPH_PROTO_WRITE_APPEND : 0, p + off, n);
        if (flen < 0)
            return flen;
        int rc = send_all(c, c->tx, (size_t)flen, deadline_ns);
        if (rc)
            return rc;
        rc = next_reply(c, id, deadline_ns, 0, &f);
        if (rc)
            return rc;
        if (f.hdr.type == EPH_PROTO_ERROR)
            return guest_error(c, &f);
        if (f.hdr.type != EPH_PROTO_OK)
            return locked_fail(c, -EPROTO);
        off += n;
    } while (off < len);
    return 0;
}

int eph_guest_client_read_file(struct eph_guest_client *c, const char *path, size_t cap,
                               struct eph_buf *out, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    int broken = call_check(c);
    if (broken)
        return broken;
    if (eph_proto_path_check(path))
        return -EINVAL;
    eph_buf_release(out);
    eph_buf_init(out, cap);
    uint32_t id = c->next_id++;
    int flen = eph_proto_read_file_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD, id,
                                          path, cap);
    if (flen < 0)
        return flen;
    int rc = send_all(c, c->tx, (size_t)flen, deadline_ns);
    if (rc)
        return rc;
    for (;;) {
        rc = next_reply(c, id, deadline_ns, 0, &f);
        if (rc)
            return rc;
        if (f.hdr.type == EPH_PROTO_FILE_DATA) {
            rc = eph_buf_append(out, f.payload, f.hdr.length);
            if (rc)
                return locked_fail(c, rc == -EMSGSIZE ? -EPROTO : rc);
        } else if (f.hdr.type == EPH_PROTO_FILE_END) {
            uint64_t size = 0;
            for (int i = 0; i < 8; i++)
                size |= (uint64_t)f.payload[i] << (8 * i);
            if (size != out->len)
                return locked_fail(c, -EPROTO);
            return 0;
        } else if (f.hdr.type == EPH_PROTO_ERROR) {
            eph_buf_reset(out);
            return guest_error(c, &f);
        } else {
            return locked_fail(c, -EPROTO);
        }
    }
}

static int listing_add(struct eph_sandbox_listing *l, size_t *cap,
                       const struct eph_proto_file_entry *e)
{
    if (l->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        struct eph_sandbox_file *nv = realloc(l->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        l->v = nv;
        *cap = ncap;
    }
    struct eph_sandbox_file *f = &l->v[l->n];
    f->type = (enum eph_sandbox_file_type)e->kind;
    f->size = e->size;
    f->path = strdup(e->path);
    f->target = e->kind == EPH_PROTO_KIND_SYMLINK ? strdup(e->target) : NULL;
    if (!f->path || (e->kind == EPH_PROTO_KIND_SYMLINK && !f->target)) {
        free(f->path);
        free(f->target);
        return -ENOMEM;
    }
    l->n++;
    return 0;
}

static int list_files(struct eph_guest_client *c, uint32_t id, uint32_t max_entries,
                      struct eph_sandbox_listing *out, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    size_t cap = 0;
    for (;;) {
        int rc = next_reply(c, id, deadline_ns, 0, &f);
        if (rc)
            return rc;
        if (f.hdr.type == EPH_PROTO_FILE_ENTRY) {
            struct eph_proto_file_entry e;
            /* The guest's walk is hostile too: its decoder re-checks every path and target. */
            if (out->n >= max_entries ||
                eph_proto_file_entry_decode(f.payload, f.hdr.length, &e) != 0)
                return locked_fail(c, -EPROTO);
            rc = listing_add(out, &cap, &e);
            if (rc)
                return locked_fail(c, rc);
        } else if (f.hdr.type == EPH_PROTO_LIST_END) {
            uint32_t flags, count;
            if (eph_proto_list_end_decode(f.payload, f.hdr.length, &flags, &count) != 0 ||
                count != out->n)
                return locked_fail(c, -EPROTO);
            out->truncated = (flags & EPH_PROTO_LIST_TRUNCATED) != 0;
            return 0;
        } else if (f.hdr.type == EPH_PROTO_ERROR) {
            return guest_error(c, &f);
        } else {
            return locked_fail(c, -EPROTO);
        }
    }
}

int eph_guest_client_list_files(struct eph_guest_client *c, uint32_t max_entries,
                                uint32_t max_depth, struct eph_sandbox_listing *out,
                                uint64_t deadline_ns)
{
    eph_sandbox_listing_release(out);
    int broken = call_check(c);
    if (broken)
        return broken;
    uint32_t id = c->next_id++;
    int flen = eph_proto_list_files_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD, id,
                                           max_entries, max_depth);
    if (flen < 0)
        return flen;
    int rc = send_all(c, c->tx, (size_t)flen, deadline_ns);
    if (!rc)
        rc = list_files(c, id, max_entries, out, deadline_ns);
    if (rc)
        eph_sandbox_listing_release(out);
    return rc;
}

/* Detaches the tunnel (the channel thread touches it only under mu, and checks it is still the
 * one it polled for) and frees it. */
static int tunnel_drop(struct eph_guest_client *c, int rc)
{
    pthread_mutex_lock(&c->mu);
    struct eph_guest_tunnel *t = c->tunnel;
    c->tunnel = NULL;
    c->out_src = c->out_src == 2 ? 0 : c->out_src;
    pthread_mutex_unlock(&c->mu);
    eph_guest_tunnel_free(t);
    return rc;
}

int eph_guest_client_open_tunnel(struct eph_guest_client *c, const struct eph_sandbox_tunnel *cfg,
                                 uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    int broken = call_check(c);
    if (broken)
        return broken;
    struct eph_guest_tunnel *t;
    int rc = eph_guest_tunnel_new(cfg, &t);
    if (rc)
        return rc;
    uint32_t id = c->next_id++;
    int len = eph_proto_tunnel_listen_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD,
                                             id, cfg->port, cfg->max_streams);
    if (len < 0) {
        eph_guest_tunnel_free(t);
        return len;
    }
    /* Attached before the listen is sent: the guest may open streams right after its reply, and
     * the channel thread hands them to the tunnel. */
    pthread_mutex_lock(&c->mu);
    if (c->tunnel) {
        pthread_mutex_unlock(&c->mu);
        eph_guest_tunnel_free(t);
        return -EALREADY;
    }
    c->tunnel = t;
    pthread_mutex_unlock(&c->mu);
    /* From here the streams need serving between calls too: a thread takes the channel. */
    if ((rc = thread_start(c)))
        return tunnel_drop(c, rc);
    wake(c);
    rc = send_all(c, c->tx, (size_t)len, deadline_ns);
    if (!rc)
        rc = next_reply(c, id, deadline_ns, 0, &f);
    if (rc)
        return tunnel_drop(c, rc);
    if (f.hdr.type == EPH_PROTO_ERROR)
        return tunnel_drop(c, guest_error(c, &f));
    if (f.hdr.type != EPH_PROTO_OK)
        return tunnel_drop(c, locked_fail(c, -EPROTO));
    return 0;
}

int eph_guest_client_shutdown(struct eph_guest_client *c, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    int broken = call_check(c);
    if (broken)
        return broken;
    uint32_t id = c->next_id++;
    int len = eph_proto_raw_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD,
                                   EPH_PROTO_SHUTDOWN, 0, id, NULL, 0);
    if (len < 0)
        return len;
    int rc = send_all(c, c->tx, (size_t)len, deadline_ns);
    if (rc)
        return rc;
    rc = next_reply(c, id, deadline_ns, 0, &f);
    if (rc)
        return rc;
    return f.hdr.type == EPH_PROTO_OK ? 0 : locked_fail(c, -EPROTO);
}
