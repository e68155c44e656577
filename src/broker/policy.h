/*
 * policy.h - who may go where: a connection's rules and the run's web allow-list (docs/BROKER.md,
 * docs/BROKER.md). Pure code, checked after the path has been normalised (http.h).
 */
#ifndef EPH_BROKER_POLICY_H
#define EPH_BROKER_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#define EPH_CONN_NAME_MAX 64
/* The longest normalised path the broker forwards. */
#define EPH_BROKER_PATH_MAX 8192

/* A connection request's origin-form target, "/name/rest?query", split and normalised. */
struct eph_conn_target {
    char name[EPH_CONN_NAME_MAX + 1];
    char path[EPH_BROKER_PATH_MAX]; /* normalised, starts with "/" */
    const char *query;              /* into the target, after "?", or NULL */
    size_t query_len;
};

/* 0, or -EINVAL when the target is not "/" + a valid connection name ([a-z0-9_-]{1,64}) + an
 * optional path that normalises (eph_http_normalize_path), -EMSGSIZE when the path is too long.
 * "/name" alone is the path "/". */
int eph_conn_target_parse(const char *target, size_t len, struct eph_conn_target *out)
    __attribute__((warn_unused_result));

/* Whether a normalised path is under a prefix, on a segment boundary: "/repos" allows "/repos",
 * "/repos/" and "/repos/x", not "/reposx"; "/repos/" allows "/repos/x" and "/repos/" only; "/"
 * allows everything. The prefix is normalised first; one that does not normalise allows
 * nothing. */
bool eph_policy_path_allowed(const char *path, const char *prefix);
/* Whether method (len bytes) is one of methods (exact, case-sensitive as HTTP methods are). */
bool eph_policy_method_allowed(const char *method, size_t len, const char *const *methods,
                               size_t n);

enum eph_policy_denial {
    EPH_POLICY_ALLOWED = 0,
    EPH_POLICY_METHOD_NOT_ALLOWED,
    EPH_POLICY_PATH_NOT_ALLOWED,
};

/* A connection's whole rule: the method, then the path against the prefixes (none = every path). */
enum eph_policy_denial eph_policy_check(const char *method, size_t method_len, const char *path,
                                        const char *const *methods, size_t nmethods,
                                        const char *const *prefixes, size_t nprefixes);
/* "method_not_allowed", "path_not_allowed" (docs/BROKER.md's codes), or "allowed". */
const char *eph_policy_denial_code(enum eph_policy_denial d);

/* Whether a host (as eph_host_parse() gives it: lowercase, no trailing dot) is in a web
 * allow-list: "example.com" matches itself only, "*.example.com" its subdomains only. Entries are
 * compared case-insensitively, a trailing dot ignored. */
bool eph_policy_domain_allowed(const char *host, const char *const *allow, size_t n);

#endif
