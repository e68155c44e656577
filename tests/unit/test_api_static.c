/* The web UI's paths and its embedded files (src/api/static.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "api/static.h"

static void test_page_paths(void **state)
{
    assert_true(eph_api_static_match("/"));
    assert_true(eph_api_static_match("/runs"));
    assert_true(eph_api_static_match("/keys"));
    assert_true(eph_api_static_match("/runs/run_0123456789abcdef0123456789abcdef"));
    assert_true(eph_api_static_match("/sandboxes"));
    assert_true(eph_api_static_match("/sandboxes/sbx_0123456789abcdef0123456789abcdef"));
    assert_true(eph_api_static_match("/assets/app.js"));
}

static void test_other_paths_are_the_apis(void **state)
{
    assert_false(eph_api_static_match(""));
    assert_false(eph_api_static_match("/runs/"));
    assert_false(eph_api_static_match("/runs/a/b"));
    assert_false(eph_api_static_match("/runs/../etc/passwd"));
    assert_false(eph_api_static_match("/runs/run_x?y"));
    assert_false(eph_api_static_match("/sandboxes/"));
    assert_false(eph_api_static_match("/sandboxes/a/b"));
    assert_false(eph_api_static_match("/sandboxes/../etc/passwd"));
    assert_false(eph_api_static_match("/v1/runs"));
    assert_false(eph_api_static_match("/healthz"));
    assert_false(eph_api_static_match("/index.html"));
    assert_false(eph_api_static_match("//"));
    char long_id[100];
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    char path[120];
    snprintf(path, sizeof(path), "/runs/%s", long_id);
    assert_false(eph_api_static_match(path)); /* over 64 characters */
}

static void test_embedded_files(void **state)
{
    const char *want[] = {"index.html",    "app.js",        "api.js",       "format.js", "app.css",
                          "marked.min.js", "purify.min.js", "request.json", "icon.svg"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct eph_web_file *f = eph_api_static_find(want[i]);
        assert_non_null(f);
        assert_true(f->len > 0);
        /* A strong ETag: 16 hex digits in quotes. */
        assert_int_equal(strlen(f->etag), 18);
        assert_int_equal(f->etag[0], '"');
        assert_int_equal(f->etag[17], '"');
        assert_int_equal(strspn(f->etag + 1, "0123456789abcdef"), 16);
    }
    assert_null(eph_api_static_find("nope.js"));
    assert_null(eph_api_static_find(""));
    assert_null(eph_api_static_find("../index.html"));
    const struct eph_web_file *html = eph_api_static_find("index.html");
    assert_non_null(memmem(html->data, html->len, "/assets/app.js", 14));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_paths),
        cmocka_unit_test(test_other_paths_are_the_apis),
        cmocka_unit_test(test_embedded_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
