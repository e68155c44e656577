/*
 * broker_resolve.c - one run's broker: the SSRF guard around libcurl's resolver and connect
 * (guard.h, pin.h). See docs/BROKER.md.
 */
#include "broker/broker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>

#include "broker/answer.h"
#include "broker/broker_private.h"
#include "broker/event.h"
#include "broker/html.h"
#include "broker/http.h"
#include "broker/meter.h"
#include "broker/pin.h"
#include "broker/policy.h"
#include "broker/redact.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"

/* ---- the SSRF guard around a resolver (guard.h) ------------------------------------------ */

/* What a web request (broker.web_private_cidrs) or a connection (broker.allow_private_cidrs) may
 * reach; never the server's own sockets. */
struct eph_guard bk_guard_of(const struct eph_broker *b, bool web)
{
    return (struct eph_guard){.allow = web ? b->s.web_private : b->s.allow_private,
                              .nallow = web ? b->s.nweb_private : b->s.nallow_private,
                              .own = &b->s.own};
}

/* The message of a refused address (eph_guard_resolve's -EACCES or -EPERM). */
static void refusal_text(int r, enum eph_addr_class cls, char *msg, size_t len)
{
    if (r == -EPERM)
        snprintf(msg, len, "the address is the server's own");
    else
        snprintf(msg, len, "the address is not public (%s)", eph_addr_class_name(cls));
}

/* Connects to exactly the address checked. */
static int connect_to(const struct bstream *s, const struct eph_addr *a, unsigned port,
                      uint64_t deadline_ns, int *out)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        memcpy(&in->sin_addr, a->bytes, 4);
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        memcpy(&in6->sin6_addr, a->bytes, 16);
        len = sizeof(*in6);
    }
    int fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return -e;
    }
    int rc = bk_wait_fd(s, fd, POLLOUT, deadline_ns);
    int err = 0;
    socklen_t el = sizeof(err);
    if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err)
        rc = -err;
    if (rc) {
        close(fd);
        return rc;
    }
    /* The broker writes what it has when it has it (a head, then a body; a relayed read): no
     * Nagle wait for an ACK the upstream may delay. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* out is the stream's upstream socket, which eph_broker_close shuts under the lock. */
    pthread_mutex_lock(&s->b->lock);
    *out = fd;
    pthread_mutex_unlock(&s->b->lock);
    return 0;
}

/* Resolves, guards and connects for a web request; answers the program on failure. */
static int web_connect(struct req_ctx *rc, const struct eph_http_authority *auth)
{
    struct eph_broker *b = rc->s->b;
    snprintf(rc->host, sizeof(rc->host), "%s", auth->host.name);
    rc->ev.port = auth->port;
    if (b->nweb_allow && !eph_policy_domain_allowed(
                             auth->host.name, (const char *const *)b->web_allow, b->nweb_allow)) {
        bk_answer_error(rc, 403, "permission_error", "host_not_allowed",
                        "this run may not reach that host");
        return -EACCES;
    }
    struct eph_addr a;
    enum eph_addr_class cls;
    struct eph_guard g = bk_guard_of(b, true);
    int r = eph_guard_resolve(&g, &auth->host, auth->port, &a, &cls);
    if (r == -EACCES || r == -EPERM) {
        char msg[128];
        refusal_text(r, cls, msg, sizeof(msg));
        bk_answer_error(rc, 403, "permission_error", "address_not_allowed", msg);
        return r;
    }
    if (r) {
        bk_answer_error(rc, 502, "api_error", "dns_failed", "the host name does not resolve");
        return r;
    }
    r = connect_to(rc->s, &a, auth->port, rc->deadline_ns, &rc->s->up);
    if (r) {
        bk_answer_error(rc, r == -ETIMEDOUT ? 504 : 502, "api_error", "connect_failed",
                        "cannot connect to the upstream");
        return r;
    }
    return 0;
}

/* Relays both ways until both sides are done, the time is up or a write fails, through buf
 * (RELAY_CHUNK bytes, freed here: the caller makes it before it answers the program anything). The
 * first response line seen from upstream sets the event's status (when parse_status). */
