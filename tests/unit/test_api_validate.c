/* The API's input rules without a socket (src/api/validate.c, the connection rules of
 * connections.c, the file path rule of common/text.c, the credit bound of common/money.c), and the
 * admission of a run that cannot be queued: a 503 with nothing reserved, not a 201, the run
 * settled by the settler thread and never on the thread that admitted it. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/api.h"
#include "api/validate.h"
#include "common/clock.h"
#include "common/money.h"
#include "common/text.h"
#include "daemon/config.h"
#include "run/admit.h"
#include "run/live.h"
#include "run/scheduler.h"
#include "run/worker.h"
#include "store/store.h"
#include "store_fixture.h"

static struct eph_config cfg;

static int setup_cfg(void **state)
{
    return eph_config_defaults(&cfg);
}

static int teardown_cfg(void **state)
{
    eph_config_release(&cfg);
    return 0;
}

/* Validates text as a create body: the error's param ("" when accepted). */
static const char *create_param(const char *text)
{
    static struct eph_api_error e;
    json_error_t je;
    json_t *body = json_loads(text, JSON_ALLOW_NUL, &je);
    assert_non_null(body);
    struct eph_api_create c;
    memset(&e, 0, sizeof(e));
    int rc = eph_api_validate_create(body, &cfg, &c, &e);
    if (rc == 0) {
        eph_api_create_release(&c);
        e.param[0] = '\0';
    } else {
        assert_int_equal(rc, -EINVAL);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.type, "invalid_request_error");
        assert_true(strlen(e.message) > 0);
    }
    json_decref(body);
    return e.param;
}

static void test_create_accepts_and_defaults(void **state)
{
    json_t *body = json_pack("{s:s, s:i, s:[{s:s, s:s}]}", "prompt", "hello", "max_cost_micros",
                             1000, "files", "path", "src/a.c", "content", "int x;");
    struct eph_api_create c;
    struct eph_api_error e;
    assert_int_equal(eph_api_validate_create(body, &cfg, &c, &e), 0);
    assert_string_equal(c.prompt, "hello");
    assert_string_equal(c.model, cfg.default_model);
    assert_true(c.shell);
    assert_false(c.web);
    assert_int_equal(c.timeout, 120);
    assert_int_equal(c.max_cost, 1000);
    assert_int_equal(json_array_size(c.files), 1);
    json_t *f = json_array_get(c.files, 0);
    assert_string_equal(json_string_value(json_object_get(f, "content_base64")), "aW50IHg7");
    assert_int_equal(json_integer_value(json_object_get(f, "size")), 6);
    eph_api_create_release(&c);
    json_decref(body);
}

/* A replay may leave the prompt to the original's. */
static void test_create_replay_of(void **state)
{
    json_t *body = json_pack("{s:s, s:i}", "replay_of", "run_0123456789abcdef0123456789abcdef",
                             "max_cost_micros", 1000);
    struct eph_api_create c;
    struct eph_api_error e;
    assert_int_equal(eph_api_validate_create(body, &cfg, &c, &e), 0);
    assert_string_equal(c.replay_of, "run_0123456789abcdef0123456789abcdef");
    assert_null(c.prompt);
    eph_api_create_release(&c);
    json_decref(body);
}

/* "image" names an image (docs/IMAGES.md); whether it exists is the caller's check. */
static void test_create_image(void **state)
{
    json_t *body =
        json_pack("{s:s, s:s, s:i}", "prompt", "p", "image", "tools-2", "max_cost_micros", 1000);
    struct eph_api_create c;
    struct eph_api_error e;
    assert_int_equal(eph_api_validate_create(body, &cfg, &c, &e), 0);
    assert_string_equal(c.image, "tools-2");
    eph_api_create_release(&c);
    json_decref(body);
    assert_string_equal(create_param("{\"prompt\": \"p\", \"image\": 1, \"max_cost_micros\": 1}"),
                        "image");
    assert_string_equal(
        create_param("{\"prompt\": \"p\", \"image\": \"Tools\", \"max_cost_micros\": 1}"), "image");
    assert_string_equal(
        create_param("{\"prompt\": \"p\", \"image\": \"../x\", \"max_cost_micros\": 1}"), "image");
    assert_string_equal(
        create_param("{\"prompt\": \"p\", \"image\": \"\", \"max_cost_micros\": 1}"), "image");
}

