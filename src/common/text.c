#include "common/text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return s[0] ? 1 : 0;
    size_t len;
    uint32_t cp;
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2;
        cp = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3;
        cp = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and values past U+10FFFF are invalid. */
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return len;
}

char *eph_text_utf8_sanitize(const char *s, size_t n)
{
    /* Worst case: every byte becomes the 3-byte replacement character. */
    if (n > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i);
        if (len) {
            memcpy(out + o, p + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

char *eph_text_cut(const char *s, size_t max_chars)
{
    size_t i = 0, chars = 0;
    while (s[i] && chars < max_chars) {
        i++;
        while (((unsigned char)s[i] & 0xc0) == 0x80)
            i++;
        chars++;
    }
    bool cut = s[i] != '\0';
    char *out = malloc(i + (cut ? 4 : 1));
    if (!out)
        return NULL;
    memcpy(out, s, i);
    if (cut)
        memcpy(out + i, "\xe2\x80\xa6", 3), i += 3;
    out[i] = '\0';
    return out;
}

bool eph_text_safe_relpath(const char *s, size_t n)
{
    if (n == 0 || n > 4096 || strlen(s) != n || s[0] == '/')
        return false;
    const char *p = s;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return false;
        if (!slash)
            break;
        p = slash + 1;
    }
    return true;
}

const char *eph_text_file_path_error(const char *s, size_t n)
{
    if (n == 0)
        return "the path is empty";
    if (n > EPH_TEXT_PATH_MAX)
        return "the path is longer than 4096 bytes";
    if (strlen(s) != n)
        return "the path holds a NUL byte";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return "the path holds a control character";
    if (s[0] == '/')
        return "the path is absolute";
    if (s[n - 1] == '/')
        return "the path ends with '/' (it must name a file)";
    for (const char *p = s;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0)
            return "the path has an empty component ('//')";
        if (len == 1 && p[0] == '.')
            return "the path has a '.' component";
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return "the path has a '..' component";
        if (!slash)
            return NULL;
        p = slash + 1;
    }
}

/* Whether a (a valid path) is a directory above b: b starts with a and then '/'. */
static bool is_parent_of(const char *a, const char *b)
{
    size_t n = strlen(a);
    return strncmp(a, b, n) == 0 && b[n] == '/';
}

const char *eph_text_file_paths_conflict(const char *const *paths, size_t n, size_t *first,
                                         size_t *second)
{
    /* Quadratic, and fine: a run takes at most a hundred files. */
    for (size_t j = 1; j < n; j++) {
        for (size_t i = 0; i < j; i++) {
            *first = i;
            *second = j;
            if (strcmp(paths[i], paths[j]) == 0)
                return "the same path is given twice";
            if (is_parent_of(paths[i], paths[j]) || is_parent_of(paths[j], paths[i]))
                return "one path is a file and the other puts a file under it";
        }
    }
    return NULL;
}

int eph_text_format(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    return (size_t)n < size ? 0 : -ENAMETOOLONG;
}

void eph_text_format_cut(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    if (n < 0) {
        buf[0] = '\0';
        return;
    }
    if ((size_t)n < size)
        return;
    /* Cut: drop the continuation bytes and the lead byte of a character the cut split. */
    size_t len = size - 1;
    size_t back = len;
    while (back > 0 && ((unsigned char)buf[back - 1] & 0xc0) == 0x80)
        back--;
    if (back > 0 && (unsigned char)buf[back - 1] >= 0xc0 &&
        utf8_seq((const unsigned char *)buf + back - 1, len - (back - 1)) == 0)
        len = back - 1;
    buf[len] = '\0';
}

int eph_text_hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
