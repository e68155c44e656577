/*
 * http.h - what the broker reads from the sandbox: an HTTP/1.x request head, a CONNECT target, an
 * absolute URI, and the path normaliser the connection rules are checked after (docs/BROKER.md).
 *
 * Pure code: no allocation, no I/O. Every parser takes a length (the input need not be
 * NUL-terminated and may hold any byte), points into the input rather than copying, and refuses
 * rather than guesses: an ambiguous head (bare CR or LF, a folded header, a duplicate or
 * contradictory body length) is -EINVAL, since the broker rebuilds every request it forwards from
 * what it parsed and must never read a request differently from the upstream.
 */
#ifndef EPH_BROKER_HTTP_H
#define EPH_BROKER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/addr.h"

/* A request head (request line and headers, up to the empty line) is at most this long... */
#define EPH_HTTP_MAX_HEAD 65536
/* ...and has at most this many headers. */
#define EPH_HTTP_MAX_HEADERS 100

struct eph_http_header {
    const char *name;
    size_t name_len;
    const char *value; /* without leading and trailing spaces and tabs */
    size_t value_len;
};

struct eph_http_request {
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
    int minor; /* HTTP/1.minor: 0 or 1 */
    size_t nheaders;
    struct eph_http_header headers[EPH_HTTP_MAX_HEADERS];
    size_t head_len; /* bytes of the head, the final CRLF CRLF included */
};

/* Parses the request head at the start of buf[0..len). Returns 0 with *req filled (pointers into
 * buf) when the whole head is there; -EAGAIN when it is not yet; -EMSGSIZE when it cannot end
 * within EPH_HTTP_MAX_HEAD bytes or has more than EPH_HTTP_MAX_HEADERS headers; -EINVAL when it is
 * malformed: a method that is not a token, a target with a control character or space, a version
 * other than HTTP/1.0 or HTTP/1.1, a line not ended by CRLF, a bare CR, a NUL, a header name that
 * is not a token (or a space before the colon), a folded header. Bytes after the head (a body) are
 * not looked at. */
int eph_http_parse_request(const char *buf, size_t len, struct eph_http_request *req)
    __attribute__((warn_unused_result));

/* The first header of that name (case-insensitive), or NULL; *count (may be NULL) gets how many
 * there are. */
const struct eph_http_header *eph_http_header_find(const struct eph_http_request *req,
                                                   const char *name, size_t *count);

enum eph_http_body { EPH_HTTP_BODY_NONE, EPH_HTTP_BODY_LENGTH, EPH_HTTP_BODY_CHUNKED };

/* How the request's body is delimited (RFC 9112 6): Content-Length (one header, plain digits, at
 * most 2^53), or Transfer-Encoding exactly "chunked". -EINVAL for both at once, several or
 * contradictory lengths, or any other transfer coding: the request smuggling cases. */
int eph_http_request_body(const struct eph_http_request *req, enum eph_http_body *kind,
                          uint64_t *length) __attribute__((warn_unused_result));

/* The state of a chunked body being decoded (RFC 9112 7.1); zero it to start. */
struct eph_http_chunked {
    int state;
    uint64_t left;  /* data bytes left in the current chunk, or the size being read */
    unsigned count; /* hex digits of the size line, or bytes of the current line */
};

/* Decodes n more bytes of a chunked body in place: the data bytes are moved to the start of buf
 * and their number put in *out_len (the framing is dropped, so data never moves forward). Returns
 * 0 when more input is needed, 1 when the body has ended (the last chunk and the trailer section
 * are read; *used says how many of the n bytes belong to the body), or -EINVAL for a malformed
 * body: a size that is not 1 to 16 hex digits or is over 2^53, a line not ended by CRLF, a chunk
 * not followed by CRLF, a size line or trailer line longer than 4 KiB. Trailer fields are read and
 * dropped. */
int eph_http_chunked_decode(struct eph_http_chunked *c, char *buf, size_t n, size_t *out_len,
                            size_t *used) __attribute__((warn_unused_result));

/* An authority: host and port. */
struct eph_http_authority {
    struct eph_host host;
    uint16_t port;
};

/* Parses "host:port", "[v6]:port", or, when default_port is not 0, also "host" and "[v6]".
 * No userinfo ("user@host" is -EINVAL), a port of 1 to 5 digits in 1..65535, an IPv6 literal only
 * in brackets, a host as eph_host_parse() accepts it. Used for a CONNECT target
 * (default_port 0: the port is required) and for the authority of an absolute URI. */
int eph_http_parse_authority(const char *s, size_t len, uint16_t default_port,
                             struct eph_http_authority *out) __attribute__((warn_unused_result));

struct eph_http_url {
    bool https;
    struct eph_http_authority auth;
    const char *path;  /* from the first "/" of the path, "/" itself when the URI has none */
    size_t path_len;   /* the path only: no query */
    const char *query; /* after the "?", or NULL */
    size_t query_len;
};

/* Parses an absolute http:// or https:// URI (scheme case-insensitive), as in a proxy request line
 * or web_fetch. The fragment, if any, is dropped. -EINVAL for another scheme, a bad authority, or a
 * byte that may not appear in a URI (control, space, non-ASCII, backslash, ...). */
int eph_http_parse_url(const char *s, size_t len, struct eph_http_url *out)
    __attribute__((warn_unused_result));

/* Normalises a path (no query) so that a rule on it cannot be walked around: it must start with
 * "/"; %XX escapes are decoded when they encode an unreserved character (letters, digits,
 * "-._~"), kept (upper-cased) otherwise, and refused (-EINVAL) when they encode "/", "\", NUL or a
 * control character; a raw byte outside printable ASCII, a raw "\" or "#", and a malformed escape
 * are refused; "." segments are dropped and ".." segments remove the one before (-EINVAL above the
 * root), including those spelled with ";" parameters; empty segments ("//") are refused. A
 * trailing "/" is kept. Writes the result and a NUL into out (cap bytes) and returns its length,
 * or -EMSGSIZE when it does not fit. */
int eph_http_normalize_path(const char *path, size_t len, char *out, size_t cap)
    __attribute__((warn_unused_result));

#endif