static void test_create_refusals_name_the_field(void **state)
{
    assert_string_equal(create_param("{\"max_cost_micros\": 1}"), "prompt");
    assert_string_equal(create_param("{\"prompt\": \"\", \"max_cost_micros\": 1}"), "prompt");
    assert_string_equal(create_param("{\"prompt\": \"a\\u0000b\", \"max_cost_micros\": 1}"),
                        "prompt");
    assert_string_equal(create_param("{\"prompt\": \"p\"}"), "max_cost_micros");
    assert_string_equal(create_param("{\"replay_of\": 1, \"max_cost_micros\": 1}"), "replay_of");
    assert_string_equal(create_param("{\"replay_of\": \"run_12\", \"max_cost_micros\": 1}"),
                        "replay_of");
    assert_string_equal(create_param("{\"replay_of\": \"run_0123456789ABCDEF0123456789abcdef\", "
                                     "\"max_cost_micros\": 1}"),
                        "replay_of");
    assert_string_equal(create_param("{\"replay_of\": \"run_0123456789abcdef0123456789abcdef\", "
                                     "\"prompt\": \"\", \"max_cost_micros\": 1}"),
                        "prompt");
    assert_string_equal(create_param("{\"prompt\": \"p\", \"max_cost_micros\": 0}"),
                        "max_cost_micros");
    assert_string_equal(create_param("{\"prompt\": \"p\", \"max_cost_micros\": 1, \"x\": 1}"), "x");
    assert_string_equal(
        create_param("{\"prompt\": \"p\", \"max_cost_micros\": 1, \"timeout_seconds\": 0}"),
        "timeout_seconds");
    assert_string_equal(create_param("{\"prompt\": \"p\", \"max_cost_micros\": 1, \"web\": 1}"),
                        "web");
    assert_string_equal(
        create_param("{\"prompt\": \"p\", \"max_cost_micros\": 1, \"connections\": [\"\"]}"),
        "connections");
    assert_string_equal(
        create_param("{\"prompt\": \"p\", \"max_cost_micros\": 1, \"model\": \"nope\"}"), "model");
}

/* A body with these two file paths: the param of the refusal, "" when accepted. */
static const char *files_param(const char *a, const char *b)
{
    char text[512];
    if (b)
        snprintf(text, sizeof(text),
                 "{\"prompt\": \"p\", \"max_cost_micros\": 1, \"files\": [{\"path\": \"%s\", "
                 "\"content\": \"x\"}, {\"path\": \"%s\", \"content\": \"y\"}]}",
                 a, b);
    else
        snprintf(text, sizeof(text),
                 "{\"prompt\": \"p\", \"max_cost_micros\": 1, \"files\": [{\"path\": \"%s\", "
                 "\"content\": \"x\"}]}",
                 a);
    return create_param(text);
}

static void test_create_file_paths(void **state)
{
    const char *bad[] = {".",         "a/.",   "./a",   "a/",      "a//b",
                         "/abs",      "..",    "a/..",  "a/../b",  "",
                         "a\\u0001b", "a\\nb", "a\\tb", "\\u007f", "a\\u0000b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("path '%s'\n", bad[i]);
        assert_string_equal(files_param(bad[i], NULL), "files[0].path");
    }
    const char *good[] = {"a", ".hidden", "a/b/c.txt", "a..b", "...", "dir/.env"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_string_equal(files_param(good[i], NULL), "");
    /* Two paths that cannot both be files. */
    assert_string_equal(files_param("a", "a"), "files[1].path");
    assert_string_equal(files_param("a", "a/b"), "files[1].path");
    assert_string_equal(files_param("a/b/c", "a/b"), "files[1].path");
    assert_string_equal(files_param("a/b", "a/c"), "");
    assert_string_equal(files_param("ab", "a/b"), "");
}

/* "outputs": at most 32 relative patterns; each bad one is refused by its index. */
static void test_create_outputs(void **state)
{
    char body[8192];
    const char *bad[] = {"..",    "../x", "a/../b", "/etc/passwd", "",     "a\\u0000b",
                         "a\\nb", "a/",   "a//b",   "x**",         "**y/z"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"p\",\"max_cost_micros\":1,\"outputs\":[\"ok.md\",\"%s\"]}", bad[i]);
        print_message("pattern '%s'\n", bad[i]);
        assert_string_equal(create_param(body), "outputs[1]");
    }
    char longp[1100];
    memset(longp, 'a', 1025);
    longp[1025] = '\0';
    snprintf(body, sizeof(body), "{\"prompt\":\"p\",\"max_cost_micros\":1,\"outputs\":[\"%s\"]}",
             longp);
    assert_string_equal(create_param(body), "outputs[0]");
    assert_string_equal(create_param("{\"prompt\":\"p\",\"max_cost_micros\":1,\"outputs\":\"a\"}"),
                        "outputs");
    assert_string_equal(create_param("{\"prompt\":\"p\",\"max_cost_micros\":1,\"outputs\":[1]}"),
                        "outputs[0]");
    /* 32 patterns are fine, 33 are not. */
    for (int n = 32; n <= 33; n++) {
        size_t o = (size_t)snprintf(body, sizeof(body),
                                    "{\"prompt\":\"p\",\"max_cost_micros\":1,\"outputs\":[");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(body + o, sizeof(body) - o, "%s\"f%d\"", i ? "," : "", i);
        snprintf(body + o, sizeof(body) - o, "]}");
        assert_string_equal(create_param(body), n == 32 ? "" : "outputs");
    }
    assert_string_equal(create_param("{\"prompt\":\"p\",\"max_cost_micros\":1,\"outputs\":"
                                     "[\"report.md\",\"out/**\",\"*.png\",\"**/*.csv\",\"a?c\"]}"),
                        "");
}

