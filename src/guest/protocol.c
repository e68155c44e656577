/*
 * protocol.c - the guest protocol's codec. Shared by the daemon and the static init, so: libc only,
 * no allocation, no logging. Every length read from the wire is checked before it is used.
 */
#include "guest/protocol.h"

#include <errno.h>
#include <string.h>

struct type_info {
    uint8_t type;
    uint8_t dir;
    uint32_t min;
    uint32_t max;
    const char *name;
};

/* One row per type: who may send it and the payload sizes it may have. Exact sizes where the
 * payload is fixed, so a frame that lies about its length is refused before its payload is read. */
static const struct type_info types[] = {
    {EPH_PROTO_HELLO, EPH_PROTO_FROM_GUEST, 8, 8, "hello"},
    {EPH_PROTO_PING, EPH_PROTO_FROM_HOST, 0, EPH_PROTO_MAX_PING, "ping"},
    {EPH_PROTO_PONG, EPH_PROTO_FROM_GUEST, 0, EPH_PROTO_MAX_PING, "pong"},
    {EPH_PROTO_OK, EPH_PROTO_FROM_GUEST, 0, 0, "ok"},
    {EPH_PROTO_ERROR, EPH_PROTO_FROM_GUEST, 9, 8 + EPH_PROTO_MAX_ERROR_MSG + 1, "error"},
    {EPH_PROTO_EXEC, EPH_PROTO_FROM_HOST, 26, EPH_PROTO_MAX_PAYLOAD, "exec"},
    {EPH_PROTO_EXEC_STDOUT, EPH_PROTO_FROM_GUEST, 1, EPH_PROTO_CHUNK, "exec_stdout"},
    {EPH_PROTO_EXEC_STDERR, EPH_PROTO_FROM_GUEST, 1, EPH_PROTO_CHUNK, "exec_stderr"},
    {EPH_PROTO_EXEC_EXIT, EPH_PROTO_FROM_GUEST, EPH_PROTO_EXIT_SIZE, EPH_PROTO_EXIT_SIZE,
     "exec_exit"},
    {EPH_PROTO_EXEC_LIVE_STDOUT, EPH_PROTO_FROM_GUEST, 1, EPH_PROTO_CHUNK, "exec_live_stdout"},
    {EPH_PROTO_EXEC_LIVE_STDERR, EPH_PROTO_FROM_GUEST, 1, EPH_PROTO_CHUNK, "exec_live_stderr"},
    {EPH_PROTO_WRITE_FILE, EPH_PROTO_FROM_HOST, 14, EPH_PROTO_MAX_PAYLOAD, "write_file"},
    {EPH_PROTO_READ_FILE, EPH_PROTO_FROM_HOST, 14, 12 + EPH_PROTO_MAX_PATH + 1, "read_file"},
    {EPH_PROTO_FILE_DATA, EPH_PROTO_FROM_GUEST, 1, EPH_PROTO_CHUNK, "file_data"},
    {EPH_PROTO_FILE_END, EPH_PROTO_FROM_GUEST, 8, 8, "file_end"},
    {EPH_PROTO_LIST_FILES, EPH_PROTO_FROM_HOST, 8, 8, "list_files"},
    /* kind, size, a path of one byte at least, an empty target: 4 + 8 + (4 + 2) + (4 + 1). */
    {EPH_PROTO_FILE_ENTRY, EPH_PROTO_FROM_GUEST, 23, 12 + 2 * (4 + EPH_PROTO_MAX_PATH + 1),
     "file_entry"},
    {EPH_PROTO_LIST_END, EPH_PROTO_FROM_GUEST, 8, 8, "list_end"},
    {EPH_PROTO_SHUTDOWN, EPH_PROTO_FROM_HOST, 0, 0, "shutdown"},
    {EPH_PROTO_TUNNEL_LISTEN, EPH_PROTO_FROM_HOST, 8, 8, "tunnel_listen"},
    {EPH_PROTO_TUNNEL_OPEN, EPH_PROTO_FROM_GUEST, 0, 0, "tunnel_open"},
    {EPH_PROTO_TUNNEL_DATA, EPH_PROTO_FROM_BOTH, 1, EPH_PROTO_CHUNK, "tunnel_data"},
    {EPH_PROTO_TUNNEL_WINDOW, EPH_PROTO_FROM_BOTH, 4, 4, "tunnel_window"},
    {EPH_PROTO_TUNNEL_CLOSE, EPH_PROTO_FROM_BOTH, 4, 4, "tunnel_close"},
};

