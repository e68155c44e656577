/*
 * glob.c - output patterns (glob.h).
 */
#include "common/glob.h"

#include <string.h>

#include "common/text.h"

/* One component: '*' and '?' never cross a '/'; [p, pe) against [s, se). */
static bool component_match(const char *p, const char *pe, const char *s, const char *se)
{
    const char *star = NULL, *resume = NULL;
    while (s < se) {
        if (p < pe && (*p == '?' || *p == *s)) {
            p++;
            s++;
        } else if (p < pe && *p == '*') {
            star = p++;
            resume = s;
        } else if (star) {
            /* Backtrack: the last '*' takes one more character. */
            p = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (p < pe && *p == '*')
        p++;
    return p == pe;
}

static const char *component_end(const char *s)
{
    const char *slash = strchr(s, '/');
    return slash ? slash : s + strlen(s);
}

static bool match_from(const char *p, const char *s)
{
    for (;;) {
        if (*p == '\0')
            return *s == '\0';
        const char *pe = component_end(p);
        const char *pnext = *pe ? pe + 1 : pe;
        if (pe - p == 2 && p[0] == '*' && p[1] == '*') {
            /* Zero components, or one more and try again: depth is bounded by the path's. */
            if (match_from(pnext, s))
                return true;
            if (*s == '\0')
                return false;
            const char *se = component_end(s);
            s = *se ? se + 1 : se;
            continue;
        }
        if (*s == '\0')
            return false;
        const char *se = component_end(s);
        if (!component_match(p, pe, s, se))
            return false;
        p = pnext;
        s = *se ? se + 1 : se;
        if (*s == '\0' && *se == '/')
            return false;
    }
}

bool eph_glob_match(const char *pattern, const char *path)
{
    return pattern[0] && path[0] && match_from(pattern, path);
}

const char *eph_glob_pattern_error(const char *s, size_t n)
{
    if (n > EPH_GLOB_PATTERN_MAX)
        return "a pattern is at most 1024 bytes";
    const char *why = eph_text_file_path_error(s, n);
    if (why)
        return why;
    for (const char *p = s; *p;) {
        const char *pe = component_end(p);
        const char *two = strstr(p, "**");
        if (two && two < pe && !(pe - p == 2))
            return "'**' must be a whole component";
        p = *pe ? pe + 1 : pe;
    }
    return NULL;
}
