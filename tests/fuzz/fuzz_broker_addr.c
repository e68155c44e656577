/* libFuzzer driver: the SSRF guard's host parser, classifier and allow-list parser. Checks the
 * promises, not just the absence of crashes: a literal's canonical form parses back to the same
 * address; a name is lowercase, dot-free at the end and made of [a-z0-9-_.]; an address the guard
 * lets through without an allow-list is in none of the non-public ranges (checked here against
 * the ranges written as CIDR text, a second reading of the same table); a mapped address is
 * judged as its IPv4 address. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/addr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const non_public[] = {
    "0.0.0.0/8",       "10.0.0.0/8",      "100.64.0.0/10",  "127.0.0.0/8",    "169.254.0.0/16",
    "172.16.0.0/12",   "192.0.0.0/24",    "192.0.2.0/24",   "192.88.99.0/24", "192.168.0.0/16",
    "198.18.0.0/15",   "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/3",    "::/96",
    "::ffff:0:0/96",   "64:ff9b:1::/48",  "100::/64",       "2001::/23",      "2001:db8::/32",
    "fc00::/7",        "fe80::/10",       "fec0::/10",      "ff00::/8",       "3fff::/20",
    "::ffff:0:0:0/96",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eph_host h;
    if (eph_host_parse((const char *)data, size, &h) != 0)
        return 0;
    if (!h.literal) {
        size_t n = strlen(h.name);
        if (n == 0 || n >= EPH_HOST_NAME_MAX || h.name[n - 1] == '.')
            abort();
        for (size_t i = 0; i < n; i++) {
            char c = h.name[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.'))
                abort();
        }
        return 0;
    }
    struct eph_addr back;
    if (eph_addr_parse(h.name, &back) != 0 || back.family != h.addr.family ||
        memcmp(back.bytes, h.addr.bytes, 16) != 0)
        abort();
    enum eph_addr_class cls;
    int rc = eph_addr_check(&h.addr, NULL, 0, &cls);
    if ((rc == 0) != (cls == EPH_ADDR_PUBLIC))
        abort();
    struct eph_addr v4 = h.addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (v4.family == AF_INET6 && memcmp(v4.bytes, mapped, 12) == 0) {
        memmove(v4.bytes, v4.bytes + 12, 4);
        memset(v4.bytes + 4, 0, 12);
        v4.family = AF_INET;
        if (eph_addr_classify(&v4) != eph_addr_classify(&h.addr))
            abort();
    }
    if (rc == 0) {
        for (size_t i = 0; i < sizeof(non_public) / sizeof(non_public[0]); i++) {
            struct eph_cidr c;
            if (eph_cidr_parse(non_public[i], &c) != 0)
                abort();
            if (eph_cidr_contains(&c, &v4))
                abort();
        }
        /* Public IPv6 is global unicast, or the well-known NAT64 form of a public IPv4 address. */
        static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
        if (v4.family == AF_INET6 && (v4.bytes[0] & 0xe0) != 0x20 &&
            memcmp(v4.bytes, nat64, 12) != 0)
            abort();
    }
    /* Whatever the input, it is a valid allow-list entry or -EINVAL, never a crash. */
    char tmp[64];
    size_t n = size < sizeof(tmp) - 1 ? size : sizeof(tmp) - 1;
    memcpy(tmp, data, n);
    tmp[n] = '\0';
    struct eph_cidr c;
    if (eph_cidr_parse(tmp, &c) == 0 && c.prefix > (c.net.family == AF_INET ? 32u : 128u))
        abort();
    return 0;
}
