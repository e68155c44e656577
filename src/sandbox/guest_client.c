/*
 * guest_client.c - the worker end of the guest protocol. See guest_client.h.
 */
#include "sandbox/guest_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
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

int eph_guest_client_init(struct eph_guest_client *c, int fd)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->next_id = 1;
    c->rx_payload = malloc(EPH_PROTO_MAX_PAYLOAD);
    c->tx = malloc(EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD);
    if (!c->rx_payload || !c->tx) {
        free(c->rx_payload);
        free(c->tx);
        c->rx_payload = c->tx = NULL;
        c->broken = -ENOMEM;
        return -ENOMEM;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    eph_proto_decoder_init(&c->dec, EPH_PROTO_FROM_GUEST, c->rx_payload, EPH_PROTO_MAX_PAYLOAD);
    return 0;
}

void eph_guest_client_release(struct eph_guest_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->rx_payload);
    free(c->tx);
    c->rx_payload = c->tx = NULL;
    eph_guest_tunnel_free(c->tunnel);
    c->tunnel = NULL;
    if (!c->broken)
        c->broken = -EPIPE;
}

static int fail(struct eph_guest_client *c, int rc)
{
    if (!c->broken) {
        c->broken = rc;
        EPH_DEBUG(COMPONENT, "channel broken: %s", strerror(-rc));
    }
    return rc;
}

static int remaining_ms(uint64_t deadline_ns)
{
    uint64_t now = eph_clock_mono_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
    return ms > 60000u ? 60000 : (int)ms;
}

static bool is_tunnel_type(uint8_t type)
{
    return type == EPH_PROTO_TUNNEL_OPEN || type == EPH_PROTO_TUNNEL_DATA ||
           type == EPH_PROTO_TUNNEL_WINDOW || type == EPH_PROTO_TUNNEL_CLOSE;
}

/* Decodes what was read. Tunnel frames go to the tunnel; the first other frame is returned
 * (1), or kept in the stash when stash is set (then 1 too). 0 when everything read is used. */
