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

static int send_all(struct eph_guest_client *c, const uint8_t *p, size_t n, uint64_t deadline_ns)
{
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
        int ms = remaining_ms(deadline_ns);
        if (ms == 0)
            return fail(c, -ETIMEDOUT);
        struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return fail(c, -errno);
    }
    return 0;
}

/* The next frame from the guest, by the deadline. The payload is valid until the next call. */
static int next_frame(struct eph_guest_client *c, uint64_t deadline_ns, struct eph_proto_frame *f)
{
    for (;;) {
        if (c->rpos < c->rlen) {
            size_t used = 0;
            int rc = eph_proto_decode(&c->dec, c->rbuf + c->rpos, c->rlen - c->rpos, &used, f);
            c->rpos += used;
            if (rc < 0)
                return fail(c, rc);
            if (rc == 1)
                return 0;
            continue;
        }
        int ms = remaining_ms(deadline_ns);
        if (ms == 0)
            return fail(c, -ETIMEDOUT);
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int n = poll(&pfd, 1, ms);
        if (n < 0 && errno != EINTR)
            return fail(c, -errno);
        if (n <= 0)
            continue;
        ssize_t r = read(c->fd, c->rbuf, sizeof(c->rbuf));
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r < 0)
            return fail(c, errno == ECONNRESET ? -EPIPE : -errno);
        if (r == 0) {
            /* The guest is gone. Mid-frame, that is a protocol error; between frames, a hangup. */
            int rc = eph_proto_decoder_finish(&c->dec);
            return fail(c, rc ? rc : -EPIPE);
        }
        c->rpos = 0;
        c->rlen = (size_t)r;
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

    uint32_t id = c->next_id++;
    int len =
        eph_proto_exec_encode(c->tx, EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD, id, timeout,
                              req->stdout_cap, req->stderr_cap, req->command, "", req->env);
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