/* A relay moves up to this much per system call: on a machine where every wake-up is dear (a VM),
 * fewer, larger reads carry a bulk transfer with fewer of them. */
#define RELAY_CHUNK (4 * IO_CHUNK)

void bk_relay(struct req_ctx *rc, char *buf, const char *pending, size_t npending,
              bool parse_status, bool upward)
{
    int fd = rc->s->fd, up = rc->s->up;
    bool down_open = true, up_open = upward;
    char status_line[16];
    size_t status_have = 0;
    if (npending && bk_write_all(rc->s, up, pending, npending, rc->deadline_ns) == 0)
        rc->ev.bytes_up += npending;
    /* A request whose body the broker forwarded already (!upward) reads the answer only. */
    while (down_open || up_open) {
        /* The program's side is polled even when nothing more is read from it: its hang-up (a
         * reset from the sandbox) ends the relay at once. */
        struct pollfd p[2] = {
            {.fd = up_open || bk_watch_program(rc->s) ? fd : -1, .events = up_open ? POLLIN : 0},
            {.fd = down_open ? up : -1, .events = POLLIN}};
        uint64_t now = eph_clock_mono_ns();
        if (now >= rc->deadline_ns || atomic_load(&rc->s->b->closing))
            break;
        uint64_t ms = (rc->deadline_ns - now) / 1000000u + 1;
        int n = poll(p, 2, ms > 60000 ? 60000 : (int)ms);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (bk_watch_program(rc->s) && (p[0].revents & (POLLHUP | POLLERR)))
            break; /* the program is gone: what it sent last goes nowhere */
        if (up_open && p[0].revents) {
            ssize_t r = recv(fd, buf, RELAY_CHUNK, MSG_DONTWAIT);
            if (r > 0) {
                if (bk_write_all(rc->s, up, buf, (size_t)r, rc->deadline_ns))
                    break;
                rc->ev.bytes_up += (uint64_t)r;
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                up_open = false;
                shutdown(up, SHUT_WR);
            }
        }
        if (p[1].revents) {
            ssize_t r = recv(up, buf, RELAY_CHUNK, MSG_DONTWAIT);
            if (r > 0) {
                if (parse_status && status_have < sizeof(status_line)) {
                    size_t take = sizeof(status_line) - status_have;
                    if (take > (size_t)r)
                        take = (size_t)r;
                    memcpy(status_line + status_have, buf, take);
                    status_have += take;
                    if (status_have >= 12 && memcmp(status_line, "HTTP/1.", 7) == 0)
                        rc->ev.status = atoi(status_line + 9);
                }
                if (bk_to_program(rc, buf, (size_t)r))
                    break;
                rc->ev.bytes_down += (uint64_t)r;
                if (rc->ev.bytes_down > rc->s->b->s.max_response_bytes)
                    break;
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                down_open = false;
                rc->s->fd_shut = true; /* from now on a hang-up may be this shutdown's */
                shutdown(fd, SHUT_WR);
            }
        }
    }
    free(buf);
}

/* Headers never forwarded as the client wrote them: hop-by-hop ones (RFC 9110 7.6.1), the
 * proxy's own, and the framing the broker sets itself. */
