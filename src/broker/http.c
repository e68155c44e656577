/*
 * http.c - the broker's parsers of what the sandbox sends. See http.h.
 */
#include "broker/http.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "common/text.h"

/* RFC 9110 5.6.2: tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

/* The end of the line that starts at off: the index of its CR, which must be followed by LF.
 * -EAGAIN when the line is not complete; -EINVAL for a bare CR, a bare LF or a NUL. */
static int line_end(const char *buf, size_t len, size_t off, size_t *cr)
{
    for (size_t i = off; i < len; i++) {
        char c = buf[i];
        if (c == '\0' || c == '\n')
            return -EINVAL;
        if (c == '\r') {
            if (i + 1 == len)
                return -EAGAIN;
            if (buf[i + 1] != '\n')
                return -EINVAL;
            *cr = i;
            return 0;
        }
    }
    return -EAGAIN;
}

static int parse_request_line(const char *s, size_t n, struct eph_http_request *req)
{
    const char *sp1 = memchr(s, ' ', n);
    if (!sp1)
        return -EINVAL;
    const char *rest = sp1 + 1;
    size_t rest_len = n - (size_t)(rest - s);
    const char *sp2 = memchr(rest, ' ', rest_len);
    if (!sp2)
        return -EINVAL;
    req->method = s;
    req->method_len = (size_t)(sp1 - s);
    req->target = rest;
    req->target_len = (size_t)(sp2 - rest);
    const char *ver = sp2 + 1;
    size_t ver_len = n - (size_t)(ver - s);
    if (!is_token(req->method, req->method_len) || req->target_len == 0)
        return -EINVAL;
    for (size_t i = 0; i < req->target_len; i++) {
        unsigned char c = (unsigned char)req->target[i];
        if (c <= 0x20 || c >= 0x7f)
            return -EINVAL;
    }
    if (ver_len != 8 || memcmp(ver, "HTTP/1.", 7) != 0 || (ver[7] != '0' && ver[7] != '1'))
        return -EINVAL;
    req->minor = ver[7] - '0';
    return 0;
}

static int parse_header(const char *s, size_t n, struct eph_http_header *h)
{
    if (n && (s[0] == ' ' || s[0] == '\t'))
        return -EINVAL; /* obs-fold: refused, as RFC 9112 5.2 allows */
    const char *colon = memchr(s, ':', n);
    if (!colon)
        return -EINVAL;
    h->name = s;
    h->name_len = (size_t)(colon - s);
    if (!is_token(h->name, h->name_len))
        return -EINVAL; /* includes a space before the colon */
    const char *v = colon + 1;
    const char *end = s + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    for (const char *p = v; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return -EINVAL;
    }
    h->value = v;
    h->value_len = (size_t)(end - v);
    return 0;
}

int eph_http_parse_request(const char *buf, size_t len, struct eph_http_request *req)
{
    size_t off = 0, cr;
    memset(req, 0, sizeof(*req));
    size_t scan = len < EPH_HTTP_MAX_HEAD ? len : EPH_HTTP_MAX_HEAD;
    int rc = line_end(buf, scan, 0, &cr);
    if (rc == -EAGAIN)
        return len >= EPH_HTTP_MAX_HEAD ? -EMSGSIZE : -EAGAIN;
    if (rc)
        return rc;
    rc = parse_request_line(buf, cr, req);
    if (rc)
        return rc;
    off = cr + 2;
    for (;;) {
        rc = line_end(buf, scan, off, &cr);
        if (rc == -EAGAIN)
            return len >= EPH_HTTP_MAX_HEAD ? -EMSGSIZE : -EAGAIN;
        if (rc)
            return rc;
        if (cr == off) {
            req->head_len = cr + 2;
            return 0;
        }
        if (req->nheaders == EPH_HTTP_MAX_HEADERS)
            return -EMSGSIZE;
        rc = parse_header(buf + off, cr - off, &req->headers[req->nheaders]);
        if (rc)
            return rc;
        req->nheaders++;
        off = cr + 2;
    }
}