static int decode_some(struct eph_guest_client *c, bool stash, struct eph_proto_frame *f)
{
    while (c->rpos < c->rlen) {
        size_t used = 0;
        int rc = eph_proto_decode(&c->dec, c->rbuf + c->rpos, c->rlen - c->rpos, &used, f);
        c->rpos += used;
        if (rc < 0)
            return fail(c, rc);
        if (rc == 0)
            continue;
        if (is_tunnel_type(f->hdr.type)) {
            if (!c->tunnel)
                return fail(c, -EPROTO);
            rc = eph_guest_tunnel_frame(c->tunnel, f);
            if (rc)
                return fail(c, rc);
            continue;
        }
        if (stash) {
            c->stash = *f;
            c->stashed = true;
        }
        return 1;
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

/* Writes what it can of the tunnel's queue without blocking. */
static int write_out(struct eph_guest_client *c)
{
    struct eph_buf *q = eph_guest_tunnel_out(c->tunnel);
    while (c->out_off < q->len) {
        ssize_t w =
            send(c->fd, q->data + c->out_off, q->len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == ENOTSOCK)
            w = write(c->fd, q->data + c->out_off, q->len - c->out_off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w < 0)
            return fail(c, errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno);
        c->out_off += (size_t)w;
    }
    if (c->out_off == q->len) {
        eph_buf_reset(q);
        c->out_off = 0;
    }
    return 0;
}

static bool out_pending(const struct eph_guest_client *c)
{
    return c->tunnel && c->out_off < eph_guest_tunnel_out(c->tunnel)->len;
}

/* One round of waiting on the channel (and the tunnel's streams): reads when there is room to
 * (nothing undecoded, nothing stashed), writes the tunnel's queue when want_queue, serves the
 * streams. want_out: the caller waits to write a request (POLLOUT on the channel). */
static int wait_round(struct eph_guest_client *c, uint64_t deadline_ns, bool want_out,
                      bool want_queue, bool *writable)
{
    struct pollfd pfd[1 + EPH_GUEST_TUNNEL_MAX_STREAMS];
    int ms = remaining_ms(deadline_ns);
    if (ms == 0)
        return fail(c, -ETIMEDOUT);
    bool may_read = !c->stashed && c->rpos >= c->rlen;
    pfd[0] = (struct pollfd){
        .fd = c->fd,
        .events = (short)((may_read ? POLLIN : 0) |
                          (want_out || (want_queue && out_pending(c)) ? POLLOUT : 0))};
    size_t nt =
        c->tunnel ? eph_guest_tunnel_pollfds(c->tunnel, pfd + 1, EPH_GUEST_TUNNEL_MAX_STREAMS) : 0;
    int n = poll(pfd, 1 + nt, ms);
    if (n < 0 && errno != EINTR)
        return fail(c, -errno);
    if (n <= 0)
        return 0;
    if (writable)
        *writable = (pfd[0].revents & (POLLOUT | POLLERR | POLLHUP)) != 0;
    if (want_queue && (pfd[0].revents & POLLOUT)) {
        int rc = write_out(c);
        if (rc)
            return rc;
    }
    if (may_read && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        int rc = read_some(c);
        if (rc)
            return rc;
    }
    if (nt)
        eph_guest_tunnel_service(c->tunnel, pfd + 1, nt);
    return 0;
}

static int send_all(struct eph_guest_client *c, const uint8_t *p, size_t n, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    /* The tunnel's queued frames go first and whole, so that a request never splits one. */
    while (out_pending(c)) {
        int rc = write_out(c);
        if (rc)
            return rc;
        if (!out_pending(c))
            break;
        rc = wait_round(c, deadline_ns, false, true, NULL);
        if (!rc && c->tunnel)
            rc = decode_some(c, true, &f) < 0 ? c->broken : 0;
        if (rc)
            return rc;
    }
    while (n) {
        /* MSG_NOSIGNAL: a dead guest must be an error here, not a SIGPIPE for the whole server. */
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == ENOTSOCK)
            w = write(c->fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN)
            return fail(c, errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno);
        if (c->tunnel) {
            /* Keep reading while the guest's side is full: the guest may itself be blocked
             * writing tunnel data to us, and only our reading unblocks it. */
            int rc = wait_round(c, deadline_ns, true, false, NULL);
            if (!rc)
                rc = decode_some(c, true, &f) < 0 ? c->broken : 0;
            if (rc)
                return rc;
            continue;
        }
        int ms = remaining_ms(deadline_ns);
        if (ms == 0)
            return fail(c, -ETIMEDOUT);
        struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return fail(c, -errno);
    }
    return 0;
}

/* The next frame from the guest that is not a tunnel frame, by the deadline. The payload is valid
 * until the next call. The tunnel is served all the while. */
static int next_frame(struct eph_guest_client *c, uint64_t deadline_ns, struct eph_proto_frame *f)
{
    for (;;) {
        if (c->stashed) {
            *f = c->stash;
            c->stashed = false;
            return 0;
        }
        int rc = decode_some(c, false, f);
        if (rc < 0)
            return rc;
        if (rc == 1)
            return 0;
        if (!c->tunnel) {
            int ms = remaining_ms(deadline_ns);
            if (ms == 0)
                return fail(c, -ETIMEDOUT);
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            int n = poll(&pfd, 1, ms);
            if (n < 0 && errno != EINTR)
                return fail(c, -errno);
            if (n <= 0)
                continue;
            rc = read_some(c);
        } else {
            rc = wait_round(c, deadline_ns, false, true, NULL);
        }
        if (rc)
            return rc;
    }
}

/* Reads a reply to request id; anything for another id is a broken guest. */
static int next_reply(struct eph_guest_client *c, uint32_t id, uint64_t deadline_ns,
                      struct eph_proto_frame *f)
{
    int rc = next_frame(c, deadline_ns, f);
    if (rc)
        return rc;
    if (f->hdr.id != id) {
        EPH_DEBUG(COMPONENT, "reply for request %u while waiting for %u", f->hdr.id, id);
        return fail(c, -EPROTO);
    }
    return 0;
}

/* An error frame from the guest: its errno, or -EPROTO when the frame itself is malformed. */
static int guest_error(struct eph_guest_client *c, const struct eph_proto_frame *f)
{
    int err;
    const char *msg;
    if (eph_proto_error_decode(f->payload, f->hdr.length, &err, &msg))
        return fail(c, -EPROTO);
    EPH_DEBUG(COMPONENT, "guest error: %s (%s)", msg, strerror(-err));
    return err;
}

int eph_guest_client_hello(struct eph_guest_client *c, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    if (c->broken)
        return c->broken;
    int rc = next_frame(c, deadline_ns, &f);
    if (rc)
        return rc;
    uint32_t version, pid;
    if (f.hdr.type != EPH_PROTO_HELLO || f.hdr.id != 0 ||
        eph_proto_hello_decode(f.payload, f.hdr.length, &version, &pid))
        return fail(c, -EPROTO);
    c->guest_pid = pid;
    return 0;
}

int eph_guest_client_ping(struct eph_guest_client *c, uint64_t deadline_ns)
{
    static const char token[] = "ephemeral-ping";
    struct eph_proto_frame f;
    if (c->broken)
        return c->broken;
    uint32_t id = c->next_id++;
    int len = eph_proto_raw_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD,
                                   EPH_PROTO_PING, 0, id, token, sizeof(token));
    if (len < 0)
        return len;
    int rc = send_all(c, c->tx, (size_t)len, deadline_ns);
    if (rc)
        return rc;
    rc = next_reply(c, id, deadline_ns, &f);
    if (rc)
        return rc;
    if (f.hdr.type != EPH_PROTO_PONG || f.hdr.length != sizeof(token) ||
        memcmp(f.payload, token, sizeof(token)) != 0)
        return fail(c, -EPROTO);
    return 0;
}

