/*
 * tunnel.c - the guest end of the broker tunnel. See tunnel.h.
 */
#include "guest/tunnel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Grant credit back in pieces of at least this much (or when the buffer drains), so a bulk
 * transfer costs one window frame per 64 KiB, not one per write. */
#define GRANT_STEP (EPH_PROTO_TUNNEL_WINDOW_SIZE / 4)

struct gstream {
    int fd; /* -1: the slot is free */
    uint32_t id;
    uint32_t credit; /* bytes we may still send to the host */
    uint8_t *buf;    /* from the host, not yet written to the socket: buf[off..len) */
    size_t off, len;
    uint32_t ungranted; /* written to the socket, not yet granted back */
    bool sock_eof;      /* the program closed its side for writing: close_write sent */
    bool host_eof;      /* the host sent close_write */
    bool shut_wr;       /* shutdown(SHUT_WR) done */
};

static eph_gtunnel_send_fn send_frame;
static int listen_fd = -1;
static uint32_t max_streams;
static uint32_t next_id = 1;
static struct gstream streams[EPH_GTUNNEL_MAX_STREAMS];
static uint8_t ttx[EPH_PROTO_HEADER_SIZE + EPH_PROTO_CHUNK];
static char proxy_url[64];
static char env_store[6][80];
static const char *env_ptrs[7];

void eph_gtunnel_init(eph_gtunnel_send_fn send)
{
    send_frame = send;
    for (size_t i = 0; i < EPH_GTUNNEL_MAX_STREAMS; i++)
        streams[i].fd = -1;
}

bool eph_gtunnel_on(void)
{
    return listen_fd >= 0;
}

const char *const *eph_gtunnel_env(void)
{
    return listen_fd >= 0 ? env_ptrs : NULL;
}

int eph_gtunnel_listen(uint16_t port, uint32_t want)
{
    if (listen_fd >= 0)
        return -EALREADY;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    listen_fd = fd;
    max_streams = want < EPH_GTUNNEL_MAX_STREAMS ? want : EPH_GTUNNEL_MAX_STREAMS;
    snprintf(proxy_url, sizeof(proxy_url), "http://127.0.0.1:%u", (unsigned)port);
    static const char *const names[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(env_store[i], sizeof(env_store[i]), "%s=%s", names[i], proxy_url);
        env_ptrs[i] = env_store[i];
    }
    /* Empty: nothing bypasses the proxy (there is nothing else to reach). */
    snprintf(env_store[4], sizeof(env_store[4]), "NO_PROXY=");
    snprintf(env_store[5], sizeof(env_store[5]), "no_proxy=");
    env_ptrs[4] = env_store[4];
    env_ptrs[5] = env_store[5];
    env_ptrs[6] = NULL;
    return 0;
}

static void send_u32(uint8_t type, uint32_t id, uint32_t v)
{
    int n = eph_proto_tunnel_u32_encode(ttx, sizeof(ttx), type, id, v);
    if (n > 0)
        send_frame(ttx, (size_t)n);
}

static void stream_free(struct gstream *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->buf);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
}

static void stream_reset(struct gstream *s)
{
    send_u32(EPH_PROTO_TUNNEL_CLOSE, s->id, EPH_PROTO_CLOSE_RESET);
    stream_free(s);
}

static struct gstream *stream_find(uint32_t id)
{
    for (size_t i = 0; i < EPH_GTUNNEL_MAX_STREAMS; i++)
        if (streams[i].fd >= 0 && streams[i].id == id)
            return &streams[i];
    return NULL;
}

/* Both directions are over and everything from the host was written: the stream is done. */
static void stream_maybe_done(struct gstream *s)
{
    if (s->sock_eof && s->host_eof && s->off == s->len)
        stream_free(s);
}

static void do_accept(void)
{
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct gstream *s = NULL;
        uint32_t open = 0;
        for (size_t i = 0; i < EPH_GTUNNEL_MAX_STREAMS; i++) {
            if (streams[i].fd >= 0)
                open++;
            else if (!s)
                s = &streams[i];
        }
        if (!s || open >= max_streams) {
            /* Over the run's cap: the program sees its connection refused at once. */
            static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                                       "application/json\r\nConnection: close\r\n\r\n"
                                       "{\"error\": {\"type\": \"rate_limit_error\", \"code\": "
                                       "\"too_many_tunnels\", \"message\": \"too many concurrent "
                                       "connections through the proxy\"}}\n";
            (void)!write(fd, busy, sizeof(busy) - 1);
            close(fd);
            continue;
        }
        s->buf = malloc(EPH_PROTO_TUNNEL_WINDOW_SIZE);
        if (!s->buf) {
            close(fd);
            continue;
        }
        /* Each answer goes to the program as soon as it crosses the channel: no Nagle wait. */
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        s->fd = fd;
        s->id = next_id;
        next_id += 2;
        if (next_id < 2)
            next_id = 1;
        s->credit = EPH_PROTO_TUNNEL_WINDOW_SIZE;
        int n = eph_proto_raw_encode(ttx, sizeof(ttx), EPH_PROTO_TUNNEL_OPEN, 0, s->id, NULL, 0);
        if (n > 0)
            send_frame(ttx, (size_t)n);
    }
}