static const struct type_info *type_find(uint8_t type)
{
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (types[i].type == type)
            return &types[i];
    return NULL;
}

uint32_t eph_proto_type_cap(uint8_t type)
{
    const struct type_info *t = type_find(type);
    return t ? t->max : 0;
}

int eph_proto_type_dir(uint8_t type)
{
    const struct type_info *t = type_find(type);
    return t ? t->dir : 0;
}

const char *eph_proto_type_name(uint8_t type)
{
    const struct type_info *t = type_find(type);
    return t ? t->name : "unknown";
}

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

int eph_proto_header_parse(const uint8_t raw[EPH_PROTO_HEADER_SIZE], enum eph_proto_dir from,
                           struct eph_proto_header *out)
{
    if (raw[0] != EPH_PROTO_MAGIC0 || raw[1] != EPH_PROTO_MAGIC1 || raw[2] != EPH_PROTO_VERSION)
        return -EPROTO;
    const struct type_info *t = type_find(raw[3]);
    if (!t || !(t->dir & from))
        return -EPROTO;
    /* Version 1 defines no header flags and no reserved bits: anything set is a peer we do not
     * understand, and guessing would be worse than refusing. */
    if (le16(raw + 4) != 0 || le16(raw + 6) != 0)
        return -EPROTO;
    uint32_t len = le32(raw + 12);
    if (len > t->max)
        return -EMSGSIZE;
    if (len < t->min)
        return -EPROTO;
    out->type = raw[3];
    out->flags = 0;
    out->id = le32(raw + 8);
    out->length = len;
    return 0;
}

void eph_proto_header_encode(uint8_t out[EPH_PROTO_HEADER_SIZE], uint8_t type, uint16_t flags,
                             uint32_t id, uint32_t length)
{
    out[0] = EPH_PROTO_MAGIC0;
    out[1] = EPH_PROTO_MAGIC1;
    out[2] = EPH_PROTO_VERSION;
    out[3] = type;
    put16(out + 4, flags);
    put16(out + 6, 0);
    put32(out + 8, id);
    put32(out + 12, length);
}

/* ---- Decoder ----------------------------------------------------------------------------- */

void eph_proto_decoder_init(struct eph_proto_decoder *d, enum eph_proto_dir from, uint8_t *buf,
                            size_t cap)
{
    memset(d, 0, sizeof(*d));
    d->from = from;
    d->buf = buf;
    d->cap = cap;
}

void eph_proto_decoder_reset(struct eph_proto_decoder *d)
{
    d->hdr_have = 0;
    d->have = 0;
    d->error = 0;
}

int eph_proto_decode(struct eph_proto_decoder *d, const void *data, size_t n, size_t *used,
                     struct eph_proto_frame *frame)
{
    const uint8_t *in = data;
    size_t off = 0;
    *used = 0;
    if (d->error)
        return d->error;
    while (off < n || (d->hdr_have == EPH_PROTO_HEADER_SIZE && d->have == d->cur.length)) {
        if (d->hdr_have < EPH_PROTO_HEADER_SIZE) {
            size_t take = EPH_PROTO_HEADER_SIZE - d->hdr_have;
            if (take > n - off)
                take = n - off;
            memcpy(d->hdr + d->hdr_have, in + off, take);
            d->hdr_have += take;
            off += take;
            if (d->hdr_have < EPH_PROTO_HEADER_SIZE)
                break;
            int rc = eph_proto_header_parse(d->hdr, d->from, &d->cur);
            if (rc == 0 && d->cur.length > d->cap)
                rc = -EMSGSIZE;
            if (rc) {
                d->error = rc;
                *used = off;
                return rc;
            }
            d->have = 0;
        }
        if (d->have < d->cur.length) {
            size_t take = d->cur.length - d->have;
            if (take > n - off)
                take = n - off;
            memcpy(d->buf + d->have, in + off, take);
            d->have += take;
            off += take;
        }
        if (d->have == d->cur.length) {
            frame->hdr = d->cur;
            frame->payload = d->buf;
            d->hdr_have = 0;
            d->have = 0;
            *used = off;
            return 1;
        }
    }
    *used = off;
    return 0;
}

