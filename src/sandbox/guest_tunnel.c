/*
 * guest_tunnel.c - the host end of the broker tunnel. See guest_tunnel.h.
 */
#include "sandbox/guest_tunnel.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"

#define COMPONENT "tunnel"
#define GRANT_STEP (EPH_PROTO_TUNNEL_WINDOW_SIZE / 4)

struct hstream {
    int fd; /* -1: free */
    uint32_t id;
    uint32_t credit; /* bytes we may still send to the guest */
    uint8_t *buf;    /* from the guest, not yet written to fd: buf[off..len) */
    size_t off, len;
    uint32_t ungranted; /* written to fd, not yet granted back to the guest */
    bool fd_eof;        /* the broker shut its side: close_write sent */
    bool guest_eof;     /* the guest sent close_write */
    bool shut_wr;
};

struct eph_guest_tunnel {
    struct eph_sandbox_tunnel cfg;
    struct hstream s[EPH_GUEST_TUNNEL_MAX_STREAMS];
    struct eph_buf out;
    uint8_t chunk[EPH_PROTO_HEADER_SIZE + EPH_PROTO_CHUNK];
};

int eph_guest_tunnel_new(const struct eph_sandbox_tunnel *cfg, struct eph_guest_tunnel **out)
{
    if (!cfg->on_stream || !cfg->port || !cfg->max_streams)
        return -EINVAL;
    struct eph_guest_tunnel *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->cfg = *cfg;
    if (t->cfg.max_streams > EPH_GUEST_TUNNEL_MAX_STREAMS)
        t->cfg.max_streams = EPH_GUEST_TUNNEL_MAX_STREAMS;
    for (size_t i = 0; i < EPH_GUEST_TUNNEL_MAX_STREAMS; i++)
        t->s[i].fd = -1;
    /* What can wait to be written: per stream at most its credit of data plus a few small
     * frames; the queue is flushed before the relay reads more. */
    eph_buf_init(&t->out,
                 (size_t)t->cfg.max_streams * (EPH_PROTO_TUNNEL_WINDOW_SIZE + 4096) + 65536);
    *out = t;
    return 0;
}

static void stream_free(struct hstream *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->buf);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
}

void eph_guest_tunnel_free(struct eph_guest_tunnel *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < EPH_GUEST_TUNNEL_MAX_STREAMS; i++)
        if (t->s[i].fd >= 0)
            stream_free(&t->s[i]);
    eph_buf_release(&t->out);
    free(t);
}

struct eph_buf *eph_guest_tunnel_out(struct eph_guest_tunnel *t)
{
    return &t->out;
}

size_t eph_guest_tunnel_streams(const struct eph_guest_tunnel *t)
{
    size_t n = 0;
    for (size_t i = 0; i < EPH_GUEST_TUNNEL_MAX_STREAMS; i++)
        n += t->s[i].fd >= 0;
    return n;
}

/* Queues a small frame. The queue's cap leaves room for every small frame the streams can owe,
 * so a failure here is a bug or memory exhaustion: the stream is dropped either way. */
static void queue_u32(struct eph_guest_tunnel *t, uint8_t type, uint32_t id, uint32_t v)
{
    uint8_t f[EPH_PROTO_HEADER_SIZE + 4];
    int n = eph_proto_tunnel_u32_encode(f, sizeof(f), type, id, v);
    if (n > 0 && eph_buf_append(&t->out, f, (size_t)n))
        EPH_WARN(COMPONENT, "tunnel queue full, frame for stream %u dropped", id);
}

static void stream_reset(struct eph_guest_tunnel *t, struct hstream *s)
{
    queue_u32(t, EPH_PROTO_TUNNEL_CLOSE, s->id, EPH_PROTO_CLOSE_RESET);
    stream_free(s);
}

/* How many of n bytes of the stream may cross (the caller's meter), all when it has none. */
static size_t metered(struct eph_guest_tunnel *t, struct hstream *s, size_t n)
{
    if (!t->cfg.on_bytes)
        return n;
    size_t k = t->cfg.on_bytes(t->cfg.arg, s->id, n);
    return k < n ? k : n;
}

static void stream_maybe_done(struct hstream *s)
{
    if (s->fd_eof && s->guest_eof && s->off == s->len)
        stream_free(s);
}

