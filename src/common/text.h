/*
 * text.h - text from hostile sources made safe to store and show.
 */
#ifndef EPH_TEXT_H
#define EPH_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* A copy of n bytes as valid UTF-8: each invalid byte becomes U+FFFD and NUL becomes U+FFFD.
 * free() it. NULL on allocation failure. */
char *eph_text_utf8_sanitize(const char *s, size_t n);
/* A copy of s cut to at most max_chars code points, with "…" appended when cut. free() it. */
char *eph_text_cut(const char *s, size_t max_chars);
/* Whether s (NUL-terminated) is a relative path inside a directory: not empty, not absolute, no
 * ".." component, no NUL before the end (n = its length as received), at most 4096 bytes. */
bool eph_text_safe_relpath(const char *s, size_t n);

#endif