const struct eph_http_header *eph_http_header_find(const struct eph_http_request *req,
                                                   const char *name, size_t *count)
{
    const struct eph_http_header *first = NULL;
    size_t n = strlen(name), found = 0;
    for (size_t i = 0; i < req->nheaders; i++) {
        const struct eph_http_header *h = &req->headers[i];
        if (h->name_len == n && strncasecmp(h->name, name, n) == 0) {
            if (!first)
                first = h;
            found++;
        }
    }
    if (count)
        *count = found;
    return first;
}

int eph_http_request_body(const struct eph_http_request *req, enum eph_http_body *kind,
                          uint64_t *length)
{
    size_t ncl, nte;
    const struct eph_http_header *cl = eph_http_header_find(req, "Content-Length", &ncl);
    const struct eph_http_header *te = eph_http_header_find(req, "Transfer-Encoding", &nte);
    *kind = EPH_HTTP_BODY_NONE;
    *length = 0;
    if (ncl > 1 || nte > 1 || (cl && te))
        return -EINVAL;
    if (te) {
        if (te->value_len != 7 || strncasecmp(te->value, "chunked", 7) != 0)
            return -EINVAL;
        *kind = EPH_HTTP_BODY_CHUNKED;
        return 0;
    }
    if (cl) {
        uint64_t v = 0;
        if (cl->value_len == 0 || cl->value_len > 16)
            return -EINVAL;
        for (size_t i = 0; i < cl->value_len; i++) {
            if (cl->value[i] < '0' || cl->value[i] > '9')
                return -EINVAL;
            v = v * 10 + (uint64_t)(cl->value[i] - '0');
        }
        if (v > (1ull << 53))
            return -EINVAL;
        *kind = EPH_HTTP_BODY_LENGTH;
        *length = v;
    }
    return 0;
}

enum {
    CH_SIZE,    /* hex digits of a chunk size */
    CH_EXT,     /* a chunk extension, up to CR */
    CH_SIZE_LF, /* the LF of a size line */
    CH_DATA,    /* left bytes of data */
    CH_DATA_CR, /* the CRLF after a chunk's data */
    CH_DATA_LF,
    CH_TRAILER0, /* the start of a trailer line (or of the final empty line) */
    CH_TRAILER,  /* a trailer field, up to CR */
    CH_TRAILER_LF,
    CH_END_LF, /* the LF of the final empty line */
    CH_DONE,
};

#define CHUNK_LINE_MAX 4096