static struct hstream *stream_find(struct eph_guest_tunnel *t, uint32_t id)
{
    for (size_t i = 0; i < EPH_GUEST_TUNNEL_MAX_STREAMS; i++)
        if (t->s[i].fd >= 0 && t->s[i].id == id)
            return &t->s[i];
    return NULL;
}

static void stream_read_all(struct eph_guest_tunnel *t, struct hstream *s, uint32_t id);

/* The broker's end is gone while the guest still sends: the broker answered and hung up before
 * it read everything (a refusal at its cap, a request too large). Its answer is still readable
 * here, and goes to the guest before the reset, or the program would see a reset alone. */
static void stream_drain_reset(struct eph_guest_tunnel *t, struct hstream *s)
{
    uint32_t id = s->id;
    if (!s->fd_eof && s->credit > 0)
        stream_read_all(t, s, id);
    if (s->fd >= 0 && s->id == id)
        stream_reset(t, s);
}

static void stream_write(struct eph_guest_tunnel *t, struct hstream *s)
{
    while (s->off < s->len) {
        ssize_t w = send(s->fd, s->buf + s->off, s->len - s->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0) {
            stream_drain_reset(t, s);
            return;
        }
        s->off += (size_t)w;
        s->ungranted += (uint32_t)w;
    }
    if (s->off == s->len)
        s->off = s->len = 0;
    if (s->ungranted >= GRANT_STEP || (s->len == 0 && s->ungranted > 0)) {
        queue_u32(t, EPH_PROTO_TUNNEL_WINDOW, s->id, s->ungranted);
        s->ungranted = 0;
    }
    if (s->guest_eof && s->len == 0 && !s->shut_wr) {
        shutdown(s->fd, SHUT_WR);
        s->shut_wr = true;
    }
    stream_maybe_done(s);
}

static int stream_open(struct eph_guest_tunnel *t, uint32_t id)
{
    if (stream_find(t, id))
        return -EPROTO;
    struct hstream *s = NULL;
    size_t open = 0;
    for (size_t i = 0; i < EPH_GUEST_TUNNEL_MAX_STREAMS; i++) {
        if (t->s[i].fd >= 0)
            open++;
        else if (!s)
            s = &t->s[i];
    }
    int sv[2];
    if (!s || open >= t->cfg.max_streams ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        queue_u32(t, EPH_PROTO_TUNNEL_CLOSE, id, EPH_PROTO_CLOSE_RESET);
        return 0;
    }
    s->buf = malloc(EPH_PROTO_TUNNEL_WINDOW_SIZE);
    if (!s->buf) {
        close(sv[0]);
        close(sv[1]);
        queue_u32(t, EPH_PROTO_TUNNEL_CLOSE, id, EPH_PROTO_CLOSE_RESET);
        return 0;
    }
    s->fd = sv[0];
    s->id = id;
    s->credit = EPH_PROTO_TUNNEL_WINDOW_SIZE;
    if (t->cfg.on_stream(t->cfg.arg, id, sv[1]) < 0)
        stream_reset(t, s);
    return 0;
}

int eph_guest_tunnel_frame(struct eph_guest_tunnel *t, const struct eph_proto_frame *f)
{
    uint32_t v;
    if (f->hdr.type == EPH_PROTO_TUNNEL_OPEN)
        return stream_open(t, f->hdr.id);
    struct hstream *s = stream_find(t, f->hdr.id);
    if (!s)
        return 0; /* reset here while the frame was on its way */
    switch (f->hdr.type) {
    case EPH_PROTO_TUNNEL_DATA:
        if (s->guest_eof) {
            stream_reset(t, s);
            return 0;
        }
        if (s->off && s->len + f->hdr.length > EPH_PROTO_TUNNEL_WINDOW_SIZE) {
            memmove(s->buf, s->buf + s->off, s->len - s->off);
            s->len -= s->off;
            s->off = 0;
        }
        if (s->len + f->hdr.length > EPH_PROTO_TUNNEL_WINDOW_SIZE) {
            EPH_DEBUG(COMPONENT, "stream %u: data beyond its credit", s->id);
            stream_reset(t, s);
            return 0;
        }
        size_t n = metered(t, s, f->hdr.length);
        memcpy(s->buf + s->len, f->payload, n);
        s->len += n;
        if (n < f->hdr.length) {
            /* Cut at the byte where the budget ends: what was paid for goes, then nothing. */
            (void)send(s->fd, s->buf + s->off, s->len - s->off, MSG_NOSIGNAL | MSG_DONTWAIT);
            stream_reset(t, s);
            return 0;
        }
        stream_write(t, s);
        return 0;
    case EPH_PROTO_TUNNEL_WINDOW:
        if (eph_proto_tunnel_u32_decode(f->hdr.type, f->payload, f->hdr.length, &v)) {
            stream_reset(t, s);
            return 0;
        }
        s->credit = s->credit + v > EPH_PROTO_TUNNEL_WINDOW_SIZE ? EPH_PROTO_TUNNEL_WINDOW_SIZE
                                                                 : s->credit + v;
        return 0;
    case EPH_PROTO_TUNNEL_CLOSE:
        if (eph_proto_tunnel_u32_decode(f->hdr.type, f->payload, f->hdr.length, &v) ||
            v == EPH_PROTO_CLOSE_RESET) {
            stream_free(s);
            return 0;
        }
        s->guest_eof = true;
        stream_write(t, s);
        return 0;
    default:
        return -EPROTO;
    }
}