int eph_proto_decoder_finish(const struct eph_proto_decoder *d)
{
    if (d->error)
        return d->error;
    return d->hdr_have ? -EPROTO : 0;
}

/* ---- Writer and reader -------------------------------------------------------------------- */

void eph_proto_writer_init(struct eph_proto_writer *w, uint8_t *buf, size_t cap)
{
    w->buf = buf;
    w->cap = cap;
    w->len = EPH_PROTO_HEADER_SIZE;
    w->error = cap < EPH_PROTO_HEADER_SIZE ? -EMSGSIZE : 0;
}

static uint8_t *writer_room(struct eph_proto_writer *w, size_t n)
{
    if (w->error)
        return NULL;
    if (n > w->cap - w->len) {
        w->error = -EMSGSIZE;
        return NULL;
    }
    uint8_t *p = w->buf + w->len;
    w->len += n;
    return p;
}

void eph_proto_put_u32(struct eph_proto_writer *w, uint32_t v)
{
    uint8_t *p = writer_room(w, 4);
    if (p)
        put32(p, v);
}

void eph_proto_put_u64(struct eph_proto_writer *w, uint64_t v)
{
    uint8_t *p = writer_room(w, 8);
    if (p)
        put64(p, v);
}

void eph_proto_put_bytes(struct eph_proto_writer *w, const void *src, size_t n)
{
    uint8_t *p = writer_room(w, n);
    if (p && n)
        memcpy(p, src, n);
}

void eph_proto_put_string(struct eph_proto_writer *w, const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n > max) {
        if (!w->error)
            w->error = -EMSGSIZE;
        return;
    }
    eph_proto_put_u32(w, (uint32_t)(n + 1));
    eph_proto_put_bytes(w, s, n + 1);
}

int eph_proto_writer_finish(struct eph_proto_writer *w, uint8_t type, uint16_t flags, uint32_t id)
{
    if (w->error)
        return w->error;
    size_t len = w->len - EPH_PROTO_HEADER_SIZE;
    uint32_t max = eph_proto_type_cap(type);
    if (!max && type_find(type) == NULL)
        return -EINVAL;
    if (len > max)
        return -EMSGSIZE;
    eph_proto_header_encode(w->buf, type, flags, id, (uint32_t)len);
    return (int)w->len;
}

void eph_proto_reader_init(struct eph_proto_reader *r, const uint8_t *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->off = 0;
    r->error = 0;
}

