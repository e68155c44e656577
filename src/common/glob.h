/*
 * glob.h - the patterns of a run's outputs (docs/API.md, "Outputs"): a path relative to the
 * scratch directory, matched component by component.
 *
 *   *    any run of characters inside one component (not '/')
 *   ?    one character (one byte) inside one component
 *   **   as a whole component: zero or more components ("out/" then "**" matches all below out)
 *
 * So "*.png" is a PNG at the top, and "**", "/", "*.png" joined one at any depth. Everything
 * else matches itself. There are no character classes and no escapes, so that a pattern means
 * the same to the server, the CLI and the reader.
 */
#ifndef EPH_GLOB_H
#define EPH_GLOB_H

#include <stdbool.h>
#include <stddef.h>

/* At most this many bytes in a pattern. */
#define EPH_GLOB_PATTERN_MAX 1024

/* Whether path (relative, '/'-separated, no empty components) matches pattern. */
bool eph_glob_match(const char *pattern, const char *path);
/* NULL when s (n bytes as received) is a pattern a run may give, else why not (a lowercase
 * sentence): empty, too long, NUL or a control character, absolute, an empty, '.' or '..'
 * component, a trailing '/', or '**' inside a component. */
const char *eph_glob_pattern_error(const char *s, size_t n);

#endif