int eph_http_chunked_decode(struct eph_http_chunked *c, char *buf, size_t n, size_t *out_len,
                            size_t *used)
{
    size_t o = 0, i = 0;
    *out_len = 0;
    *used = 0;
    while (i < n && c->state != CH_DONE) {
        char ch = buf[i];
        switch (c->state) {
        case CH_SIZE: {
            int d = eph_text_hex_value((unsigned char)ch);
            if (d >= 0) {
                /* left <= 2^53 before, so this cannot overflow. */
                c->left = c->left * 16 + (uint64_t)d;
                if (++c->count > 16 || c->left > (1ull << 53))
                    return -EINVAL;
                i++;
                break;
            }
            if (c->count == 0 || (ch != ';' && ch != '\r'))
                return -EINVAL;
            c->state = ch == ';' ? CH_EXT : CH_SIZE_LF;
            i++;
            break;
        }
        case CH_EXT:
            if (ch == '\n' || ++c->count > CHUNK_LINE_MAX)
                return -EINVAL;
            if (ch == '\r')
                c->state = CH_SIZE_LF;
            i++;
            break;
        case CH_SIZE_LF:
            if (ch != '\n')
                return -EINVAL;
            i++;
            c->count = 0;
            c->state = c->left ? CH_DATA : CH_TRAILER0;
            break;
        case CH_DATA: {
            size_t take = n - i < c->left ? n - i : (size_t)c->left;
            memmove(buf + o, buf + i, take);
            o += take;
            i += take;
            c->left -= take;
            if (c->left == 0)
                c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
            if (ch != '\r')
                return -EINVAL;
            c->state = CH_DATA_LF;
            i++;
            break;
        case CH_TRAILER:
            if (ch == '\n' || ++c->count > CHUNK_LINE_MAX)
                return -EINVAL;
            if (ch == '\r')
                c->state = CH_TRAILER_LF;
            i++;
            break;
        case CH_DATA_LF:
            if (ch != '\n')
                return -EINVAL;
            c->state = CH_SIZE;
            c->count = 0;
            i++;
            break;
        case CH_TRAILER0:
            c->count = 0;
            c->state = ch == '\r' ? CH_END_LF : CH_TRAILER;
            if (ch == '\n')
                return -EINVAL;
            if (ch != '\r')
                c->count = 1;
            i++;
            break;
        case CH_TRAILER_LF:
        case CH_END_LF:
            if (ch != '\n')
                return -EINVAL;
            c->state = c->state == CH_END_LF ? CH_DONE : CH_TRAILER0;
            i++;
            break;
        }
    }
    *out_len = o;
    *used = i;
    return c->state == CH_DONE ? 1 : 0;
}

int eph_http_parse_authority(const char *s, size_t len, uint16_t default_port,
                             struct eph_http_authority *out)
{
    const char *host, *port = NULL;
    size_t host_len, port_len = 0;
    memset(out, 0, sizeof(*out));
    if (len == 0 || memchr(s, '@', len))
        return -EINVAL;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close)
            return -EINVAL;
        host = s + 1;
        host_len = (size_t)(close - host);
        if (!memchr(host, ':', host_len))
            return -EINVAL; /* brackets hold an IPv6 literal, nothing else */
        const char *after = close + 1;
        size_t after_len = len - (size_t)(after - s);
        if (after_len) {
            if (after[0] != ':')
                return -EINVAL;
            port = after + 1;
            port_len = after_len - 1;
        }
    } else {
        const char *colon = memchr(s, ':', len);
        host = s;
        host_len = colon ? (size_t)(colon - s) : len;
        if (colon) {
            port = colon + 1;
            port_len = len - host_len - 1;
        }
        if (host_len && memchr(host, ':', host_len))
            return -EINVAL;
    }
    if (port) {
        unsigned v = 0;
        if (port_len == 0 || port_len > 5)
            return -EINVAL;
        for (size_t i = 0; i < port_len; i++) {
            if (port[i] < '0' || port[i] > '9')
                return -EINVAL;
            v = v * 10 + (unsigned)(port[i] - '0');
        }
        if (v == 0 || v > 65535)
            return -EINVAL;
        out->port = (uint16_t)v;
    } else {
        if (!default_port)
            return -EINVAL;
        out->port = default_port;
    }
    if (eph_host_parse(host, host_len, &out->host))
        return -EINVAL;
    /* An IPv6 literal only in brackets: "::1" without them was caught above by its colons. */
    return 0;
}

/* Bytes that may appear in a URI at all (RFC 3986 reserved, unreserved and "%"). */
static bool uri_char(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c && strchr("-._~:/?#[]@!$&'()*+,;=%", c) != NULL;
}

int eph_http_parse_url(const char *s, size_t len, struct eph_http_url *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < len; i++)
        if (!uri_char((unsigned char)s[i]))
            return -EINVAL;
    size_t skip;
    if (len >= 7 && strncasecmp(s, "http://", 7) == 0) {
        skip = 7;
    } else if (len >= 8 && strncasecmp(s, "https://", 8) == 0) {
        skip = 8;
        out->https = true;
    } else {
        return -EINVAL;
    }
    const char *auth = s + skip;
    size_t rest = len - skip;
    size_t auth_len = 0;
    while (auth_len < rest && auth[auth_len] != '/' && auth[auth_len] != '?' &&
           auth[auth_len] != '#')
        auth_len++;
    if (eph_http_parse_authority(auth, auth_len, out->https ? 443 : 80, &out->auth))
        return -EINVAL;
    const char *p = auth + auth_len;
    const char *end = s + len;
    const char *hash = memchr(p, '#', (size_t)(end - p));
    if (hash)
        end = hash;
    const char *q = memchr(p, '?', (size_t)(end - p));
    const char *path_end = q ? q : end;
    if (path_end == p) {
        out->path = "/";
        out->path_len = 1;
    } else {
        out->path = p;
        out->path_len = (size_t)(path_end - p);
    }
    if (q) {
        out->query = q + 1;
        out->query_len = (size_t)(end - q - 1);
    }
    return 0;
}

