/*
 * addr.c - the SSRF guard. See addr.h.
 */
#include "broker/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

/* ---- IPv4 in every spelling ------------------------------------------------------------- */

/* One part of an IPv4 literal: decimal, octal (leading 0) or hex (0x). -EINVAL when it is not a
 * number in its base or exceeds 32 bits. */
static int v4_part(const char *s, size_t n, uint64_t *out)
{
    unsigned base = 10;
    if (n == 0)
        return -EINVAL;
    if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        n -= 2;
    } else if (n >= 2 && s[0] == '0') {
        base = 8;
        s++;
        n--;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d;
        char c = s[i];
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -EINVAL;
        if (d >= base)
            return -EINVAL;
        v = v * base + d;
        if (v > 0xffffffffu)
            return -EINVAL;
    }
    *out = v; /* "0x" alone is 0, as browsers read it */
    return 0;
}

/* An IPv4 literal of 1 to 4 parts (one trailing dot already removed). */
static int v4_parse(const char *s, size_t n, uint8_t out[4])
{
    uint64_t parts[4];
    size_t count = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.')
            continue;
        if (count == 4)
            return -EINVAL;
        if (v4_part(s + start, i - start, &parts[count]))
            return -EINVAL;
        count++;
        start = i + 1;
    }
    /* Every part but the last is one byte; the last fills the bytes that remain. */
    for (size_t i = 0; i + 1 < count; i++)
        if (parts[i] > 255)
            return -EINVAL;
    unsigned last_bytes = 5 - (unsigned)count;
    if (last_bytes < 4 && parts[count - 1] >> (8 * last_bytes))
        return -EINVAL;
    uint32_t v = (uint32_t)parts[count - 1];
    for (size_t i = 0; i + 1 < count; i++)
        v |= (uint32_t)parts[i] << (8 * (3 - i));
    out[0] = (uint8_t)(v >> 24);
    out[1] = (uint8_t)(v >> 16);
    out[2] = (uint8_t)(v >> 8);
    out[3] = (uint8_t)v;
    return 0;
}

/* Whether a label reads as a number (browsers' "ends in a number"): all decimal digits, or 0x
 * followed by hex digits. A host whose last label is one must be a valid IPv4 literal. */
static bool label_is_number(const char *s, size_t n)
{
    if (n == 0)
        return false;
    if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        for (size_t i = 2; i < n; i++) {
            char c = s[i];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
                return false;
        }
        return true;
    }
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

static int v6_parse(const char *s, size_t n, uint8_t out[16])
{
    char tmp[EPH_ADDR_STRLEN];
    if (n == 0 || n >= sizeof(tmp) || memchr(s, '%', n))
        return -EINVAL; /* zone ids name an interface of the host: never */
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    return inet_pton(AF_INET6, tmp, out) == 1 ? 0 : -EINVAL;
}

int eph_host_parse(const char *s, size_t len, struct eph_host *out)
{
    memset(out, 0, sizeof(*out));
    if (len == 0 || memchr(s, '\0', len))
        return -EINVAL;
    if (memchr(s, ':', len)) {
        if (v6_parse(s, len, out->addr.bytes))
            return -EINVAL;
        out->literal = true;
        out->addr.family = AF_INET6;
        eph_addr_format(&out->addr, out->name);
        return 0;
    }
    if (s[len - 1] == '.')
        len--; /* one trailing dot: the same name, fully qualified */
    if (len == 0 || len >= EPH_HOST_NAME_MAX)
        return -EINVAL;
    size_t last = len;
    while (last > 0 && s[last - 1] != '.')
        last--;
    if (label_is_number(s + last, len - last)) {
        if (v4_parse(s, len, out->addr.bytes))
            return -EINVAL;
        out->literal = true;
        out->addr.family = AF_INET;
        eph_addr_format(&out->addr, out->name);
        return 0;
    }
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0)
                return -EINVAL;
            label = 0;
        } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') {
            label++;
        } else if (c >= 'A' && c <= 'Z') {
            c = (char)(c - 'A' + 'a');
            label++;
        } else {
            return -EINVAL;
        }
        if (label > 63)
            return -EINVAL;
        out->name[i] = c;
    }
    if (label == 0)
        return -EINVAL;
    out->name[len] = '\0';
    return 0;
}

int eph_addr_parse(const char *s, struct eph_addr *out)
{
    struct eph_host h;
    if (eph_host_parse(s, strlen(s), &h) || !h.literal)
        return -EINVAL;
    *out = h.addr;
    return 0;
}

/* ---- classes ---------------------------------------------------------------------------- */

struct range4 {
    uint32_t net;
    unsigned prefix;
    enum eph_addr_class cls;
};

