/*
 * guard.c - where the broker may connect. See guard.h.
 */
#include "broker/guard.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

/* An IPv4-mapped address reaches its IPv4 address: every comparison is made on that one. */
static struct eph_addr unmapped(const struct eph_addr *a)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    struct eph_addr v = *a;
    if (v.family == AF_INET6 && memcmp(v.bytes, mapped, 12) == 0) {
        memmove(v.bytes, v.bytes + 12, 4);
        memset(v.bytes + 4, 0, 12);
        v.family = AF_INET;
    }
    return v;
}

static bool same_addr(const struct eph_addr *a, const struct eph_addr *b)
{
    return a->family == b->family && memcmp(a->bytes, b->bytes, a->family == AF_INET ? 4 : 16) == 0;
}

socklen_t eph_guard_sockaddr(const struct eph_addr *a, uint16_t port, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof(*out));
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)out;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        memcpy(&in->sin_addr, a->bytes, 4);
        return sizeof(*in);
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    memcpy(&in6->sin6_addr, a->bytes, 16);
    return sizeof(*in6);
}

bool eph_guard_is_local(const struct eph_addr *addr)
{
    struct eph_addr a = unmapped(addr);
    enum eph_addr_class c = eph_addr_classify(&a);
    if (c == EPH_ADDR_LOOPBACK || c == EPH_ADDR_UNSPECIFIED)
        return true;
    /* The kernel knows this host's addresses as they are now: only a local one can be bound. */
    struct sockaddr_storage ss;
    socklen_t len = eph_guard_sockaddr(&a, 0, &ss);
    int fd = socket(a.family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true;
    int rc = bind(fd, (struct sockaddr *)&ss, len);
    int e = errno;
    close(fd);
    return rc == 0 || e != EADDRNOTAVAIL;
}

int eph_guard_own_add(struct eph_guard_own *o, const struct sockaddr *sa)
{
    struct eph_addr a;
    if (eph_addr_from_sockaddr(sa, &a))
        return -EAFNOSUPPORT;
    uint16_t port = sa->sa_family == AF_INET
                        ? ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port)
                        : ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
    if (port == 0)
        return -EINVAL;
    if (o->n == EPH_GUARD_MAX_OWN)
        return -ENOSPC;
    o->addr[o->n] = unmapped(&a);
    o->port[o->n] = port;
    o->local[o->n] = eph_guard_is_local(&o->addr[o->n]);
    o->n++;
    return 0;
}

bool eph_guard_own_match(const struct eph_guard_own *o, const struct eph_addr *addr, uint16_t port)
{
    if (!o)
        return false;
    struct eph_addr a = unmapped(addr);
    int local = -1; /* asked of the kernel once, and only when a port matches */
    for (size_t i = 0; i < o->n; i++) {
        if (o->port[i] != port)
            continue;
        if (same_addr(&o->addr[i], &a))
            return true;
        if (o->local[i]) {
            if (local < 0)
                local = eph_guard_is_local(&a);
            if (local)
                return true;
        }
    }
    return false;
}

int eph_guard_check(const struct eph_guard *g, const struct eph_addr *a, uint16_t port,
                    enum eph_addr_class *cls)
{
    enum eph_addr_class c;
    int rc = eph_addr_check(a, g->allow, g->nallow, &c);
    if (cls)
        *cls = c;
    if (rc)
        return rc;
    return eph_guard_own_match(g->own, a, port) ? -EPERM : 0;
}

int eph_guard_resolve(const struct eph_guard *g, const struct eph_host *host, uint16_t port,
                      struct eph_addr *out, enum eph_addr_class *cls)
{
    enum eph_addr_class c = EPH_ADDR_PUBLIC;
    if (host->literal) {
        *out = host->addr;
        return eph_guard_check(g, out, port, cls);
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gr = getaddrinfo(host->name, NULL, &hints, &res);
    if (gr != 0 || !res)
        return -ENOENT;
    int rc = -ENOENT;
    bool have = false;
    /* Every answer must pass: a name that also points inside is refused, whichever answer a
     * later lookup would have given. */
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        struct eph_addr a;
        if (eph_addr_from_sockaddr(ai->ai_addr, &a))
            continue;
        enum eph_addr_class ac;
        int r = eph_guard_check(g, &a, port, &ac);
        if (r) {
            c = ac;
            rc = r;
            break;
        }
        if (!have) {
            *out = a;
            have = true;
            rc = 0;
        }
    }
    freeaddrinfo(res);
    if (cls)
        *cls = c;
    return rc;
}