static const uint8_t *reader_take(struct eph_proto_reader *r, size_t n)
{
    if (r->error)
        return NULL;
    if (n > r->len - r->off) {
        r->error = -EPROTO;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

uint32_t eph_proto_get_u32(struct eph_proto_reader *r)
{
    const uint8_t *p = reader_take(r, 4);
    return p ? le32(p) : 0;
}

uint64_t eph_proto_get_u64(struct eph_proto_reader *r)
{
    const uint8_t *p = reader_take(r, 8);
    return p ? le64(p) : 0;
}

const char *eph_proto_get_string(struct eph_proto_reader *r, size_t max)
{
    uint32_t n = eph_proto_get_u32(r);
    if (r->error)
        return NULL;
    if (n == 0 || n - 1 > max) {
        r->error = n == 0 ? -EPROTO : -EMSGSIZE;
        return NULL;
    }
    const uint8_t *p = reader_take(r, n);
    if (!p)
        return NULL;
    /* Exactly one NUL, at the end: an embedded NUL would make the C string differ from what the
     * sender meant (a command cut short is a different command). */
    if (p[n - 1] != '\0' || memchr(p, '\0', n - 1) != NULL) {
        r->error = -EPROTO;
        return NULL;
    }
    return (const char *)p;
}

int eph_proto_reader_done(const struct eph_proto_reader *r)
{
    if (r->error)
        return r->error;
    return r->off == r->len ? 0 : -EPROTO;
}

/* ---- Typed payloads ----------------------------------------------------------------------- */

int eph_proto_raw_encode(uint8_t *buf, size_t cap, uint8_t type, uint16_t flags, uint32_t id,
                         const void *payload, size_t len)
{
    struct eph_proto_writer w;
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_bytes(&w, payload, len);
    return eph_proto_writer_finish(&w, type, flags, id);
}

int eph_proto_exec_encode(uint8_t *buf, size_t cap, uint32_t id, uint32_t timeout_ms,
                          uint32_t stdout_cap, uint32_t stderr_cap, const char *command,
                          const char *cwd, const char *const *env, uint32_t live_cap)
{
    struct eph_proto_writer w;
    uint32_t count = 0;
    if (env)
        while (env[count])
            if (++count > EPH_PROTO_MAX_ENV)
                return -EMSGSIZE;
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_u32(&w, timeout_ms);
    eph_proto_put_u32(&w, stdout_cap);
    eph_proto_put_u32(&w, stderr_cap);
    eph_proto_put_string(&w, command, EPH_PROTO_MAX_PAYLOAD);
    eph_proto_put_string(&w, cwd ? cwd : "", EPH_PROTO_MAX_PATH);
    eph_proto_put_u32(&w, count);
    for (uint32_t i = 0; i < count; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq || eq == env[i])
            return -EINVAL;
        eph_proto_put_string(&w, env[i], EPH_PROTO_MAX_PAYLOAD);
    }
    if (live_cap)
        eph_proto_put_u32(&w, live_cap);
    return eph_proto_writer_finish(&w, EPH_PROTO_EXEC, 0, id);
}

int eph_proto_exec_decode(const uint8_t *payload, size_t len, struct eph_proto_exec *out)
{
    struct eph_proto_reader r;
    eph_proto_reader_init(&r, payload, len);
    out->timeout_ms = eph_proto_get_u32(&r);
    out->stdout_cap = eph_proto_get_u32(&r);
    out->stderr_cap = eph_proto_get_u32(&r);
    out->command = eph_proto_get_string(&r, EPH_PROTO_MAX_PAYLOAD);
    out->cwd = eph_proto_get_string(&r, EPH_PROTO_MAX_PATH);
    out->env_count = eph_proto_get_u32(&r);
    if (r.error)
        return r.error;
    if (out->env_count > EPH_PROTO_MAX_ENV)
        return -EMSGSIZE;
    for (uint32_t i = 0; i < out->env_count; i++) {
        out->env[i] = eph_proto_get_string(&r, EPH_PROTO_MAX_PAYLOAD);
        if (r.error)
            return r.error;
        const char *eq = strchr(out->env[i], '=');
        if (!eq || eq == out->env[i])
            return -EPROTO;
    }
    /* The optional live_cap: exactly four bytes more, or none. */
    out->live_cap = 0;
    if (r.len - r.off == 4)
        out->live_cap = eph_proto_get_u32(&r);
    int rc = eph_proto_reader_done(&r);
    if (rc)
        return rc;
    if (out->command[0] == '\0')
        return -EPROTO;
    if (out->cwd[0] && eph_proto_path_check(out->cwd))
        return -EPROTO;
    return 0;
}

int eph_proto_exit_encode(uint8_t *buf, size_t cap, uint32_t id, const struct eph_proto_exit *e)
{
    struct eph_proto_writer w;
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_u32(&w, (uint32_t)e->exit_code);
    eph_proto_put_u32(&w, e->signal);
    eph_proto_put_u32(&w, e->flags);
    eph_proto_put_u64(&w, e->duration_us);
    eph_proto_put_u64(&w, e->stdout_total);
    eph_proto_put_u64(&w, e->stderr_total);
    return eph_proto_writer_finish(&w, EPH_PROTO_EXEC_EXIT, 0, id);
}

int eph_proto_exit_decode(const uint8_t *payload, size_t len, struct eph_proto_exit *out)
{
    struct eph_proto_reader r;
    eph_proto_reader_init(&r, payload, len);
    out->exit_code = (int32_t)eph_proto_get_u32(&r);
    out->signal = eph_proto_get_u32(&r);
    out->flags = eph_proto_get_u32(&r);
    out->duration_us = eph_proto_get_u64(&r);
    out->stdout_total = eph_proto_get_u64(&r);
    out->stderr_total = eph_proto_get_u64(&r);
    int rc = eph_proto_reader_done(&r);
    if (rc)
        return rc;
    /* A process ends either with a status (0..255) or with a signal (1..64), never both. */
    if (out->signal > 64 || (out->signal == 0 && (out->exit_code < 0 || out->exit_code > 255)))
        return -EPROTO;
    if (out->flags & ~(uint32_t)(EPH_PROTO_EXIT_TIMED_OUT | EPH_PROTO_EXIT_STDOUT_TRUNCATED |
                                 EPH_PROTO_EXIT_STDERR_TRUNCATED))
        return -EPROTO;
    return 0;
}

int eph_proto_write_file_encode(uint8_t *buf, size_t cap, uint32_t id, const char *path,
                                uint32_t mode, uint32_t flags, const void *data, size_t len)
{
    struct eph_proto_writer w;
    if (eph_proto_path_check(path))
        return -EINVAL;
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_u32(&w, mode);
    eph_proto_put_u32(&w, flags);
    eph_proto_put_string(&w, path, EPH_PROTO_MAX_PATH);
    eph_proto_put_bytes(&w, data, len);
    return eph_proto_writer_finish(&w, EPH_PROTO_WRITE_FILE, 0, id);
}

int eph_proto_write_file_decode(const uint8_t *payload, size_t len,
                                struct eph_proto_write_file *out)
{
    struct eph_proto_reader r;
    eph_proto_reader_init(&r, payload, len);
    out->mode = eph_proto_get_u32(&r);
    out->flags = eph_proto_get_u32(&r);
    out->path = eph_proto_get_string(&r, EPH_PROTO_MAX_PATH);
    if (r.error)
        return r.error;
    if (out->mode & ~07777u || out->flags & ~EPH_PROTO_WRITE_APPEND)
        return -EPROTO;
    if (eph_proto_path_check(out->path))
        return -EPROTO;
    out->data = payload + r.off;
    out->len = len - r.off;
    return 0;
}

int eph_proto_read_file_encode(uint8_t *buf, size_t cap, uint32_t id, const char *path,
                               uint64_t max)
{
    struct eph_proto_writer w;
    if (eph_proto_path_check(path))
        return -EINVAL;
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_u64(&w, max);
    eph_proto_put_string(&w, path, EPH_PROTO_MAX_PATH);
    return eph_proto_writer_finish(&w, EPH_PROTO_READ_FILE, 0, id);
}

int eph_proto_read_file_decode(const uint8_t *payload, size_t len, struct eph_proto_read_file *out)
{
    struct eph_proto_reader r;
    eph_proto_reader_init(&r, payload, len);
    out->cap = eph_proto_get_u64(&r);
    out->path = eph_proto_get_string(&r, EPH_PROTO_MAX_PATH);
    int rc = eph_proto_reader_done(&r);
    if (rc)
        return rc;
    return eph_proto_path_check(out->path) ? -EPROTO : 0;
}

int eph_proto_error_encode(uint8_t *buf, size_t cap, uint32_t id, int err, const char *msg)
{
    struct eph_proto_writer w;
    char cut[EPH_PROTO_MAX_ERROR_MSG + 1];
    /* Messages are advisory: cut a long one rather than fail to report the error at all. */
    if (!msg)
        msg = "";
    size_t n = strnlen(msg, EPH_PROTO_MAX_ERROR_MSG);
    memcpy(cut, msg, n);
    cut[n] = '\0';
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_u32(&w, (uint32_t)(err < 0 ? -err : err));
    eph_proto_put_string(&w, cut, EPH_PROTO_MAX_ERROR_MSG);
    return eph_proto_writer_finish(&w, EPH_PROTO_ERROR, 0, id);
}

int eph_proto_error_decode(const uint8_t *payload, size_t len, int *err, const char **msg)
{
    struct eph_proto_reader r;
    eph_proto_reader_init(&r, payload, len);
    uint32_t e = eph_proto_get_u32(&r);
    *msg = eph_proto_get_string(&r, EPH_PROTO_MAX_ERROR_MSG);
    int rc = eph_proto_reader_done(&r);
    if (rc)
        return rc;
    /* errno values are small positive integers; anything else is not an errno. */
    if (e == 0 || e > 4095)
        return -EPROTO;
    *err = -(int)e;
    return 0;
}

int eph_proto_hello_encode(uint8_t *buf, size_t cap, uint32_t pid)
{
    struct eph_proto_writer w;
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_u32(&w, EPH_PROTO_VERSION);
    eph_proto_put_u32(&w, pid);
    return eph_proto_writer_finish(&w, EPH_PROTO_HELLO, 0, 0);
}

int eph_proto_hello_decode(const uint8_t *payload, size_t len, uint32_t *version, uint32_t *pid)
{
    struct eph_proto_reader r;
    eph_proto_reader_init(&r, payload, len);
    *version = eph_proto_get_u32(&r);
    *pid = eph_proto_get_u32(&r);
    int rc = eph_proto_reader_done(&r);
    if (rc)
        return rc;
    return *version == EPH_PROTO_VERSION ? 0 : -EPROTO;
}

int eph_proto_path_check(const char *path)
{
    size_t n = strnlen(path, EPH_PROTO_MAX_PATH + 1);
    if (n == 0)
        return -EINVAL;
    if (n > EPH_PROTO_MAX_PATH)
        return -ENAMETOOLONG;
    const char *p = path;
    if (*p == '/')
        p++;
    if (*p == '\0')
        return -EINVAL; /* "/" itself is not a file */
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0)
            return -EINVAL; /* "a//b" or a trailing "/" */
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return -EINVAL;
        if (len == 1 && p[0] == '.')
            return -EINVAL;
        p += len;
        if (*p == '/')
            p++;
        if (slash && *p == '\0')
            return -EINVAL;
    }
    return 0;
}