int eph_guest_client_exec(struct eph_guest_client *c, const struct eph_exec_request *req,
                          struct eph_exec_result *res)
{
    struct eph_proto_frame f;
    if (c->broken)
        return c->broken;
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
    int len = eph_proto_exec_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD, id,
                                    timeout, req->stdout_cap | tail, req->stderr_cap | tail,
                                    req->command, "", req->env);
    if (len < 0)
        return len; /* the request is too large or malformed: the stream is still in step */
    uint64_t deadline = eph_clock_mono_ns() + ((uint64_t)timeout + EXEC_GRACE_MS) * 1000000u;
    int rc = send_all(c, c->tx, (size_t)len, deadline);
    if (rc)
        return rc;
    for (;;) {
        rc = next_reply(c, id, deadline, &f);
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
                return fail(c, -EPROTO);
            if (rc)
                return fail(c, rc);
            if (req->on_output)
                req->on_output(req->on_output_arg, f.hdr.type == EPH_PROTO_EXEC_STDOUT ? 1 : 2,
                               f.payload, f.hdr.length);
            break;
        }
        case EPH_PROTO_EXEC_EXIT: {
            struct eph_proto_exit e;
            if (eph_proto_exit_decode(f.payload, f.hdr.length, &e))
                return fail(c, -EPROTO);
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
            return fail(c, -EPROTO);
        }
    }
}

int eph_guest_client_write_file(struct eph_guest_client *c, const char *path, const void *data,
                                size_t len, unsigned mode, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    const uint8_t *p = data;
    size_t off = 0;
    if (c->broken)
        return c->broken;
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
        rc = next_reply(c, id, deadline_ns, &f);
        if (rc)
            return rc;
        if (f.hdr.type == EPH_PROTO_ERROR)
            return guest_error(c, &f);
        if (f.hdr.type != EPH_PROTO_OK)
            return fail(c, -EPROTO);
        off += n;
    } while (off < len);
    return 0;
}

int eph_guest_client_read_file(struct eph_guest_client *c, const char *path, size_t cap,
                               struct eph_buf *out, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    if (c->broken)
        return c->broken;
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
        rc = next_reply(c, id, deadline_ns, &f);
        if (rc)
            return rc;
        if (f.hdr.type == EPH_PROTO_FILE_DATA) {
            rc = eph_buf_append(out, f.payload, f.hdr.length);
            if (rc)
                return fail(c, rc == -EMSGSIZE ? -EPROTO : rc);
        } else if (f.hdr.type == EPH_PROTO_FILE_END) {
            uint64_t size = 0;
            for (int i = 0; i < 8; i++)
                size |= (uint64_t)f.payload[i] << (8 * i);
            if (size != out->len)
                return fail(c, -EPROTO);
            return 0;
        } else if (f.hdr.type == EPH_PROTO_ERROR) {
            eph_buf_reset(out);
            return guest_error(c, &f);
        } else {
            return fail(c, -EPROTO);
        }
    }
}

