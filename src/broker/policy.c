/*
 * policy.c - a connection's rules and the web allow-list. See policy.h.
 */
#include "broker/policy.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "broker/http.h"

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int eph_conn_target_parse(const char *target, size_t len, struct eph_conn_target *out)
{
    memset(out, 0, sizeof(*out));
    const char *q = memchr(target, '?', len);
    size_t plen = q ? (size_t)(q - target) : len;
    if (q) {
        out->query = q + 1;
        out->query_len = len - plen - 1;
    }
    if (plen < 2 || target[0] != '/')
        return -EINVAL;
    size_t n = 1;
    while (n < plen && target[n] != '/') {
        if (!name_char(target[n]))
            return -EINVAL;
        n++;
    }
    size_t name_len = n - 1;
    if (name_len == 0 || name_len > EPH_CONN_NAME_MAX)
        return -EINVAL;
    memcpy(out->name, target + 1, name_len);
    out->name[name_len] = '\0';
    if (n == plen) {
        strcpy(out->path, "/");
        return 0;
    }
    int rc = eph_http_normalize_path(target + n, plen - n, out->path, sizeof(out->path));
    return rc < 0 ? rc : 0;
}

bool eph_policy_path_allowed(const char *path, const char *prefix)
{
    char norm[EPH_BROKER_PATH_MAX];
    int n = eph_http_normalize_path(prefix, strlen(prefix), norm, sizeof(norm));
    if (n <= 0)
        return false;
    size_t pl = (size_t)n;
    if (strncmp(path, norm, pl) != 0)
        return false;
    /* On a segment boundary: the prefix ends with "/", or the path ends or goes on with "/". */
    return norm[pl - 1] == '/' || path[pl] == '\0' || path[pl] == '/';
}

bool eph_policy_method_allowed(const char *method, size_t len, const char *const *methods, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(methods[i]) == len && memcmp(methods[i], method, len) == 0)
            return true;
    return false;
}

enum eph_policy_denial eph_policy_check(const char *method, size_t method_len, const char *path,
                                        const char *const *methods, size_t nmethods,
                                        const char *const *prefixes, size_t nprefixes)
{
    if (!eph_policy_method_allowed(method, method_len, methods, nmethods))
        return EPH_POLICY_METHOD_NOT_ALLOWED;
    if (nprefixes == 0)
        return EPH_POLICY_ALLOWED;
    for (size_t i = 0; i < nprefixes; i++)
        if (eph_policy_path_allowed(path, prefixes[i]))
            return EPH_POLICY_ALLOWED;
    return EPH_POLICY_PATH_NOT_ALLOWED;
}

const char *eph_policy_denial_code(enum eph_policy_denial d)
{
    switch (d) {
    case EPH_POLICY_METHOD_NOT_ALLOWED:
        return "method_not_allowed";
    case EPH_POLICY_PATH_NOT_ALLOWED:
        return "path_not_allowed";
    case EPH_POLICY_ALLOWED:
        break;
    }
    return "allowed";
}

/* Compares a host with an allow-list name (without "*."), the name's case and trailing dot
 * ignored. */
static bool same_name(const char *host, size_t hl, const char *name)
{
    size_t nl = strlen(name);
    if (nl && name[nl - 1] == '.')
        nl--;
    return nl == hl && nl > 0 && strncasecmp(host, name, nl) == 0;
}

bool eph_policy_domain_allowed(const char *host, const char *const *allow, size_t n)
{
    size_t hl = strlen(host);
    for (size_t i = 0; i < n; i++) {
        const char *e = allow[i];
        if (e[0] == '*' && e[1] == '.') {
            const char *base = e + 2;
            size_t bl = strlen(base);
            if (bl && base[bl - 1] == '.')
                bl--;
            /* A subdomain: at least one label, then ".", then the base. */
            if (bl > 0 && hl > bl + 1 && host[hl - bl - 1] == '.' &&
                same_name(host + hl - bl, bl, base))
                return true;
        } else if (same_name(host, hl, e)) {
            return true;
        }
    }
    return false;
}
