#include "common/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void eph_buf_init(struct eph_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->max = max;
}

void eph_buf_release(struct eph_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
}

void eph_buf_reset(struct eph_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static int buf_reserve(struct eph_buf *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra)
        return -EMSGSIZE;
    size_t need = b->len + extra + 1;
    if (need <= b->alloc)
        return 0;
    size_t n = b->alloc ? b->alloc : 64;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    char *p = realloc(b->data, n);
    if (!p)
        return -ENOMEM;
    b->data = p;
    b->alloc = n;
    return 0;
}

int eph_buf_append(struct eph_buf *b, const void *data, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int eph_buf_appends(struct eph_buf *b, const char *s)
{
    return eph_buf_append(b, s, strlen(s));
}

int eph_buf_appendf(struct eph_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    int rc = buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *eph_buf_steal(struct eph_buf *b)
{
    char *p = b->data;
    if (!p)
        p = calloc(1, 1);
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    return p;
}
