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
/* The value of one hexadecimal digit, either case, or -1 for any other byte. */
int eph_text_hex_value(unsigned char c);

/* The rule for the path of a file given to a run, shared by the server and the client: NULL when
 * s (n bytes as received) can name a file in the scratch directory, else why not (a lowercase
 * sentence): empty, over 4096 bytes, NUL or another control character, absolute, a trailing '/',
 * an empty, '.' or '..' component. */
#define EPH_TEXT_PATH_MAX 4096
const char *eph_text_file_path_error(const char *s, size_t n);
/* Among n valid paths, the first two that cannot both be files (the same path twice, or a path
 * that is a file and a directory above another): NULL when there are none, else why, with their
 * indexes in *first < *second. */
const char *eph_text_file_paths_conflict(const char *const *paths, size_t n, size_t *first,
                                         size_t *second);

/* snprintf for text that must be whole (a path, an id, a command line): 0, or -ENAMETOOLONG when
 * the result does not fit in size bytes (buf then holds a cut prefix that must not be used). */
int eph_text_format(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), warn_unused_result));
/* snprintf for a message meant for people, where a cut is acceptable: the result is cut to fit at a
 * UTF-8 character boundary, never inside a character. size must be at least 1. */
void eph_text_format_cut(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
