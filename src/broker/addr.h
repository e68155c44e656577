/*
 * addr.h - the SSRF guard: hosts and addresses as the broker sees them (docs/BROKER.md).
 *
 * Pure code: no resolver, no socket. A host from the sandbox is either an IP literal, parsed here
 * the way the C library and browsers would read it (so that no spelling means one address to this
 * check and another to a resolver), or a DNS name, validated and lowercased. An address is then
 * classified; only EPH_ADDR_PUBLIC is reachable, unless the operator's allow-list for that kind of
 * request (broker.web_private_cidrs, broker.allow_private_cidrs) contains it. guard.h adds the
 * resolver and the server's own sockets.
 */
#ifndef EPH_BROKER_ADDR_H
#define EPH_BROKER_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An IPv4 or IPv6 address. IPv4 is kept in bytes[0..3]. */
struct eph_addr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t bytes[16];
};

enum eph_addr_class {
    EPH_ADDR_PUBLIC = 0,
    EPH_ADDR_UNSPECIFIED,   /* 0.0.0.0, :: */
    EPH_ADDR_LOOPBACK,      /* 127/8, ::1 */
    EPH_ADDR_PRIVATE,       /* RFC 1918, fc00::/7 (ULA), fec0::/10 (site-local) */
    EPH_ADDR_SHARED,        /* 100.64/10 (carrier-grade NAT) */
    EPH_ADDR_LINK_LOCAL,    /* 169.254/16 (cloud metadata), fe80::/10 */
    EPH_ADDR_MULTICAST,     /* 224/4, ff00::/8 */
    EPH_ADDR_BROADCAST,     /* 255.255.255.255 */
    EPH_ADDR_DOCUMENTATION, /* 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20 */
    EPH_ADDR_RESERVED,      /* everything else no one may reach: 0/8, 240/4, 192.0.0/24,
                             * 198.18/15, 192.88.99/24, ::/96, 100::/64, 2001::/23, outside
                             * 2000::/3, ... */
};

/* The longest text form, with its NUL. */
#define EPH_ADDR_STRLEN 46
/* The longest DNS name, without a trailing dot, with its NUL. */
#define EPH_HOST_NAME_MAX 254

/* A host as the sandbox wrote it (in a URL, a Host header or a CONNECT target). */
struct eph_host {
    bool literal; /* an IP literal: addr is set */
    struct eph_addr addr;
    char name[EPH_HOST_NAME_MAX]; /* a DNS name: lowercase, no trailing dot; or the literal's
                                   * canonical text form */
};

/* Parses a host (len bytes, not NUL-terminated; an IPv6 literal without its brackets). Returns 0,
 * or -EINVAL for anything that is neither a valid IP literal nor a valid DNS name: empty, too long,
 * a character outside [A-Za-z0-9-_.], an empty or over-long label, a zone id, or a name whose last
 * label is a number but which is not a valid IPv4 address in any spelling ("1.2.3.256",
 * "0x1g"). IPv4 accepts every spelling inet_aton and browsers do: 1 to 4 parts, each decimal,
 * octal (leading 0) or hex (0x), the last filling the remaining bytes (2130706434, 0x7f000002,
 * 0177.0.0.2, 127.1), and one trailing dot. */
int eph_host_parse(const char *s, size_t len, struct eph_host *out)
    __attribute__((warn_unused_result));

/* Parses a whole string as an address literal (the forms above, or IPv6): 0 or -EINVAL. */
int eph_addr_parse(const char *s, struct eph_addr *out) __attribute__((warn_unused_result));

/* The class of an address. An IPv4-mapped address (::ffff:a.b.c.d) and a NAT64 one
 * (64:ff9b::a.b.c.d) are the class of the IPv4 address inside; 6to4 (2002::/16) likewise, unless
 * that is public; IPv4-compatible (::a.b.c.d), IPv4-translated, local NAT64 (64:ff9b:1::/48) and
 * Teredo are reserved. */
enum eph_addr_class eph_addr_classify(const struct eph_addr *a);
const char *eph_addr_class_name(enum eph_addr_class c);

/* The canonical text form (inet_ntop; an IPv4-mapped address as ::ffff:a.b.c.d). */
void eph_addr_format(const struct eph_addr *a, char out[EPH_ADDR_STRLEN]);
/* From a resolver's answer: 0, or -EAFNOSUPPORT for a family other than IPv4 and IPv6. */
int eph_addr_from_sockaddr(const struct sockaddr *sa, struct eph_addr *out)
    __attribute__((warn_unused_result));

/* An allow-list entry of broker.allow_private_cidrs or broker.web_private_cidrs. */
struct eph_cidr {
    struct eph_addr net;
    unsigned prefix;
};

/* Parses "a.b.c.d/n" (plain dotted decimal) or "v6/n"; a missing "/n" is a single address.
 * -EINVAL when malformed or when bits are set past the prefix (a typo, not a wish). */
int eph_cidr_parse(const char *s, struct eph_cidr *out) __attribute__((warn_unused_result));
bool eph_cidr_contains(const struct eph_cidr *c, const struct eph_addr *a);

/* The guard: 0 when the broker may connect to a (public, or in one of the n allowed ranges),
 * -EACCES when not. An IPv4-mapped address is checked as its IPv4 address. *cls (may be NULL)
 * gets the class. */
int eph_addr_check(const struct eph_addr *a, const struct eph_cidr *allow, size_t n,
                   enum eph_addr_class *cls) __attribute__((warn_unused_result));

#endif