static void test_file_path_rule_reasons(void **state)
{
    assert_null(eph_text_file_path_error("a/b", 3));
    assert_non_null(strstr(eph_text_file_path_error("a/", 2), "ends with '/'"));
    assert_non_null(strstr(eph_text_file_path_error("a//b", 4), "empty component"));
    assert_non_null(strstr(eph_text_file_path_error("./a", 3), "'.'"));
    assert_non_null(strstr(eph_text_file_path_error("a\x1b", 2), "control"));
    assert_non_null(strstr(eph_text_file_path_error("a\0b", 3), "NUL"));
    const char *paths[] = {"x", "y/z", "y"};
    size_t a, b;
    assert_non_null(eph_text_file_paths_conflict(paths, 3, &a, &b));
    assert_int_equal(a, 1);
    assert_int_equal(b, 2);
}

/* Query string pairs split from "a=1&b=2" (values may be absent). */
static int query(const char *route, const char *qs, struct eph_api_query *q,
                 struct eph_api_error *e)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", qs);
    const char *names[8], *values[8];
    size_t n = 0;
    for (char *save = NULL, *p = strtok_r(buf, "&", &save); p && n < 8;
         p = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        names[n] = p;
        values[n++] = eq ? eq + 1 : NULL;
    }
    int rc = eph_api_validate_query(route, "GET", n, names, values, q, e);
    /* values point into buf: keep only what the tests read. */
    q->after = NULL;
    q->status = NULL;
    return rc;
}

static void test_query(void **state)
{
    struct eph_api_query q;
    struct eph_api_error e;
    assert_int_equal(query("/v1/runs", "", &q, &e), 0);
    assert_int_equal(q.limit, 20);
    assert_int_equal(query("/v1/runs", "limit=100&status=queued", &q, &e), 0);
    assert_int_equal(q.limit, 100);
    const char *bad[] = {"limit=0",
                         "limit=101",
                         "limit=+5",
                         "limit= 5",
                         "limit=5x",
                         "limit",
                         "status=nope",
                         "after=run_x",
                         "limit=1&limit=2",
                         "foo=1",
                         "limit=99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("query '%s'\n", bad[i]);
        assert_int_equal(query("/v1/runs", bad[i], &q, &e), -EINVAL);
        assert_int_equal(e.status, 400);
    }
    assert_int_equal(query("/v1/runs/{id}/events", "after=18446744073709551615", &q, &e), 0);
    assert_true(q.has_after_seq);
    assert_true(q.after_seq == UINT64_MAX);
    assert_int_equal(query("/v1/runs/{id}/events", "after=18446744073709551616", &q, &e), -EINVAL);
    assert_int_equal(query("/v1/runs/{id}/events", "after=-1", &q, &e), -EINVAL);
    assert_int_equal(query("/v1/runs/{id}/events", "limit=1", &q, &e), -EINVAL);
    assert_string_equal(e.code, "unknown_parameter");
    assert_string_equal(e.param, "limit");
    assert_int_equal(query("/v1/balance", "x=1", &q, &e), -EINVAL);
    assert_int_equal(query("/v1/balance", "", &q, &e), 0);
}

/* metadata[KEY]=VALUE on the run list: the keys copied out of the names, brackets inside a key
 * kept, the rules of metadata on each side, nowhere else. */
static void test_query_metadata(void **state)
{
    struct eph_api_query q;
    struct eph_api_error e;
    assert_int_equal(query("/v1/runs", "metadata[team]=red&metadata[a[b]]=&limit=5", &q, &e), 0);
    assert_int_equal(q.nmeta, 2);
    assert_string_equal(q.meta_keys[0], "team");
    assert_string_equal(q.meta_keys[1], "a[b]");
    assert_int_equal(q.limit, 5);
    char many[256] = "";
    for (int i = 0; i < 8; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%smetadata[k%d]=v",
                 i ? "&" : "", i);
    assert_int_equal(query("/v1/runs", many, &q, &e), 0);
    assert_int_equal(q.nmeta, 8);
    char longkey[128];
    snprintf(longkey, sizeof(longkey), "metadata[%065d]=v", 0);
    const char *bad[] = {"metadata[]=x",
                         "metadata[team=x",
                         "metadata=x",
                         "metadata[x]y=1",
                         "metadata[a]=1&metadata[a]=2",
                         longkey};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("query '%s'\n", bad[i]);
        assert_int_equal(query("/v1/runs", bad[i], &q, &e), -EINVAL);
        assert_int_equal(e.status, 400);
    }
    assert_int_equal(query("/v1/runs/{id}/events", "metadata[a]=1", &q, &e), -EINVAL);
}