/* Every IPv4 range that is not public (IANA special-purpose registry), most specific first. */
static const struct range4 v4_ranges[] = {
    {0x00000000u, 32, EPH_ADDR_UNSPECIFIED},   /* 0.0.0.0 */
    {0x00000000u, 8, EPH_ADDR_RESERVED},       /* "this network" */
    {0x0a000000u, 8, EPH_ADDR_PRIVATE},        /* 10/8 */
    {0x64400000u, 10, EPH_ADDR_SHARED},        /* 100.64/10 */
    {0x7f000000u, 8, EPH_ADDR_LOOPBACK},       /* 127/8 */
    {0xa9fe0000u, 16, EPH_ADDR_LINK_LOCAL},    /* 169.254/16 */
    {0xac100000u, 12, EPH_ADDR_PRIVATE},       /* 172.16/12 */
    {0xc0000000u, 24, EPH_ADDR_RESERVED},      /* 192.0.0/24, IETF protocol assignments */
    {0xc0000200u, 24, EPH_ADDR_DOCUMENTATION}, /* 192.0.2/24 */
    {0xc0586300u, 24, EPH_ADDR_RESERVED},      /* 192.88.99/24, 6to4 relay anycast */
    {0xc0a80000u, 16, EPH_ADDR_PRIVATE},       /* 192.168/16 */
    {0xc6120000u, 15, EPH_ADDR_RESERVED},      /* 198.18/15, benchmarking */
    {0xc6336400u, 24, EPH_ADDR_DOCUMENTATION}, /* 198.51.100/24 */
    {0xcb007100u, 24, EPH_ADDR_DOCUMENTATION}, /* 203.0.113/24 */
    {0xe0000000u, 4, EPH_ADDR_MULTICAST},      /* 224/4 */
    {0xffffffffu, 32, EPH_ADDR_BROADCAST},     /* 255.255.255.255 */
    {0xf0000000u, 4, EPH_ADDR_RESERVED},       /* 240/4 */
};

static enum eph_addr_class classify_v4(const uint8_t b[4])
{
    uint32_t v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    for (size_t i = 0; i < sizeof(v4_ranges) / sizeof(v4_ranges[0]); i++) {
        uint32_t mask = v4_ranges[i].prefix ? ~0u << (32 - v4_ranges[i].prefix) : 0;
        if ((v & mask) == v4_ranges[i].net)
            return v4_ranges[i].cls;
    }
    return EPH_ADDR_PUBLIC;
}

static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned bits)
{
    size_t whole = bits / 8;
    if (memcmp(a, net, whole) != 0)
        return false;
    unsigned rest = bits % 8;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (a[whole] & mask) == (net[whole] & mask);
}

static bool is_mapped(const uint8_t b[16])
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(b, mapped, 12) == 0;
}

static enum eph_addr_class classify_v6(const uint8_t b[16])
{
    static const uint8_t zero[16] = {0};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    /* Prefixes, each 16 bytes so that prefix_match never reads past one. */
    static const uint8_t nat64_local[16] = {0, 0x64, 0xff, 0x9b, 0, 1};
    static const uint8_t translated[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t discard[16] = {0x01};
    static const uint8_t doc[16] = {0x20, 0x01, 0x0d, 0xb8};
    static const uint8_t doc2[16] = {0x3f, 0xff}; /* 3fff::/20 */
    static const uint8_t ietf[16] = {0x20, 0x01}; /* 2001::/23 */
    static const uint8_t sixtofour[16] = {0x20, 0x02};

    if (memcmp(b, zero, 16) == 0)
        return EPH_ADDR_UNSPECIFIED;
    if (memcmp(b, zero, 15) == 0 && b[15] == 1)
        return EPH_ADDR_LOOPBACK;
    if (is_mapped(b) || memcmp(b, nat64, 12) == 0)
        return classify_v4(b + 12);
    if (prefix_match(b, zero, 96) || prefix_match(b, translated, 96) ||
        prefix_match(b, nat64_local, 48) || prefix_match(b, discard, 64))
        return EPH_ADDR_RESERVED;
    if (b[0] == 0xff)
        return EPH_ADDR_MULTICAST;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return EPH_ADDR_LINK_LOCAL;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0)
        return EPH_ADDR_PRIVATE; /* site-local, deprecated */
    if ((b[0] & 0xfe) == 0xfc)
        return EPH_ADDR_PRIVATE; /* unique local */
    if (prefix_match(b, doc, 32) || prefix_match(b, doc2, 20))
        return EPH_ADDR_DOCUMENTATION;
    if (prefix_match(b, ietf, 23))
        return EPH_ADDR_RESERVED; /* Teredo, ORCHID, benchmarking, AMT... */
    if (prefix_match(b, sixtofour, 16))
        return classify_v4(b + 2); /* 6to4 lands on the IPv4 address inside */
    if ((b[0] & 0xe0) != 0x20)
        return EPH_ADDR_RESERVED; /* outside 2000::/3, the only global unicast space */
    if (b[0] == 0x5f)
        return EPH_ADDR_RESERVED;
    return EPH_ADDR_PUBLIC;
}