int eph_guest_client_open_tunnel(struct eph_guest_client *c, const struct eph_sandbox_tunnel *cfg,
                                 uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    if (c->broken)
        return c->broken;
    if (c->tunnel)
        return -EALREADY;
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
    rc = send_all(c, c->tx, (size_t)len, deadline_ns);
    if (!rc)
        rc = next_reply(c, id, deadline_ns, &f);
    if (rc) {
        eph_guest_tunnel_free(t);
        return rc;
    }
    if (f.hdr.type == EPH_PROTO_ERROR) {
        eph_guest_tunnel_free(t);
        return guest_error(c, &f);
    }
    if (f.hdr.type != EPH_PROTO_OK) {
        eph_guest_tunnel_free(t);
        return fail(c, -EPROTO);
    }
    c->tunnel = t;
    return 0;
}

int eph_guest_client_shutdown(struct eph_guest_client *c, uint64_t deadline_ns)
{
    struct eph_proto_frame f;
    if (c->broken)
        return c->broken;
    uint32_t id = c->next_id++;
    int len = eph_proto_raw_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD,
                                   EPH_PROTO_SHUTDOWN, 0, id, NULL, 0);
    if (len < 0)
        return len;
    int rc = send_all(c, c->tx, (size_t)len, deadline_ns);
    if (rc)
        return rc;
    rc = next_reply(c, id, deadline_ns, &f);
    if (rc)
        return rc;
    return f.hdr.type == EPH_PROTO_OK ? 0 : fail(c, -EPROTO);
}

/* ---- shared by the backends ---- */

static int after_interrupt(const atomic_bool *interrupted, int rc)
{
    return rc && atomic_load(interrupted) ? -ECANCELED : rc;
}

int eph_guest_sandbox_exec(struct eph_guest_client *c, const atomic_bool *interrupted,
                           const struct eph_exec_request *req, struct eph_exec_result *res)
{
    if (atomic_load(interrupted))
        return -ECANCELED;
    return after_interrupt(interrupted, eph_guest_client_exec(c, req, res));
}

int eph_guest_sandbox_write_file(struct eph_guest_client *c, const atomic_bool *interrupted,
                                 const char *path, const void *data, size_t len, unsigned mode)
{
    if (atomic_load(interrupted))
        return -ECANCELED;
    uint64_t deadline = eph_clock_mono_ns() + (uint64_t)EPH_GUEST_FILE_TIMEOUT_MS * 1000000u;
    return after_interrupt(interrupted,
                           eph_guest_client_write_file(c, path, data, len, mode, deadline));
}

int eph_guest_sandbox_read_file(struct eph_guest_client *c, const atomic_bool *interrupted,
                                const char *path, size_t cap, struct eph_buf *out)
{
    if (atomic_load(interrupted))
        return -ECANCELED;
    uint64_t deadline = eph_clock_mono_ns() + (uint64_t)EPH_GUEST_FILE_TIMEOUT_MS * 1000000u;
    return after_interrupt(interrupted, eph_guest_client_read_file(c, path, cap, out, deadline));
}

int eph_guest_sandbox_open_tunnel(struct eph_guest_client *c, const atomic_bool *interrupted,
                                  const struct eph_sandbox_tunnel *cfg)
{
    if (atomic_load(interrupted))
        return -ECANCELED;
    uint64_t deadline = eph_clock_mono_ns() + (uint64_t)EPH_GUEST_FILE_TIMEOUT_MS * 1000000u;
    return after_interrupt(interrupted, eph_guest_client_open_tunnel(c, cfg, deadline));
}

void eph_guest_sandbox_kill(pid_t pid, int pidfd)
{
    if (pid <= 0)
        return;
#ifdef SYS_pidfd_send_signal
    if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) == 0)
        return;
#endif
    kill(pid, SIGKILL);
}