static void test_prefer(void **state)
{
    struct eph_api_error e;
    unsigned w = 99;
    assert_int_equal(eph_api_validate_prefer(NULL, 600, &w, &e), 0);
    assert_int_equal(w, 0);
    const struct {
        const char *h;
        unsigned want;
    } ok[] = {{"wait=0", 0},
              {"wait=600", 600},
              {"wait = 5", 5},
              {"WAIT=7", 7},
              {"respond-async, wait=3", 3},
              {"return=minimal", 0},
              {"nowait=5", 0},
              {" wait=9 ", 9},
              {"handling=lenient,wait=2", 2}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        print_message("Prefer: %s\n", ok[i].h);
        assert_int_equal(eph_api_validate_prefer(ok[i].h, 600, &w, &e), 0);
        assert_int_equal(w, ok[i].want);
    }
    const char *bad[] = {"wait=601",       "wait=-1",    "wait=",
                         "wait",           "wait=abc",   "wait=1x",
                         "wait=1, wait=2", "wait=1;x=2", "wait=99999999999999999999999999",
                         "wait=+1",        "wait=1 2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("Prefer: %s\n", bad[i]);
        assert_int_equal(eph_api_validate_prefer(bad[i], 600, &w, &e), -EINVAL);
        assert_string_equal(e.param, "Prefer");
    }
}

static void test_content_type(void **state)
{
    assert_true(eph_api_content_type_is_json("application/json"));
    assert_true(eph_api_content_type_is_json("Application/JSON; charset=utf-8"));
    assert_true(eph_api_content_type_is_json("application/json ;charset=utf-8"));
    assert_false(eph_api_content_type_is_json("application/jsonx"));
    assert_false(eph_api_content_type_is_json("text/plain"));
    assert_false(eph_api_content_type_is_json("application/x-www-form-urlencoded"));
    assert_false(eph_api_content_type_is_json(""));
}

/* The connection rules: the param refused, "" when accepted. */
static const char *conn_param(const char *text)
{
    static char param[32];
    json_t *body = json_loads(text, 0, NULL);
    assert_non_null(body);
    struct eph_connection c;
    const char *p = NULL;
    char err[256];
    int rc = eph_api_connection_check(body, &c, &p, err, sizeof(err));
    snprintf(param, sizeof(param), "%s", rc ? (p ? p : "?") : "");
    if (!rc)
        eph_connection_release(&c);
    json_decref(body);
    return param;
}

