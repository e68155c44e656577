/* libFuzzer driver: the helpers that make hostile text safe (UTF-8 sanitising, cutting, relative
 * path checks) and the dollar parser. Checks the promises, not just the absence of crashes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/money.h"
#include "common/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Valid UTF-8 by the strict definition (no overlongs, surrogates or values past U+10FFFF). */
static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xe0) == 0xc0 ? 2
                     : (c & 0xf0) == 0xe0 ? 3
                     : (c & 0xf8) == 0xf0 ? 4
                                          : 0;
        if (!len || i + len > n || c == 0)
            return 0;
        unsigned cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return 0;
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *clean = eph_text_utf8_sanitize((const char *)data, size);
    if (!clean)
        return 0;
    if (!valid_utf8((const unsigned char *)clean, strlen(clean)))
        abort();
    char *cut = eph_text_cut(clean, size % 50);
    if (!cut || !valid_utf8((const unsigned char *)cut, strlen(cut)))
        abort();
    free(cut);
    /* A path the check accepts never climbs out and is never absolute. */
    if (eph_text_safe_relpath(clean, strlen(clean))) {
        if (clean[0] == '/' || strcmp(clean, "..") == 0 || strncmp(clean, "../", 3) == 0 ||
            strstr(clean, "/../") ||
            (strlen(clean) >= 3 && strcmp(clean + strlen(clean) - 3, "/..") == 0))
            abort();
    }
    int64_t micros;
    if (eph_money_parse_dollars(clean, &micros) == 0 && micros < 0)
        abort();
    free(clean);
    return 0;
}