size_t eph_gtunnel_pollfds(struct pollfd *pfd, size_t max)
{
    size_t n = 0;
    if (listen_fd < 0 || max == 0)
        return 0;
    pfd[n++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
    for (size_t i = 0; i < EPH_GTUNNEL_MAX_STREAMS && n < max; i++) {
        struct gstream *s = &streams[i];
        short ev = 0;
        if (s->fd < 0)
            continue;
        if (s->credit > 0 && !s->sock_eof)
            ev |= POLLIN;
        if (s->off < s->len)
            ev |= POLLOUT;
        /* Nothing to do until the host grants credit or sends data: not polled at all, so a
         * hangup the stream cannot act on yet does not spin the loop. */
        if (ev)
            pfd[n++] = (struct pollfd){.fd = s->fd, .events = ev};
    }
    return n;
}

static void stream_read(struct gstream *s)
{
    size_t want = s->credit < EPH_PROTO_CHUNK ? s->credit : EPH_PROTO_CHUNK;
    ssize_t r = read(s->fd, ttx + EPH_PROTO_HEADER_SIZE, want);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r < 0) {
        stream_reset(s);
        return;
    }
    if (r == 0) {
        s->sock_eof = true;
        send_u32(EPH_PROTO_TUNNEL_CLOSE, s->id, EPH_PROTO_CLOSE_WRITE);
        stream_maybe_done(s);
        return;
    }
    eph_proto_header_encode(ttx, EPH_PROTO_TUNNEL_DATA, 0, s->id, (uint32_t)r);
    send_frame(ttx, EPH_PROTO_HEADER_SIZE + (size_t)r);
    s->credit -= (uint32_t)r;
}

static void stream_write(struct gstream *s)
{
    while (s->off < s->len) {
        ssize_t w = send(s->fd, s->buf + s->off, s->len - s->off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0) {
            stream_reset(s);
            return;
        }
        s->off += (size_t)w;
        s->ungranted += (uint32_t)w;
    }
    if (s->off == s->len)
        s->off = s->len = 0;
    if (s->ungranted >= GRANT_STEP || (s->len == 0 && s->ungranted > 0)) {
        send_u32(EPH_PROTO_TUNNEL_WINDOW, s->id, s->ungranted);
        s->ungranted = 0;
    }
    if (s->host_eof && s->len == 0 && !s->shut_wr) {
        shutdown(s->fd, SHUT_WR);
        s->shut_wr = true;
    }
    stream_maybe_done(s);
}

void eph_gtunnel_service(const struct pollfd *pfd, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!pfd[i].revents)
            continue;
        if (pfd[i].fd == listen_fd) {
            do_accept();
            continue;
        }
        struct gstream *s = NULL;
        for (size_t k = 0; k < EPH_GTUNNEL_MAX_STREAMS; k++)
            if (streams[k].fd == pfd[i].fd)
                s = &streams[k];
        if (!s)
            continue;
        if (pfd[i].revents & (POLLOUT | POLLERR | POLLHUP))
            stream_write(s);
        if (s->fd == pfd[i].fd && (pfd[i].revents & (POLLIN | POLLERR | POLLHUP)) && !s->sock_eof &&
            s->credit > 0)
            stream_read(s);
    }
}

void eph_gtunnel_frame(const struct eph_proto_frame *f)
{
    struct gstream *s = stream_find(f->hdr.id);
    uint32_t v;
    if (!s)
        return;
    switch (f->hdr.type) {
    case EPH_PROTO_TUNNEL_DATA:
        if (s->host_eof) {
            stream_reset(s);
            return;
        }
        if (s->off && s->len + f->hdr.length > EPH_PROTO_TUNNEL_WINDOW_SIZE) {
            memmove(s->buf, s->buf + s->off, s->len - s->off);
            s->len -= s->off;
            s->off = 0;
        }
        if (s->len + f->hdr.length > EPH_PROTO_TUNNEL_WINDOW_SIZE) {
            stream_reset(s); /* more than the credit we gave */
            return;
        }
        memcpy(s->buf + s->len, f->payload, f->hdr.length);
        s->len += f->hdr.length;
        stream_write(s);
        break;
    case EPH_PROTO_TUNNEL_WINDOW:
        if (eph_proto_tunnel_u32_decode(f->hdr.type, f->payload, f->hdr.length, &v))
            return;
        s->credit = s->credit + v > EPH_PROTO_TUNNEL_WINDOW_SIZE ? EPH_PROTO_TUNNEL_WINDOW_SIZE
                                                                 : s->credit + v;
        break;
    case EPH_PROTO_TUNNEL_CLOSE:
        if (eph_proto_tunnel_u32_decode(f->hdr.type, f->payload, f->hdr.length, &v))
            return;
        if (v == EPH_PROTO_CLOSE_RESET) {
            stream_free(s);
            return;
        }
        s->host_eof = true;
        stream_write(s);
        break;
    default:
        break;
    }
}