static void test_connection_rules(void **state)
{
    assert_string_equal(conn_param("{\"name\": \"gh\", \"base_url\": \"https://api.example\"}"),
                        "");
    assert_string_equal(
        conn_param("{\"name\": \"gh\", \"base_url\": \"https://api.example/a@b?x=@#@\"}"), "");
    const char *userinfo[] = {"https://user:pass@api.example", "https://user@api.example/",
                              "http://:@api.example", "https://a@b@api.example",
                              "https://x.example@evil.example?q"};
    for (size_t i = 0; i < sizeof(userinfo) / sizeof(userinfo[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{\"name\": \"gh\", \"base_url\": \"%s\"}", userinfo[i]);
        print_message("base_url %s\n", userinfo[i]);
        assert_string_equal(conn_param(text), "base_url");
    }
    assert_string_equal(conn_param("{\"name\": \"GH\", \"base_url\": \"https://a.example\"}"),
                        "name");
    assert_string_equal(
        conn_param(
            "{\"name\": \"g\", \"base_url\": \"https://a.example\", \"methods\": [\"TRACE\"]}"),
        "methods");
    assert_string_equal(conn_param("{\"name\": \"g\", \"base_url\": \"https://a.example\", "
                                   "\"headers\": {\"X\": \"a\\r\\nB: c\"}}"),
                        "headers");
}

/* Query-parameter credentials: checked like headers, their values never in the error message. */
static void test_connection_query(void **state)
{
    json_t *body = json_loads("{\"name\": \"maps\", \"base_url\": \"https://a.example\", "
                              "\"query\": {\"key\": \"s3cr3t-value\"}}",
                              0, NULL);
    struct eph_connection c;
    const char *p = NULL;
    char err[256];
    assert_int_equal(eph_api_connection_check(body, &c, &p, err, sizeof(err)), 0);
    assert_int_equal(json_array_size(c.query_names), 1);
    assert_string_equal(json_string_value(json_array_get(c.query_names, 0)), "key");
    assert_int_equal(json_array_size(c.header_names), 0);
    char *shown = json_dumps(c.query_names, 0);
    assert_null(strstr(shown, "s3cr3t"));
    free(shown);
    eph_connection_release(&c);
    json_decref(body);

    const char *bad[] = {"[]",         "{\"k y\": \"v\"}", "{\"\": \"v\"}",
                         "{\"k\": 1}", "{\"k\": \"\"}",    "{\"k\": \"a\\r\\nb\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text),
                 "{\"name\": \"g\", \"base_url\": \"https://a.example\", \"query\": %s}", bad[i]);
        print_message("query %s\n", bad[i]);
        assert_string_equal(conn_param(text), "query");
    }
    /* The message names the parameter, not its value. */
    body = json_loads("{\"name\": \"g\", \"base_url\": \"https://a.example\", "
                      "\"query\": {\"key\": \"top-secret\\u0001\"}}",
                      0, NULL);
    assert_int_equal(eph_api_connection_check(body, &c, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "'key'"));
    assert_null(strstr(err, "top-secret"));
    json_decref(body);
}

/* web: a boolean or {"allow": [domain...]} (docs/API.md). */
static const char *web_param(const char *web)
{
    char text[4096];
    snprintf(text, sizeof(text), "{\"prompt\": \"p\", \"max_cost_micros\": 1, \"web\": %s}", web);
    return create_param(text);
}

static void test_create_web_allow(void **state)
{
    json_t *body = json_loads("{\"prompt\": \"p\", \"max_cost_micros\": 1, \"web\": {\"allow\": "
                              "[\"example.com\", \"*.Example.org\", \"127.0.0.1\"]}}",
                              0, NULL);
    struct eph_api_create c;
    struct eph_api_error e;
    assert_int_equal(eph_api_validate_create(body, &cfg, &c, &e), 0);
    assert_true(c.web);
    assert_int_equal(json_array_size(c.web_allow), 3);
    assert_string_equal(json_string_value(json_array_get(c.web_allow, 1)), "*.Example.org");
    eph_api_create_release(&c);
    json_decref(body);

    assert_string_equal(web_param("true"), "");
    assert_string_equal(web_param("false"), "");
    assert_string_equal(web_param("{\"allow\": [\"a-b.example\", \"x\"]}"), "");
    const char *bad[] = {"{}",
                         "{\"allow\": []}",
                         "{\"allow\": \"example.com\"}",
                         "{\"allow\": [\"example.com\"], \"deny\": []}",
                         "{\"allow\": [1]}",
                         "{\"allow\": [\"\"]}",
                         "{\"allow\": [\"exa mple.com\"]}",
                         "{\"allow\": [\"example.com.\"]}",
                         "{\"allow\": [\".example.com\"]}",
                         "{\"allow\": [\"a..b\"]}",
                         "{\"allow\": [\"-a.example\"]}",
                         "{\"allow\": [\"a-.example\"]}",
                         "{\"allow\": [\"*\"]}",
                         "{\"allow\": [\"*.\"]}",
                         "{\"allow\": [\"a.*.example\"]}",
                         "{\"allow\": [\"**.example\"]}",
                         "{\"allow\": [\"http://example.com\"]}",
                         "{\"allow\": [\"example.com:443\"]}",
                         "{\"allow\": [\"ex\\u0000am\"]}",
                         "\"yes\"",
                         "1",
                         "[\"example.com\"]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("web %s\n", bad[i]);
        assert_string_equal(web_param(bad[i]), "web");
    }
    /* A label of 63 bytes is fine, 64 is not; the whole name at most 253 bytes; 64 entries. */
    char text[2048], label[80];
    memset(label, 'a', 64);
    label[63] = '\0';
    snprintf(text, sizeof(text), "{\"allow\": [\"%s.example\"]}", label);
    assert_string_equal(web_param(text), "");
    label[63] = 'a';
    label[64] = '\0';
    snprintf(text, sizeof(text), "{\"allow\": [\"%s.example\"]}", label);
    assert_string_equal(web_param(text), "web");
    label[63] = '\0';
    snprintf(text, sizeof(text), "{\"allow\": [\"%s.%s.%s.%s\"]}", label, label, label, label);
    assert_string_equal(web_param(text), "web"); /* 255 bytes */
    size_t o = (size_t)snprintf(text, sizeof(text), "{\"allow\": [");
    for (int i = 0; i < 65; i++)
        o += (size_t)snprintf(text + o, sizeof(text) - o, "%s\"d%d.example\"", i ? ", " : "", i);
    snprintf(text + o, sizeof(text) - o, "]}");
    assert_string_equal(web_param(text), "web");
    char *cut = strstr(text, ", \"d64.example\"");
    snprintf(cut, sizeof(text) - (size_t)(cut - text), "]}");
    assert_string_equal(web_param(text), "");
}

static void test_money_rules(void **state)
{
    assert_null(eph_money_credit_refusal(1, 0));
    assert_null(eph_money_credit_refusal(EPH_MONEY_CREDIT_MAX, 0));
    assert_non_null(eph_money_credit_refusal(0, 0));
    assert_non_null(eph_money_credit_refusal(EPH_MONEY_CREDIT_MAX + 1, 0));
    assert_null(eph_money_credit_refusal(1, EPH_MONEY_BALANCE_MAX - 1));
    assert_non_null(strstr(eph_money_credit_refusal(2, EPH_MONEY_BALANCE_MAX - 1), "balance"));
    /* Whatever the balance, the check itself never overflows. */
    assert_non_null(eph_money_credit_refusal(EPH_MONEY_CREDIT_MAX, INT64_MAX));
    int64_t m;
    const char *why;
    assert_int_equal(eph_money_parse_dollars_why("0.0000001", &m, &why), -EINVAL);
    assert_non_null(strstr(why, "decimals"));
    assert_int_equal(eph_money_parse_dollars_why("99999999999999999999", &m, &why), -EOVERFLOW);
    assert_string_equal(why, "too large");
    assert_int_equal(eph_money_parse_dollars_why("1.5", &m, &why), 0);
    assert_int_equal(m, 1500000);
    assert_null(why);
}

/* ---- admission: a run the queue refuses ----
 *
 * The fixture runs a real scheduler whose settler works on runs with eph_worker_run, behind a
 * gate: a test sees which thread took the run, and what the store says before it is settled. */

struct admit_fixture {
    struct store_fixture db; /* the store, with the org "acme" holding 100000 */
    struct eph_store *st;    /* db.st */
    struct eph_service svc;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool gate_open;
    unsigned arrived;
    char worked_on[64];
    pthread_t work_thread;
};

static void gated_work(void *ctx, const char *run_id)
{
    struct admit_fixture *f = ctx;
    pthread_mutex_lock(&f->lock);
    snprintf(f->worked_on, sizeof(f->worked_on), "%s", run_id);
    f->work_thread = pthread_self();
    f->arrived++;
    pthread_cond_broadcast(&f->cond);
    while (!f->gate_open)
        pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
    eph_worker_run(&f->svc, run_id);
}

static void open_gate(struct admit_fixture *f)
{
    pthread_mutex_lock(&f->lock);
    f->gate_open = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

/* Waits (30 s at most: a failure, not a hang) until the scheduler has handed over n runs. */
static void wait_arrived(struct admit_fixture *f, unsigned n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    while (f->arrived < n && rc == 0)
        rc = pthread_cond_timedwait(&f->cond, &f->lock, &until);
    unsigned got = f->arrived;
    pthread_mutex_unlock(&f->lock);
    assert_int_equal(got, n);
}

/* Waits (30 s at most) until the run's live entry is closed: it was settled. */
static void wait_settled(struct admit_fixture *f, const char *id)
{
    struct eph_live *l = eph_live_get(f->svc.live, id);
    if (!l)
        return; /* closed already */
    assert_true(eph_live_wait_closed(l, eph_clock_mono_ns() + 30 * 1000000000ull));
    eph_live_put(l);
}

static int admit_setup(void **state)
{
    struct admit_fixture *f = calloc(1, sizeof(*f));
    store_fixture_setup(&f->db, "admit");
    f->st = f->db.st;
    f->svc.cfg = &cfg;
    f->svc.store = f->st;
    snprintf(f->svc.node_id, sizeof(f->svc.node_id), "test-node");
    f->svc.models = calloc(cfg.nmodels ? cfg.nmodels : 1, sizeof(*f->svc.models));
    assert_non_null(f->svc.models);
    assert_int_equal(eph_live_registry_new(&f->svc.live), 0);
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    struct eph_scheduler_ops ops = {.ctx = f, .work = gated_work};
    assert_int_equal(eph_scheduler_start(&ops, 1, 0, &f->svc.sched), 0);
    *state = f;
    return 0;
}

static int admit_teardown(void **state)
{
    struct admit_fixture *f = *state;
    open_gate(f);
    eph_scheduler_free(f->svc.sched);
    eph_live_registry_free(f->svc.live);
    free(f->svc.models);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    store_fixture_teardown(&f->db);
    free(f);
    return 0;
}

static char submitted[64];
static int submit_fails(struct eph_service *svc, const char *run_id)
{
    return -ENOMEM;
}
static int submit_ok(struct eph_service *svc, const char *run_id)
{
    snprintf(submitted, sizeof(submitted), "%s", run_id);
    return 0;
}

static void make_run(struct admit_fixture *f, const char *id, bool zdr, struct eph_run *r,
                     struct eph_event *first)
{
    eph_run_init(r);
    snprintf(r->id, sizeof(r->id), "%s", id);
    snprintf(r->org_id, sizeof(r->org_id), "%s", f->db.org);
    r->status = EPH_RUN_QUEUED;
    r->model = strdup(cfg.default_model);
    r->zdr = zdr;
    r->prompt = zdr ? NULL : strdup("the prompt");
    r->connections = json_array();
    r->metadata = json_object();
    r->timeout_seconds = 60;
    r->created_at_ms = eph_clock_real_ms();
    r->cost.reserved_micros = 30000;
    if (zdr) {
        snprintf(r->node_id, sizeof(r->node_id), "%s", f->svc.node_id);
        r->lease_expires_at_ms = r->created_at_ms + 60000;
    }
    memset(first, 0, sizeof(*first));
    first->seq = 1;
    first->at_ms = r->created_at_ms;
    snprintf(first->source, sizeof(first->source), "queue");
    snprintf(first->type, sizeof(first->type), "run.queued");
    first->message = strdup("budget reserved");
}

static void assert_reserved(struct admit_fixture *f, int64_t micros)
{
    struct eph_balance b;
    assert_int_equal(f->st->ops->balance(f->st, f->db.org, &b), 0);
    assert_int_equal(b.reserved_micros, micros);
    assert_int_equal(b.available_micros, 100000 - micros);
}

/* The run is settled, failed, with its whole budget released, and no longer live. */
static void assert_refused_and_released(struct admit_fixture *f, const char *id)
{
    assert_reserved(f, 0);
    struct eph_run got;
    assert_int_equal(f->st->ops->run_get(f->st, id, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_FAILED);
    assert_string_equal(got.error_code, "queue_unavailable");
    assert_int_equal(got.cost.charged_micros, 0);
    assert_int_equal(got.cost.released_micros, 30000);
    eph_run_release(&got);
    assert_null(eph_live_get(f->svc.live, id));
}

static void admit_refused_releases(void **state, bool zdr, const char *id)
{
    struct admit_fixture *f = *state;
    struct eph_run r;
    struct eph_event first;
    make_run(f, id, zdr, &r, &first);
    bool queue_failed = false;
    int rc = eph_run_admit(&f->svc, &r, &first, "the prompt", NULL, submit_fails, &queue_failed);
    assert_int_equal(rc, -ENOMEM);
    assert_true(queue_failed);
    /* The settler has it, not this (HTTP) thread: until it works on it, the run is stored as
     * queued with its reservation, and live. */
    wait_arrived(f, 1);
    assert_string_equal(f->worked_on, id);
    assert_false(pthread_equal(f->work_thread, pthread_self()));
    struct eph_run got;
    assert_int_equal(f->st->ops->run_get(f->st, id, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_QUEUED);
    eph_run_release(&got);
    assert_reserved(f, 30000);
    open_gate(f);
    wait_settled(f, id);
    assert_refused_and_released(f, id);
    eph_run_release(&r);
    eph_event_release(&first);
}

static void test_admit_queue_failure(void **state)
{
    admit_refused_releases(state, false, "run_00000000000000000000000000000001");
}

static void test_admit_queue_failure_zdr(void **state)
{
    admit_refused_releases(state, true, "run_00000000000000000000000000000002");
}

/* No settler can take it (the server is stopping): settled where it was refused, in one attempt,
 * so that no reservation outlives the 503. */
static void test_admit_queue_failure_without_settler(void **state)
{
    struct admit_fixture *f = *state;
    open_gate(f);
    eph_scheduler_stop(f->svc.sched, 0);
    struct eph_run r;
    struct eph_event first;
    const char *id = "run_00000000000000000000000000000005";
    make_run(f, id, false, &r, &first);
    bool queue_failed = false;
    assert_int_equal(
        eph_run_admit(&f->svc, &r, &first, "the prompt", NULL, submit_fails, &queue_failed),
        -ENOMEM);
    assert_true(queue_failed);
    assert_int_equal(f->arrived, 0);
    assert_refused_and_released(f, id);
    eph_run_release(&r);
    eph_event_release(&first);
}

static void test_admit_store_refusal_leaves_nothing_live(void **state)
{
    struct admit_fixture *f = *state;
    struct eph_run r;
    struct eph_event first;
    make_run(f, "run_00000000000000000000000000000003", false, &r, &first);
    r.cost.reserved_micros = 100001; /* more than the balance */
    bool queue_failed = true;
    submitted[0] = '\0';
    assert_int_equal(eph_run_admit(&f->svc, &r, &first, NULL, NULL, submit_ok, &queue_failed),
                     -EDQUOT);
    assert_false(queue_failed);
    assert_string_equal(submitted, "");
    assert_null(eph_live_get(f->svc.live, r.id));
    struct eph_run got;
    assert_int_equal(f->st->ops->run_get(f->st, r.id, f->db.org, &got), -ENOENT);
    eph_run_release(&r);
    eph_event_release(&first);
}

static void test_admit_ok(void **state)
{
    struct admit_fixture *f = *state;
    struct eph_run r;
    struct eph_event first;
    make_run(f, "run_00000000000000000000000000000004", false, &r, &first);
    bool queue_failed = true;
    assert_int_equal(eph_run_admit(&f->svc, &r, &first, NULL, NULL, submit_ok, &queue_failed), 0);
    assert_false(queue_failed);
    assert_string_equal(submitted, r.id);
    struct eph_live *l = eph_live_get(f->svc.live, r.id);
    assert_non_null(l);
    eph_live_put(l);
    assert_reserved(f, 30000);
    /* Settle it so the live registry is left empty. */
    open_gate(f);
    assert_int_equal(eph_worker_refuse(&f->svc, r.id, "test", "done"), 0);
    wait_settled(f, r.id);
    eph_run_release(&r);
    eph_event_release(&first);
}

/* The first member a body may not carry, by name; none in a body of known names only. */
static void test_unknown_field(void **state)
{
    (void)state;
    static const char *const known[] = {"url", "events", NULL};
    json_t *ok = json_pack("{s:s, s:[]}", "url", "http://x", "events");
    json_t *bad = json_pack("{s:s, s:s}", "url", "http://x", "secret", "mine");
    json_t *empty = json_object();
    assert_null(eph_api_unknown_field(ok, known));
    assert_string_equal(eph_api_unknown_field(bad, known), "secret");
    assert_null(eph_api_unknown_field(empty, known));
    json_decref(ok);
    json_decref(bad);
    json_decref(empty);
}

/* Where the other nodes reach this one: the configured URL checked, else the listening address
 * (the host name for a wildcard one). */
static void test_node_url(void **state)
{
    (void)state;
    char url[64], err[128];
    assert_int_equal(
        eph_api_node_url(NULL, "127.0.0.1:0", 4242, "h", url, sizeof(url), err, sizeof(err)), 0);
    assert_string_equal(url, "http://127.0.0.1:4242");
    assert_int_equal(
        eph_api_node_url("", "[::1]:80", 8080, "h", url, sizeof(url), err, sizeof(err)), 0);
    assert_string_equal(url, "http://[::1]:8080");
    assert_int_equal(eph_api_node_url(NULL, "0.0.0.0:8080", 8080, "node-a.internal", url,
                                      sizeof(url), err, sizeof(err)),
                     0);
    assert_string_equal(url, "http://node-a.internal:8080");
    assert_int_equal(
        eph_api_node_url(NULL, "[::]:8080", 8080, "b", url, sizeof(url), err, sizeof(err)), 0);
    assert_string_equal(url, "http://b:8080");
    assert_int_equal(eph_api_node_url("https://node-a.internal:8443/", "0.0.0.0:1", 1, "h", url,
                                      sizeof(url), err, sizeof(err)),
                     0);
    assert_string_equal(url, "https://node-a.internal:8443");
    static const struct {
        const char *url, *why;
    } bad[] = {
        {"ftp://node-a/", "http"},
        {"node-a:8080", "not a URL"},
        {"http://user:pw@node-a/", "user"},
        {"http://node-a/api", "path"},
        {"http://node-a/?x=1", "query"},
        {"http://node-a/#top", "fragment"},
        {"http://", "not a URL"},
        {"http://a-host-name-that-is-much-too-long-for-the-buffer.example:1", "too long"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(
            eph_api_node_url(bad[i].url, "127.0.0.1:1", 1, "h", url, sizeof(url), err, sizeof(err)),
            -EINVAL);
        if (!strstr(err, bad[i].why))
            fail_msg("node_url '%s': '%s' does not say '%s'", bad[i].url, err, bad[i].why);
    }
    assert_int_equal(eph_api_node_url(NULL, "no-port", 1, "h", url, sizeof(url), err, sizeof(err)),
                     -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_accepts_and_defaults),
        cmocka_unit_test(test_unknown_field),
        cmocka_unit_test(test_create_replay_of),
        cmocka_unit_test(test_create_image),
        cmocka_unit_test(test_create_refusals_name_the_field),
        cmocka_unit_test(test_create_file_paths),
        cmocka_unit_test(test_create_outputs),
        cmocka_unit_test(test_file_path_rule_reasons),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_query_metadata),
        cmocka_unit_test(test_prefer),
        cmocka_unit_test(test_content_type),
        cmocka_unit_test(test_connection_rules),
        cmocka_unit_test(test_connection_query),
        cmocka_unit_test(test_create_web_allow),
        cmocka_unit_test(test_money_rules),
        cmocka_unit_test_setup_teardown(test_admit_queue_failure, admit_setup, admit_teardown),
        cmocka_unit_test_setup_teardown(test_admit_queue_failure_zdr, admit_setup, admit_teardown),
        cmocka_unit_test_setup_teardown(test_admit_queue_failure_without_settler, admit_setup,
                                        admit_teardown),
        cmocka_unit_test_setup_teardown(test_admit_store_refusal_leaves_nothing_live, admit_setup,
                                        admit_teardown),
        cmocka_unit_test_setup_teardown(test_admit_ok, admit_setup, admit_teardown),
        cmocka_unit_test(test_node_url),
    };
    return cmocka_run_group_tests(tests, setup_cfg, teardown_cfg);
}
