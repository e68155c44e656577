/*
 * html.c - HTML reduced to readable text. See html.h.
 */
#include "broker/html.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Elements whose whole content is left out. */
static const char *const hidden[] = {"script", "style", "noscript", "template", "svg", "head"};
/* Elements that break a line. */
static const char *const blocks[] = {"p",   "br",         "div",     "li",      "tr",     "h1",
                                     "h2",  "h3",         "h4",      "h5",      "h6",     "ul",
                                     "ol",  "table",      "section", "article", "header", "footer",
                                     "pre", "blockquote", "title",   "hr"};

static bool name_is(const char *name, size_t n, const char *const *set, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (strlen(set[i]) == n && strncasecmp(name, set[i], n) == 0)
            return true;
    return false;
}

/* Appends c, collapsing blank runs: at most one space, at most two line breaks. */
static void put(char *out, size_t *o, char c)
{
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        if (*o == 0 || out[*o - 1] == ' ' || out[*o - 1] == '\n')
            return;
        out[(*o)++] = ' ';
        return;
    }
    if (c == '\n') {
        while (*o > 0 && out[*o - 1] == ' ')
            (*o)--;
        if (*o == 0 || (*o >= 2 && out[*o - 1] == '\n' && out[*o - 2] == '\n'))
            return;
        out[(*o)++] = '\n';
        return;
    }
    out[(*o)++] = c;
}

/* Decodes the entity at s (after '&'): the character it stands for and its length, or 0. */
static size_t entity(const char *s, size_t n, char *c)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp;", '&'},  {"lt;", '<'},    {"gt;", '>'},  {"quot;", '"'},
                 {"#39;", '\''}, {"apos;", '\''}, {"nbsp;", ' '}};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        size_t l = strlen(named[i].name);
        if (n >= l && strncasecmp(s, named[i].name, l) == 0) {
            *c = named[i].c;
            return l;
        }
    }
    if (n >= 3 && s[0] == '#') {
        size_t i = 1;
        unsigned v = 0;
        bool hex = s[1] == 'x' || s[1] == 'X';
        if (hex)
            i++;
        size_t start = i;
        while (i < n && i < 10) {
            char d = s[i];
            if (d >= '0' && d <= '9')
                v = v * (hex ? 16 : 10) + (unsigned)(d - '0');
            else if (hex && ((d | 0x20) >= 'a' && (d | 0x20) <= 'f'))
                v = v * 16 + (unsigned)((d | 0x20) - 'a' + 10);
            else
                break;
            i++;
        }
        if (i > start && i < n && s[i] == ';' && v >= 0x20 && v < 0x7f) {
            *c = (char)v;
            return i + 1;
        }
    }
    return 0;
}

char *eph_html_to_text(const char *html, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    while (i < len) {
        char c = html[i];
        if (c == '<') {
            /* A comment: skipped whole. */
            if (len - i >= 4 && memcmp(html + i, "<!--", 4) == 0) {
                const char *end = NULL;
                for (size_t k = i + 4; k + 3 <= len; k++)
                    if (memcmp(html + k, "-->", 3) == 0) {
                        end = html + k + 3;
                        break;
                    }
                i = end ? (size_t)(end - html) : len;
                continue;
            }
            size_t k = i + 1;
            bool closing = k < len && html[k] == '/';
            if (closing)
                k++;
            size_t ns = k;
            while (k < len && (((html[k] | 0x20) >= 'a' && (html[k] | 0x20) <= 'z') ||
                               (html[k] >= '0' && html[k] <= '9')))
                k++;
            size_t nl = k - ns;
            const char *name = html + ns;
            while (k < len && html[k] != '>')
                k++;
            i = k < len ? k + 1 : len;
            if (nl == 0)
                continue;
            if (!closing && name_is(name, nl, hidden, sizeof(hidden) / sizeof(hidden[0]))) {
                /* Skip to the matching close tag. */
                size_t j = i;
                for (; j + 2 + nl < len; j++)
                    if (html[j] == '<' && html[j + 1] == '/' &&
                        strncasecmp(html + j + 2, name, nl) == 0)
                        break;
                while (j < len && html[j] != '>')
                    j++;
                i = j < len ? j + 1 : len;
                continue;
            }
            if (name_is(name, nl, blocks, sizeof(blocks) / sizeof(blocks[0])))
                put(out, &o, '\n');
            continue;
        }
        if (c == '&') {
            char d;
            size_t l = entity(html + i + 1, len - i - 1, &d);
            if (l) {
                put(out, &o, d);
                i += 1 + l;
                continue;
            }
        }
        put(out, &o, c == '\0' ? ' ' : c);
        i++;
    }
    while (o > 0 && (out[o - 1] == ' ' || out[o - 1] == '\n'))
        o--;
    size_t start = 0;
    while (start < o && (out[start] == '\n' || out[start] == ' '))
        start++;
    memmove(out, out + start, o - start);
    out[o - start] = '\0';
    return out;
}