size_t eph_guest_tunnel_pollfds(struct eph_guest_tunnel *t, struct pollfd *pfd, size_t max)
{
    size_t n = 0;
    /* While frames wait to be written, read nothing more: the queue stays bounded. */
    bool may_read = t->out.len < 65536;
    for (size_t i = 0; i < EPH_GUEST_TUNNEL_MAX_STREAMS && n < max; i++) {
        struct hstream *s = &t->s[i];
        short ev = 0;
        if (s->fd < 0)
            continue;
        if (may_read && s->credit > 0 && !s->fd_eof)
            ev |= POLLIN;
        if (s->off < s->len)
            ev |= POLLOUT;
        if (ev)
            pfd[n++] = (struct pollfd){.fd = s->fd, .events = ev};
    }
    return n;
}

static void stream_read(struct eph_guest_tunnel *t, struct hstream *s)
{
    size_t want = s->credit < EPH_PROTO_CHUNK ? s->credit : EPH_PROTO_CHUNK;
    ssize_t r = recv(s->fd, t->chunk + EPH_PROTO_HEADER_SIZE, want, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r < 0) {
        stream_reset(t, s);
        return;
    }
    if (r == 0) {
        s->fd_eof = true;
        queue_u32(t, EPH_PROTO_TUNNEL_CLOSE, s->id, EPH_PROTO_CLOSE_WRITE);
        stream_maybe_done(s);
        return;
    }
    size_t n = metered(t, s, (size_t)r);
    if (n) {
        eph_proto_header_encode(t->chunk, EPH_PROTO_TUNNEL_DATA, 0, s->id, (uint32_t)n);
        if (eph_buf_append(&t->out, t->chunk, EPH_PROTO_HEADER_SIZE + n)) {
            stream_reset(t, s);
            return;
        }
        s->credit -= (uint32_t)n;
    }
    if (n < (size_t)r)
        stream_reset(t, s); /* the budget ends here */
}

/* Reads what a readable stream has, up to its credit, a frame per chunk: one wake-up carries up
 * to a window, not one chunk (each wake-up is dear in a VM). Stops when the queue holds a window
 * already, so that it stays bounded. */
static void stream_read_all(struct eph_guest_tunnel *t, struct hstream *s, uint32_t id)
{
    size_t before;
    do {
        before = t->out.len;
        stream_read(t, s);
    } while (s->fd >= 0 && s->id == id && !s->fd_eof && s->credit > 0 && t->out.len > before &&
             t->out.len - before == EPH_PROTO_HEADER_SIZE + EPH_PROTO_CHUNK &&
             t->out.len < EPH_PROTO_TUNNEL_WINDOW_SIZE);
}

void eph_guest_tunnel_service(struct eph_guest_tunnel *t, const struct pollfd *pfd, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!pfd[i].revents)
            continue;
        struct hstream *s = NULL;
        for (size_t k = 0; k < EPH_GUEST_TUNNEL_MAX_STREAMS; k++)
            if (t->s[k].fd == pfd[i].fd)
                s = &t->s[k];
        if (!s)
            continue;
        if (pfd[i].revents & (POLLOUT | POLLERR | POLLHUP))
            stream_write(t, s);
        if (s->fd == pfd[i].fd && (pfd[i].revents & (POLLIN | POLLERR | POLLHUP)) && !s->fd_eof &&
            s->credit > 0)
            stream_read_all(t, s, s->id);
    }
}