bool eph_proto_utf8_valid(const char *str, size_t n)
{
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t more;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0)
            more = 1, cp = c & 0x1fu, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            more = 2, cp = c & 0x0fu, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            more = 3, cp = c & 0x07u, min = 0x10000;
        else
            return false;
        if (more > n - i - 1)
            return false;
        for (size_t k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += more + 1;
    }
    return true;
}

int eph_proto_rel_path_check(const char *path)
{
    int rc = eph_proto_path_check(path);
    if (rc)
        return rc;
    if (path[0] == '/')
        return -EINVAL;
    size_t n = strlen(path);
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)path[i] < 0x20 || path[i] == 0x7f)
            return -EINVAL;
    return eph_proto_utf8_valid(path, n) ? 0 : -EILSEQ;
}

/* ---- Listing ----------------------------------------------------------------------------- */

/* A frame whose payload is two u32 (list_files, list_end). */
static int pair_encode(uint8_t *buf, size_t cap, uint8_t type, uint32_t id, uint32_t a, uint32_t b)
{
    uint8_t p[8];
    put32(p, a);
    put32(p + 4, b);
    return eph_proto_raw_encode(buf, cap, type, 0, id, p, sizeof(p));
}

int eph_proto_list_files_encode(uint8_t *buf, size_t cap, uint32_t id, uint32_t max_entries,
                                uint32_t max_depth)
{
    if (max_entries == 0 || max_entries > EPH_PROTO_MAX_LIST_ENTRIES || max_depth == 0 ||
        max_depth > EPH_PROTO_MAX_LIST_DEPTH)
        return -EINVAL;
    return pair_encode(buf, cap, EPH_PROTO_LIST_FILES, id, max_entries, max_depth);
}

