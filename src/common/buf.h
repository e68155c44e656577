/*
 * buf.h - a growable byte buffer with a hard cap.
 *
 * Every buffer filled from the network, the model or the sandbox is one of these: appending past
 * the cap fails with -EMSGSIZE and leaves the buffer as it was, instead of growing without bound.
 * The data is always NUL-terminated (the terminator is not counted in len). The buffer owns data;
 * eph_buf_release() frees it and leaves an empty buffer with the same cap.
 */
#ifndef EPH_BUF_H
#define EPH_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct eph_buf {
    char *data;
    size_t len;
    size_t alloc;
    size_t max; /* cap on len */
};

void eph_buf_init(struct eph_buf *b, size_t max);
void eph_buf_release(struct eph_buf *b);
void eph_buf_reset(struct eph_buf *b); /* len = 0, keeps the allocation */
/* 0, -EMSGSIZE past the cap, -ENOMEM. */
int eph_buf_append(struct eph_buf *b, const void *data, size_t n)
    __attribute__((warn_unused_result));
int eph_buf_appends(struct eph_buf *b, const char *s) __attribute__((warn_unused_result));
int eph_buf_appendf(struct eph_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), warn_unused_result));
/* Hands the data to the caller (free() it) and leaves the buffer empty. Never NULL unless -ENOMEM
 * happened earlier. */
char *eph_buf_steal(struct eph_buf *b);

#endif
