/*
 * answer.c - a connection's answer on its way to the program. See answer.h.
 */
#include "broker/answer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#define FRAMING "Connection: close\r\n\r\n"
/* Room kept after a decoded body's head for its Content-Length and the framing. */
#define FRAMING_ROOM 64

void eph_answer_init(struct eph_answer *a, uint64_t max_bytes, eph_answer_write_fn write, void *arg)
{
    memset(a, 0, sizeof(*a));
    eph_redactor_begin(&a->red);
    a->write = write;
    a->arg = arg;
    a->max_bytes = max_bytes;
    eph_buf_init(&a->head, (size_t)max_bytes);
    eph_buf_init(&a->out, (size_t)max_bytes);
    eph_buf_init(&a->tmp, (size_t)max_bytes);
}

void eph_answer_release(struct eph_answer *a)
{
    eph_redactor_release(&a->red);
    if (a->decoding)
        eph_decoder_release(&a->dec);
    if (a->tmp.data) /* a decoded piece before redaction */
        sodium_memzero(a->tmp.data, a->tmp.alloc);
    eph_buf_release(&a->tmp);
    eph_buf_release(&a->head);
    eph_buf_release(&a->out);
}

static int emit(struct eph_answer *a, const char *data, size_t n)
{
    if (n == 0)
        return 0;
    a->head_sent = true;
    a->sent += n;
    return a->write(a->arg, data, n);
}

static int flush_out(struct eph_answer *a)
{
    int rc = emit(a, a->out.data, a->out.len);
    eph_buf_reset(&a->out);
    return rc;
}

/* An error the caller answers with 502 and this code, when nothing went to the program yet. */
static int refuse(struct eph_answer *a, int rc, const char *code, const char *reason)
{
    if (!a->head_sent && !a->refused) {
        a->refused = code;
        a->reason = reason;
    }
    return rc;
}

static int too_large(struct eph_answer *a, int rc)
{
    if (rc != -EMSGSIZE)
        return rc;
    return refuse(a, rc, "response_too_large",
                  "the connection's answer is over the broker's cap once decoded");
}

static bool starts_ci(const char *line, size_t n, const char *prefix)
{
    size_t pl = strlen(prefix);
    return n >= pl && strncasecmp(line, prefix, pl) == 0;
}

/* The status of "HTTP/x[.y] NNN ...", or 0. */
static int parse_status(const char *line, size_t n)
{
    const char *sp = memchr(line, ' ', n);
    if (!sp || (size_t)(line + n - sp) < 4)
        return 0;
    int st = 0;
    for (int i = 1; i <= 3; i++) {
        if (sp[i] < '0' || sp[i] > '9')
            return 0;
        st = st * 10 + (sp[i] - '0');
    }
    return st;
}

static int end_of_head(struct eph_answer *a)
{
    a->head_done = true;
    int rc = eph_redactor_finish(&a->red, &a->head);
    if (rc)
        return too_large(a, rc);
    if (a->enc == EPH_DECODE_UNSUPPORTED)
        return refuse(a, -ENOTSUP, "unsupported_encoding",
                      "the connection's upstream answered in a Content-Encoding the broker "
                      "cannot read");
    if (a->enc == EPH_DECODE_IDENTITY) {
        rc = eph_buf_appends(&a->head, FRAMING);
        return rc ? too_large(a, rc) : emit(a, a->head.data, a->head.len);
    }
    /* Held until the body is decoded and redacted whole: the head and the body together stay
     * within the cap. */
    if (a->head.len + FRAMING_ROOM > a->max_bytes)
        return too_large(a, -EMSGSIZE);
    a->out.max = (size_t)a->max_bytes - a->head.len - FRAMING_ROOM;
    rc = eph_decoder_init(&a->dec, a->enc);
    if (rc)
        return rc;
    a->decoding = true;
    return 0;
}

int eph_answer_header(struct eph_answer *a, const char *line, size_t n)
{
    if (a->head_done)
        return 0; /* a trailer: never part of the body, never needed by the program */
    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        int st = parse_status(line, n);
        a->skip_block = st >= 100 && st < 200;
        if (!a->skip_block)
            a->status = st;
    }
    if (a->skip_block)
        return 0;
    if ((n == 2 && line[0] == '\r' && line[1] == '\n') || (n == 1 && line[0] == '\n'))
        return end_of_head(a);
    if (starts_ci(line, n, "content-encoding:")) {
        eph_decode_add_header(&a->enc, line + 17, n - 17);
        return 0;
    }
    static const char *const drop[] = {
        "connection:", "keep-alive:", "transfer-encoding:", "content-length:", "proxy-"};
    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
        if (starts_ci(line, n, drop[i]))
            return 0;
    return too_large(a, eph_redactor_feed(&a->red, line, n, &a->head));
}

int eph_answer_body(struct eph_answer *a, const char *data, size_t n)
{
    if (!a->decoding) {
        if (a->sent + n > a->max_bytes)
            return -EMSGSIZE; /* cut: the head went out already */
        int rc = eph_redactor_feed(&a->red, data, n, &a->out);
        return rc ? rc : flush_out(a);
    }
    a->encoded += n;
    if (a->encoded > a->max_bytes)
        return too_large(a, -EMSGSIZE);
    eph_buf_reset(&a->tmp);
    a->tmp.max = (size_t)(a->max_bytes - a->decoded);
    int rc = eph_decoder_feed(&a->dec, data, n, &a->tmp);
    if (rc == -EBADMSG)
        return refuse(a, rc, "bad_encoding",
                      "the connection's upstream sent a body that does not decode as its "
                      "Content-Encoding says");
    if (rc)
        return too_large(a, rc);
    a->decoded += a->tmp.len;
    return a->tmp.len ? too_large(a, eph_redactor_feed(&a->red, a->tmp.data, a->tmp.len, &a->out))
                      : 0;
}

int eph_answer_end(struct eph_answer *a)
{
    if (!a->head_done)
        return 0;
    if (!a->decoding) {
        int rc = eph_redactor_finish(&a->red, &a->out);
        return rc ? rc : flush_out(a);
    }
    int rc = eph_decoder_finish(&a->dec, &a->tmp);
    if (rc)
        return refuse(a, rc, "bad_encoding",
                      "the connection's upstream sent a compressed body that is cut short");
    if ((rc = eph_redactor_finish(&a->red, &a->out)))
        return too_large(a, rc);
    /* The decoded length; none for an answer without a body (HEAD, 204, 304). */
    rc = a->encoded ? eph_buf_appendf(&a->head, "Content-Length: %zu\r\n" FRAMING, a->out.len)
                    : eph_buf_appends(&a->head, FRAMING);
    if (rc)
        return too_large(a, rc);
    rc = emit(a, a->head.data, a->head.len);
    return rc ? rc : flush_out(a);
}