int eph_proto_list_files_decode(const uint8_t *payload, size_t len, uint32_t *max_entries,
                                uint32_t *max_depth)
{
    if (len != 8)
        return -EPROTO;
    uint32_t n = le32(payload), d = le32(payload + 4);
    if (n == 0 || n > EPH_PROTO_MAX_LIST_ENTRIES || d == 0 || d > EPH_PROTO_MAX_LIST_DEPTH)
        return -EPROTO;
    *max_entries = n;
    *max_depth = d;
    return 0;
}

static bool kind_ok(uint32_t kind)
{
    return kind == EPH_PROTO_KIND_FILE || kind == EPH_PROTO_KIND_DIR ||
           kind == EPH_PROTO_KIND_SYMLINK;
}

int eph_proto_file_entry_encode(uint8_t *buf, size_t cap, uint32_t id,
                                const struct eph_proto_file_entry *e)
{
    struct eph_proto_writer w;
    const char *target = e->target ? e->target : "";
    if (!kind_ok(e->kind) || eph_proto_rel_path_check(e->path) ||
        (e->kind != EPH_PROTO_KIND_SYMLINK && target[0]))
        return -EINVAL;
    eph_proto_writer_init(&w, buf, cap);
    eph_proto_put_u32(&w, e->kind);
    eph_proto_put_u64(&w, e->size);
    eph_proto_put_string(&w, e->path, EPH_PROTO_MAX_PATH);
    eph_proto_put_string(&w, target, EPH_PROTO_MAX_PATH);
    return eph_proto_writer_finish(&w, EPH_PROTO_FILE_ENTRY, 0, id);
}