bool bk_hop_by_hop(const struct eph_http_header *h)
{
    static const char *const names[] = {"connection",
                                        "keep-alive",
                                        "proxy-connection",
                                        "proxy-authorization",
                                        "proxy-authenticate",
                                        "te",
                                        "trailer",
                                        "upgrade",
                                        "host"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (h->name_len == strlen(names[i]) && strncasecmp(h->name, names[i], h->name_len) == 0)
            return true;
    return false;
}

/* The body's framing, which the broker sets itself after reading the body whole. */
bool bk_is_framing(const struct eph_http_header *h)
{
    return (h->name_len == 14 && strncasecmp(h->name, "content-length", 14) == 0) ||
           (h->name_len == 17 && strncasecmp(h->name, "transfer-encoding", 17) == 0);
}

int bk_read_body(struct req_ctx *rc, const struct eph_http_request *req, const char *after,
                 size_t nafter, struct eph_buf *body);

/* A plain-HTTP web request in absolute form: rebuilt from its parts and sent to the checked
 * address; the answer relayed as it comes. */
void bk_serve_web_http(struct req_ctx *rc, const struct eph_http_request *req,
                       const char *after_head, size_t nafter)
{
    struct eph_http_url u;
    rc->ev.scheme = "http";
    if (eph_http_parse_url(req->target, req->target_len, &u) || u.https) {
        bk_answer_error(rc, 400, "invalid_request_error", "bad_target",
                        "use an absolute http:// URL, or CONNECT for https");
        return;
    }
    size_t pl = u.path_len < sizeof(rc->path) - 1 ? u.path_len : sizeof(rc->path) - 1;
    memcpy(rc->path, u.path, pl);
    rc->path[pl] = '\0';
    struct eph_buf body;
    memset(&body, 0, sizeof(body));
    if (bk_read_body(rc, req, after_head, nafter, &body) || web_connect(rc, &u.auth)) {
        eph_buf_release(&body);
        return;
    }
    struct eph_buf head;
    eph_buf_init(&head, EPH_HTTP_MAX_HEAD + 1024);
    int r = eph_buf_appendf(&head, "%.*s %.*s%s%.*s HTTP/1.1\r\nHost: %s", (int)req->method_len,
                            req->method, (int)u.path_len, u.path, u.query ? "?" : "",
                            (int)u.query_len, u.query ? u.query : "", u.auth.host.name);
    if (!r && u.auth.port != 80)
        r = eph_buf_appendf(&head, ":%u", u.auth.port);
    if (!r)
        r = eph_buf_appends(&head, "\r\n");
    for (size_t i = 0; !r && i < req->nheaders; i++) {
        const struct eph_http_header *h = &req->headers[i];
        if (bk_hop_by_hop(h) || bk_is_framing(h))
            continue;
        r = eph_buf_appendf(&head, "%.*s: %.*s\r\n", (int)h->name_len, h->name, (int)h->value_len,
                            h->value);
    }
    /* The body was read whole (a chunked one de-chunked): it goes with its length. */
    if (!r && (body.len || eph_http_header_find(req, "Content-Length", NULL) ||
               eph_http_header_find(req, "Transfer-Encoding", NULL)))
        r = eph_buf_appendf(&head, "Content-Length: %zu\r\n", body.len);
    if (!r)
        r = eph_buf_appends(&head, "Connection: close\r\n\r\n");
    char *buf = r ? NULL : malloc(RELAY_CHUNK);
    if (!buf) {
        eph_buf_release(&head);
        eph_buf_release(&body);
        if (r == -EMSGSIZE)
            bk_answer_error(rc, 400, "invalid_request_error", "bad_request",
                            "request head too large");
        else /* out of memory */
            bk_answer_error(rc, 502, "api_error", "broker_error", "the broker could not relay");
        return;
    }
    if (bk_write_all(rc->s, rc->s->up, head.data, head.len, rc->deadline_ns) == 0)
        rc->ev.bytes_up += head.len;
    eph_buf_release(&head);
    if (body.len)
        (void)bk_write_all(rc->s, rc->s->up, body.data, body.len,
                           rc->deadline_ns); /* counted when read */
    eph_buf_release(&body);
    rc->ev.status = 502;
    bk_relay(rc, buf, NULL, 0, true, false);
}

void bk_serve_connect(struct req_ctx *rc, const struct eph_http_request *req,
                      const char *after_head, size_t nafter)
{
    struct eph_http_authority auth;
    rc->ev.scheme = "tunnel";
    if (eph_http_parse_authority(req->target, req->target_len, 0, &auth)) {
        bk_answer_error(rc, 400, "invalid_request_error", "bad_target", "CONNECT needs host:port");
        return;
    }
    rc->path[0] = '\0';
    if (web_connect(rc, &auth))
        return;
    char *buf = malloc(RELAY_CHUNK);
    if (!buf) {
        bk_answer_error(rc, 502, "api_error", "broker_error", "the broker could not relay");
        return;
    }
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (bk_write_all(rc->s, rc->s->fd, ok, sizeof(ok) - 1, rc->deadline_ns)) {
        free(buf);
        return;
    }
    rc->ev.status = 200;
    bk_relay(rc, buf, after_head, nafter, false, true);
}
