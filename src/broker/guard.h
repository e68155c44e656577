/*
 * guard.h - where the broker may connect: the SSRF guard around the resolver (docs/BROKER.md,
 * docs/BROKER.md).
 *
 * A destination is an address and a port. It is refused when the address is not public and not
 * in the ranges the operator opened for that kind of request (broker.web_private_cidrs for web,
 * broker.allow_private_cidrs for connections), and, whatever those ranges say, when it is one of
 * the server's own sockets: its API listener (which serves /metrics too) and its store's server.
 * A socket the server knows by a local address (loopback, an address of this host, or the
 * unspecified 0.0.0.0 / ::, which listens on all of them) is matched at every local address at
 * its port, since any of them reaches it.
 */
#ifndef EPH_BROKER_GUARD_H
#define EPH_BROKER_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "broker/addr.h"

#define EPH_GUARD_MAX_OWN 16

/* The server's own sockets, learnt at start-up (run/egress.h) and copied into each broker. */
struct eph_guard_own {
    struct eph_addr addr[EPH_GUARD_MAX_OWN];
    uint16_t port[EPH_GUARD_MAX_OWN];
    bool local[EPH_GUARD_MAX_OWN]; /* a local address: matches every local address at port */
    size_t n;
};

/* Adds an IPv4 or IPv6 socket address (an IPv4-mapped one as its IPv4 address): 0, -ENOSPC when
 * the list is full, -EAFNOSUPPORT for another family (a Unix socket reaches nothing of the
 * broker's), -EINVAL for port 0. */
int eph_guard_own_add(struct eph_guard_own *o, const struct sockaddr *sa)
    __attribute__((warn_unused_result));
/* Whether address:port is one of them. */
bool eph_guard_own_match(const struct eph_guard_own *o, const struct eph_addr *a, uint16_t port);

/* The socket address of a:port, and its length. */
socklen_t eph_guard_sockaddr(const struct eph_addr *a, uint16_t port, struct sockaddr_storage *out);

/* Whether an address belongs to this host: unspecified, loopback, or an address a socket can be
 * bound to now. When the host cannot tell (no descriptor left), it says yes: the guard refuses. */
bool eph_guard_is_local(const struct eph_addr *a);

/* What one kind of request may reach. */
struct eph_guard {
    const struct eph_cidr *allow; /* the non-public ranges opened for it */
    size_t nallow;
    const struct eph_guard_own *own; /* may be NULL */
};

/* The whole check of one destination: 0 when the broker may connect to a:port; -EACCES when the
 * address is not public and not opened (*cls says its class); -EPERM when it is one of the
 * server's own sockets, whatever the ranges say. cls may be NULL. */
int eph_guard_check(const struct eph_guard *g, const struct eph_addr *a, uint16_t port,
                    enum eph_addr_class *cls) __attribute__((warn_unused_result));

/* Resolves host on the host (getaddrinfo; a literal is its own answer) and checks every address
 * at port: 0 with the address to connect to (the first), the error of eph_guard_check when any
 * address is refused (a name that also points inside is refused, whichever answer a later lookup
 * would give), -ENOENT when the name does not resolve. */
int eph_guard_resolve(const struct eph_guard *g, const struct eph_host *host, uint16_t port,
                      struct eph_addr *out, enum eph_addr_class *cls)
    __attribute__((warn_unused_result));

#endif
