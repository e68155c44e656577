/* libFuzzer driver: the broker's parsers of what the sandbox sends — the request head, its body
 * framing, CONNECT targets, absolute URIs and the path normaliser. Checks the promises: a parsed
 * head ends with CRLF CRLF inside the input and every part points inside it; the chunked body
 * decoder never writes past what it read; a normalised path
 * starts with "/", has no empty, "." or ".." segment, no encoded "/" or "\", and normalising it
 * again changes nothing (so a rule checked on it is checked on what goes upstream); the URL handed
 * to curl for a parsed absolute URI parses back to the same host, port, path and query. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/http.h"
#include "broker/pin.h"
#include "common/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The URL handed to curl (pin.h) reads back as the one checked: the same host in the same
 * spelling, port, path and query. */
static void check_pinned(const struct eph_http_url *u)
{
    struct eph_buf b;
    eph_buf_init(&b, 1u << 20);
    struct eph_http_url v;
    if (eph_pin_url(&b, u) || eph_http_parse_url(b.data, b.len, &v) || v.https != u->https ||
        v.auth.port != u->auth.port || v.auth.host.literal != u->auth.host.literal ||
        strcmp(v.auth.host.name, u->auth.host.name) != 0 || v.path_len != u->path_len ||
        memcmp(v.path, u->path, u->path_len) != 0 || !v.query != !u->query ||
        (u->query && (v.query_len != u->query_len || memcmp(v.query, u->query, u->query_len))))
        abort();
    eph_buf_release(&b);
}

static void check_inside(const char *base, size_t len, const char *p, size_t n)
{
    if (n && (p < base || p + n > base + len))
        abort();
}

static void check_normalized(const char *p, size_t n)
{
    if (n == 0 || p[0] != '/')
        abort();
    if (memmem(p, n, "//", 2) || memmem(p, n, "%2F", 3) || memmem(p, n, "%5C", 3) ||
        memchr(p, '\\', n))
        abort();
    /* No dot segment. */
    size_t start = 1;
    for (size_t i = 1; i <= n; i++) {
        if (i < n && p[i] != '/')
            continue;
        size_t sl = i - start;
        if ((sl == 1 && p[start] == '.') || (sl == 2 && p[start] == '.' && p[start + 1] == '.'))
            abort();
        start = i + 1;
    }
    char again[512];
    int m = eph_http_normalize_path(p, n, again, sizeof(again));
    if (m != (int)n || memcmp(again, p, n) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    static struct eph_http_request req;
    int rc = eph_http_parse_request(s, size, &req);
    if (rc == 0) {
        if (req.head_len < 4 || req.head_len > size || req.head_len > EPH_HTTP_MAX_HEAD ||
            memcmp(s + req.head_len - 4, "\r\n\r\n", 4) != 0 || req.nheaders > EPH_HTTP_MAX_HEADERS)
            abort();
        check_inside(s, size, req.method, req.method_len);
        check_inside(s, size, req.target, req.target_len);
        for (size_t i = 0; i < req.nheaders; i++) {
            check_inside(s, size, req.headers[i].name, req.headers[i].name_len);
            check_inside(s, size, req.headers[i].value, req.headers[i].value_len);
        }
        enum eph_http_body kind;
        uint64_t len;
        if (eph_http_request_body(&req, &kind, &len) == 0 && kind != EPH_HTTP_BODY_LENGTH &&
            len != 0)
            abort();
    } else if (rc != -EAGAIN && rc != -EINVAL && rc != -EMSGSIZE) {
        abort();
    }

    struct eph_http_authority a;
    if (eph_http_parse_authority(s, size, 0, &a) == 0 && a.port == 0)
        abort();

    struct eph_http_url u;
    if (eph_http_parse_url(s, size, &u) == 0) {
        if (u.path_len == 0 || u.path[0] != '/' || u.auth.port == 0)
            abort();
        char out[512];
        int n = eph_http_normalize_path(u.path, u.path_len, out, sizeof(out));
        if (n >= 0)
            check_normalized(out, (size_t)n);
        check_pinned(&u);
    }

    /* The chunked decoder: data only moves back, never past what was read; once it says the
     * body ended, it used no more than it was given. */
    char *copy = malloc(size ? size : 1);
    if (copy) {
        memcpy(copy, s, size);
        struct eph_http_chunked ch = {0};
        size_t got = 0, used = 0;
        int r = eph_http_chunked_decode(&ch, copy, size, &got, &used);
        if ((r != 0 && r != 1 && r != -EINVAL) || got > used || used > size ||
            (r == 0 && used != size))
            abort();
        free(copy);
    }

    char out[512];
    int n = eph_http_normalize_path(s, size, out, sizeof(out));
    if (n >= 0) {
        if ((size_t)n != strlen(out))
            abort();
        check_normalized(out, (size_t)n);
    } else if (n != -EINVAL && n != -EMSGSIZE) {
        abort();
    }
    return 0;
}
