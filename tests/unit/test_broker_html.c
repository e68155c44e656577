/* HTML reduced to text for web_fetch: tags out, hidden elements out, blocks as lines, entities
 * decoded, blank runs collapsed, never longer than the input, never past it on garbage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker/html.h"

static void check(const char *in, const char *want)
{
    char *got = eph_html_to_text(in, strlen(in));
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("'%s' became '%s', not '%s'", in, got, want);
    assert_true(strlen(got) <= strlen(in));
    free(got);
}

static void test_html(void **state)
{
    check("<html><head><title>T</title><style>p{}</style></head><body><h1>Example "
          "Domain</h1><p>This domain is for use in <a href=\"x\">examples</a>.</p>"
          "<script>var secret = 1;</script><p>More&nbsp;info &amp; &lt;stuff&gt; &#65;&#x42;</p>"
          "</body></html>",
          "Example Domain\n\nThis domain is for use in examples.\n\nMore info & <stuff> AB");
    check("plain   text\n\n\n\nwith   gaps", "plain text\n\nwith gaps");
    check("a<br>b<br/>c", "a\nb\nc");
    check("<!-- hidden <p>x</p> -->shown", "shown");
    check("<SCRIPT>alert(1)</SCRIPT>ok", "ok");
    check("&unknown; &#0; &#999999;", "&unknown; &#0; &#999999;");
    check("", "");
}

static void test_garbage(void **state)
{
    /* Unterminated tags, comments, hidden elements: no read past the end, bounded output. */
    static const char *bad[] = {"<",  "<p",  "<!--", "<script>never closed", "&",
                                "&#", "&#x", "</",   "<a href='>'>x",        "<style"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *got = eph_html_to_text(bad[i], strlen(bad[i]));
        assert_non_null(got);
        assert_true(strlen(got) <= strlen(bad[i]));
        free(got);
    }
    char nul[] = {'a', '\0', 'b'};
    char *got = eph_html_to_text(nul, 3);
    assert_non_null(got);
    assert_string_equal(got, "a b");
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_html), cmocka_unit_test(test_garbage)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