enum eph_addr_class eph_addr_classify(const struct eph_addr *a)
{
    if (a->family == AF_INET)
        return classify_v4(a->bytes);
    if (a->family == AF_INET6)
        return classify_v6(a->bytes);
    return EPH_ADDR_RESERVED;
}

const char *eph_addr_class_name(enum eph_addr_class c)
{
    switch (c) {
    case EPH_ADDR_PUBLIC:
        return "public";
    case EPH_ADDR_UNSPECIFIED:
        return "unspecified";
    case EPH_ADDR_LOOPBACK:
        return "loopback";
    case EPH_ADDR_PRIVATE:
        return "private";
    case EPH_ADDR_SHARED:
        return "shared";
    case EPH_ADDR_LINK_LOCAL:
        return "link-local";
    case EPH_ADDR_MULTICAST:
        return "multicast";
    case EPH_ADDR_BROADCAST:
        return "broadcast";
    case EPH_ADDR_DOCUMENTATION:
        return "documentation";
    case EPH_ADDR_RESERVED:
        return "reserved";
    }
    return "reserved";
}

void eph_addr_format(const struct eph_addr *a, char out[EPH_ADDR_STRLEN])
{
    if (!inet_ntop(a->family == AF_INET ? AF_INET : AF_INET6, a->bytes, out, EPH_ADDR_STRLEN))
        strcpy(out, "?");
}

int eph_addr_from_sockaddr(const struct sockaddr *sa, struct eph_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        out->family = AF_INET;
        memcpy(out->bytes, &in->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        out->family = AF_INET6;
        memcpy(out->bytes, &in6->sin6_addr, 16);
        return 0;
    }
    return -EAFNOSUPPORT;
}

/* ---- the operator's allow-list ---------------------------------------------------------- */

int eph_cidr_parse(const char *s, struct eph_cidr *out)
{
    char tmp[EPH_ADDR_STRLEN + 8];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(tmp))
        return -EINVAL;
    memcpy(tmp, s, n + 1);
    memset(out, 0, sizeof(*out));
    char *slash = strchr(tmp, '/');
    if (slash)
        *slash = '\0';
    /* Plain forms only: an allow-list is configuration, and 0177.1 there is a typo. */
    if (inet_pton(AF_INET, tmp, out->net.bytes) == 1)
        out->net.family = AF_INET;
    else if (inet_pton(AF_INET6, tmp, out->net.bytes) == 1)
        out->net.family = AF_INET6;
    else
        return -EINVAL;
    unsigned max = out->net.family == AF_INET ? 32 : 128;
    out->prefix = max;
    if (slash) {
        const char *p = slash + 1;
        unsigned v = 0;
        if (!*p || strlen(p) > 3)
            return -EINVAL;
        for (; *p; p++) {
            if (*p < '0' || *p > '9')
                return -EINVAL;
            v = v * 10 + (unsigned)(*p - '0');
        }
        if (v > max || (slash[1] == '0' && slash[2]))
            return -EINVAL;
        out->prefix = v;
    }
    /* No bit set past the prefix. */
    for (unsigned bit = out->prefix; bit < max; bit++)
        if (out->net.bytes[bit / 8] & (0x80u >> (bit % 8)))
            return -EINVAL;
    return 0;
}

bool eph_cidr_contains(const struct eph_cidr *c, const struct eph_addr *a)
{
    return c->net.family == a->family && prefix_match(a->bytes, c->net.bytes, c->prefix);
}

int eph_addr_check(const struct eph_addr *a, const struct eph_cidr *allow, size_t n,
                   enum eph_addr_class *cls)
{
    struct eph_addr v = *a;
    /* A mapped address reaches its IPv4 address: check that one, against both lists. */
    if (v.family == AF_INET6 && is_mapped(v.bytes)) {
        memmove(v.bytes, v.bytes + 12, 4);
        memset(v.bytes + 4, 0, 12);
        v.family = AF_INET;
    }
    enum eph_addr_class c = eph_addr_classify(&v);
    if (cls)
        *cls = c;
    if (c == EPH_ADDR_PUBLIC)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (eph_cidr_contains(&allow[i], &v))
            return 0;
    return -EACCES;
}
