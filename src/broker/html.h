/*
 * html.h - HTML reduced to readable text, for web_fetch (docs/BROKER.md). Pure code, bounded: the
 * output never exceeds the input's length.
 */
#ifndef EPH_BROKER_HTML_H
#define EPH_BROKER_HTML_H

#include <stddef.h>

/* The text of an HTML document (len bytes): tags removed, the contents of script, style,
 * noscript, template, svg and head left out, block elements (p, br, div, li, h1-h6, tr...) as line
 * breaks, the common entities (&amp; &lt; &gt; &quot; &#39; &nbsp; and numeric ones in ASCII)
 * decoded, runs of blank space collapsed. Returns a NUL-terminated string (free()), or NULL when
 * out of memory. */
char *eph_html_to_text(const char *html, size_t len);

#endif