static bool unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

/* Whether a decoded segment is a dot segment: "." or "..", also with ";params" after it, the ";"
 * raw or encoded (servers that strip path parameters read "..;x" as ".."). Returns 1 for ".", 2
 * for "..", 0 otherwise. */
static int dot_segment(const char *seg, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (seg[i] == ';' ||
            (seg[i] == '%' && i + 2 < n && seg[i + 1] == '3' && seg[i + 2] == 'B')) {
            n = i;
            break;
        }
    }
    if (n == 1 && seg[0] == '.')
        return 1;
    if (n == 2 && seg[0] == '.' && seg[1] == '.')
        return 2;
    return 0;
}

int eph_http_normalize_path(const char *path, size_t len, char *out, size_t cap)
{
    if (cap == 0)
        return -EMSGSIZE;
    if (len == 0 || path[0] != '/')
        return -EINVAL;
    size_t o = 0; /* out[0..o) is the result so far, always starting with "/" */
    size_t i = 1;
    out[o++] = '/';
    while (i <= len) {
        /* One segment: decode it into out after the current end, then decide. */
        size_t seg_start = o;
        while (i < len && path[i] != '/') {
            unsigned char c = (unsigned char)path[i];
            char w[3];
            size_t wn;
            if (c == '%') {
                if (i + 2 >= len)
                    return -EINVAL;
                int hi = eph_text_hex_value((unsigned char)path[i + 1]),
                    lo = eph_text_hex_value((unsigned char)path[i + 2]);
                if (hi < 0 || lo < 0)
                    return -EINVAL;
                unsigned char d = (unsigned char)(hi << 4 | lo);
                if (d == '/' || d == '\\' || d < 0x20 || d == 0x7f)
                    return -EINVAL;
                if (unreserved(d)) {
                    w[0] = (char)d;
                    wn = 1;
                } else {
                    static const char hex[] = "0123456789ABCDEF";
                    w[0] = '%';
                    w[1] = hex[d >> 4];
                    w[2] = hex[d & 15];
                    wn = 3;
                }
                i += 3;
            } else {
                if (c <= 0x20 || c >= 0x7f || c == '\\' || c == '#' || c == '?')
                    return -EINVAL;
                w[0] = (char)c;
                wn = 1;
                i++;
            }
            if (o + wn >= cap)
                return -EMSGSIZE;
            memcpy(out + o, w, wn);
            o += wn;
        }
        bool last = i >= len;
        size_t seg_len = o - seg_start;
        int dots = dot_segment(out + seg_start, seg_len);
        if (dots) {
            o = seg_start; /* drop the segment itself */
            if (dots == 2) {
                /* Remove the segment before: out[0..o) ends with "/", its previous segment is
                 * between the "/" before that and it. */
                if (o <= 1)
                    return -EINVAL; /* above the root */
                size_t k = o - 1;
                while (k > 0 && out[k - 1] != '/')
                    k--;
                o = k;
            }
        } else if (seg_len == 0 && !last) {
            return -EINVAL; /* "//": an empty segment */
        } else if (!last) {
            if (o + 1 >= cap)
                return -EMSGSIZE;
            out[o++] = '/';
        }
        i++; /* past the "/" (or past the end) */
    }
    out[o] = '\0';
    return (int)o;
}
