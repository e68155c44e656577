#include "cli/sse.h"

#include <errno.h>
#include <string.h>

void eph_cli_sse_init(struct eph_cli_sse *p, size_t max_line, size_t max_event,
                      eph_cli_sse_event_fn on_event, void *arg)
{
    memset(p, 0, sizeof(*p));
    eph_buf_init(&p->line, max_line);
    eph_buf_init(&p->data, max_event);
    /* The type comes from one line, so the line cap bounds it already. */
    eph_buf_init(&p->type, max_line);
    p->retry_ms = -1;
    p->on_event = on_event;
    p->arg = arg;
}

void eph_cli_sse_release(struct eph_cli_sse *p)
{
    eph_buf_release(&p->line);
    eph_buf_release(&p->data);
    eph_buf_release(&p->type);
}

void eph_cli_sse_reset(struct eph_cli_sse *p)
{
    eph_buf_reset(&p->line);
    eph_buf_reset(&p->data);
    eph_buf_reset(&p->type);
    p->skip_lf = false;
    p->started = false; /* a new connection may start with its own byte order mark */
    p->error = 0;
}

static int sse_fail(struct eph_cli_sse *p, int rc)
{
    p->error = rc;
    return rc;
}

static int sse_dispatch(struct eph_cli_sse *p)
{
    if (p->data.len == 0) {
        eph_buf_reset(&p->type);
        return 0;
    }
    /* Every data line appended a LF; the last one is not part of the data. */
    p->data.len--;
    p->data.data[p->data.len] = '\0';
    struct eph_cli_sse_event ev = {
        .type = p->type.len ? p->type.data : "message",
        .data = p->data.data,
        .data_len = p->data.len,
        .id = p->id,
    };
    int rc = p->on_event ? p->on_event(p->arg, &ev) : 0;
    eph_buf_reset(&p->data);
    eph_buf_reset(&p->type);
    return rc;
}

static bool field_is(const char *field, size_t len, const char *name)
{
    return len == strlen(name) && memcmp(field, name, len) == 0;
}

static int sse_line(struct eph_cli_sse *p, const char *line, size_t len)
{
    if (!p->started) {
        p->started = true;
        if (len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
            line += 3;
            len -= 3;
        }
    }
    if (len == 0)
        return sse_dispatch(p);
    if (line[0] == ':') {
        p->comments++;
        return 0;
    }
    const char *colon = memchr(line, ':', len);
    size_t flen = colon ? (size_t)(colon - line) : len;
    const char *value = colon ? colon + 1 : line + len;
    size_t vlen = colon ? len - flen - 1 : 0;
    if (vlen && value[0] == ' ') {
        value++;
        vlen--;
    }
    int rc = 0;
    if (field_is(line, flen, "event")) {
        eph_buf_reset(&p->type);
        rc = eph_buf_append(&p->type, value, vlen);
    } else if (field_is(line, flen, "data")) {
        rc = eph_buf_append(&p->data, value, vlen);
        if (!rc)
            rc = eph_buf_append(&p->data, "\n", 1);
    } else if (field_is(line, flen, "id")) {
        /* An id with a NUL could not be sent back in Last-Event-ID; an overlong one is not ours. */
        if (!memchr(value, '\0', vlen) && vlen <= EPH_CLI_SSE_ID_MAX) {
            memcpy(p->id, value, vlen);
            p->id[vlen] = '\0';
        }
    } else if (field_is(line, flen, "retry")) {
        long ms = 0;
        size_t i;
        for (i = 0; i < vlen && value[i] >= '0' && value[i] <= '9'; i++)
            ms = ms > 100000000 ? ms : ms * 10 + (value[i] - '0');
        if (vlen && i == vlen)
            p->retry_ms = ms;
    }
    return rc ? sse_fail(p, rc) : 0;
}

int eph_cli_sse_feed(struct eph_cli_sse *p, const char *bytes, size_t n)
{
    if (p->error)
        return p->error;
    size_t i = 0;
    if (n && p->skip_lf) {
        if (bytes[0] == '\n')
            i = 1;
        p->skip_lf = false;
    }
    while (i < n) {
        size_t j = i;
        while (j < n && bytes[j] != '\n' && bytes[j] != '\r')
            j++;
        int rc = eph_buf_append(&p->line, bytes + i, j - i);
        if (rc)
            return sse_fail(p, rc);
        if (j == n)
            break;
        if (bytes[j] == '\r') {
            if (j + 1 < n) {
                if (bytes[j + 1] == '\n')
                    j++;
            } else {
                p->skip_lf = true;
            }
        }
        i = j + 1;
        rc = sse_line(p, p->line.data ? p->line.data : "", p->line.len);
        eph_buf_reset(&p->line);
        if (rc)
            return rc;
    }
    return 0;
}