int eph_proto_file_entry_decode(const uint8_t *payload, size_t len,
                                struct eph_proto_file_entry *out)
{
    struct eph_proto_reader r;
    eph_proto_reader_init(&r, payload, len);
    out->kind = eph_proto_get_u32(&r);
    out->size = eph_proto_get_u64(&r);
    out->path = eph_proto_get_string(&r, EPH_PROTO_MAX_PATH);
    out->target = eph_proto_get_string(&r, EPH_PROTO_MAX_PATH);
    int rc = eph_proto_reader_done(&r);
    if (rc)
        return rc;
    if (!kind_ok(out->kind) || eph_proto_rel_path_check(out->path))
        return -EPROTO;
    size_t tn = strlen(out->target);
    if (out->kind != EPH_PROTO_KIND_SYMLINK
            ? tn != 0 || (out->kind == EPH_PROTO_KIND_DIR && out->size)
            : tn == 0 || out->size != tn)
        return -EPROTO;
    if (!eph_proto_utf8_valid(out->target, tn))
        return -EPROTO;
    return 0;
}

int eph_proto_list_end_encode(uint8_t *buf, size_t cap, uint32_t id, uint32_t flags, uint32_t count)
{
    if (flags & ~EPH_PROTO_LIST_TRUNCATED)
        return -EINVAL;
    return pair_encode(buf, cap, EPH_PROTO_LIST_END, id, flags, count);
}

int eph_proto_list_end_decode(const uint8_t *payload, size_t len, uint32_t *flags, uint32_t *count)
{
    if (len != 8)
        return -EPROTO;
    uint32_t f = le32(payload);
    if (f & ~EPH_PROTO_LIST_TRUNCATED)
        return -EPROTO;
    *flags = f;
    *count = le32(payload + 4);
    return 0;
}

/* ---- Tunnel ------------------------------------------------------------------------------ */

int eph_proto_tunnel_listen_encode(uint8_t *buf, size_t cap, uint32_t id, uint16_t port,
                                   uint32_t max_streams)
{
    uint8_t p[8];
    if (port == 0 || max_streams == 0 || max_streams > 1024)
        return -EINVAL;
    put32(p, port);
    put32(p + 4, max_streams);
    return eph_proto_raw_encode(buf, cap, EPH_PROTO_TUNNEL_LISTEN, 0, id, p, sizeof(p));
}

int eph_proto_tunnel_listen_decode(const uint8_t *payload, size_t len, uint16_t *port,
                                   uint32_t *max_streams)
{
    if (len != 8)
        return -EPROTO;
    uint32_t p = le32(payload), n = le32(payload + 4);
    if (p == 0 || p > 65535 || n == 0 || n > 1024)
        return -EPROTO;
    *port = (uint16_t)p;
    *max_streams = n;
    return 0;
}

static bool tunnel_value_ok(uint8_t type, uint32_t v)
{
    if (type == EPH_PROTO_TUNNEL_WINDOW)
        return v >= 1 && v <= EPH_PROTO_TUNNEL_WINDOW_SIZE;
    if (type == EPH_PROTO_TUNNEL_CLOSE)
        return v == EPH_PROTO_CLOSE_WRITE || v == EPH_PROTO_CLOSE_RESET;
    return false;
}

int eph_proto_tunnel_u32_encode(uint8_t *buf, size_t cap, uint8_t type, uint32_t stream,
                                uint32_t value)
{
    uint8_t p[4];
    if (!tunnel_value_ok(type, value))
        return -EINVAL;
    put32(p, value);
    return eph_proto_raw_encode(buf, cap, type, 0, stream, p, sizeof(p));
}

int eph_proto_tunnel_u32_decode(uint8_t type, const uint8_t *payload, size_t len, uint32_t *value)
{
    if (len != 4)
        return -EPROTO;
    uint32_t v = le32(payload);
    if (!tunnel_value_ok(type, v))
        return -EPROTO;
    *value = v;
    return 0;
}
