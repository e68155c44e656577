/*
 * test_model_fixtures.c - each provider's exact wire format, from recorded fixtures written after
 * the providers' current documentation (tests/fixtures/providers/: plain answers and event
 * streams, tool calls, refusals, cut answers, usage with cache and reasoning tokens, error bodies;
 * cases.json says what each must give). A format drift in a provider or in our parser is caught
 * here, without a network: answers go through each provider's table entry
 * (eph_provider_parse_answer(), the code a real call runs on a 2xx body); error bodies through
 * the retry rule and the error message a run would show.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/http_client.h"
#include "agent/model.h"
#include "agent/providers.h"
#include "fake_model.h"

static char dir[PATH_MAX];

static char *slurp(const char *name, size_t *len)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static void expect_u64(const json_t *e, const char *key, uint64_t got, const char *file)
{
    const json_t *v = json_object_get(e, key);
    if (v && (uint64_t)json_integer_value(v) != got)
        fail_msg("%s: %s is %llu, want %lld", file, key, (unsigned long long)got,
                 (long long)json_integer_value(v));
}

static void expect_str(const json_t *e, const char *key, const char *got, const char *file)
{
    const json_t *v = json_object_get(e, key);
    if (!v)
        return;
    if (json_is_null(v)) {
        if (got)
            fail_msg("%s: %s is '%s', want null", file, key, got);
        return;
    }
    if (!got || strcmp(got, json_string_value(v)) != 0)
        fail_msg("%s: %s is '%s', want '%s'", file, key, got ? got : "(null)",
                 json_string_value(v));
}

static void answer_case(const json_t *c)
{
    const char *file = json_string_value(json_object_get(c, "file"));
    const char *provider = json_string_value(json_object_get(c, "provider"));
    const json_t *e = json_object_get(c, "expect");
    size_t len;
    char *body = slurp(file, &len);
    bool stream = strstr(file, ".sse") != NULL;
    struct eph_model_response r;
    char err[256];
    /* Each provider through its table entry (providers.h): the same cases for every one. */
    const struct eph_http_provider *p = eph_http_provider_find(provider);
    if (!p)
        fail_msg("%s: no provider '%s'", file, provider);
    int rc = eph_provider_parse_answer(p, body, len, stream, 0, &r, err, sizeof(err));
    const json_t *want = json_object_get(e, "rc");
    int want_rc = json_is_integer(want)                            ? 0
                  : strcmp(json_string_value(want), "EPROTO") == 0 ? -EPROTO
                                                                   : -EIO;
    if (rc != want_rc)
        fail_msg("%s: rc %d (%s), want %d", file, rc, err, want_rc);
    if (rc == 0) {
        expect_str(e, "content", r.content, file);
        expect_str(e, "finish", r.finish_reason, file);
        expect_str(e, "refusal", r.refusal, file);
        const json_t *calls = json_object_get(e, "calls");
        assert_int_equal(r.ncalls, json_array_size(calls));
        for (size_t i = 0; i < r.ncalls; i++) {
            const json_t *wc = json_array_get(calls, i);
            expect_str(wc, "id", r.calls[i].id, file);
            expect_str(wc, "name", r.calls[i].name, file);
            expect_str(wc, "arguments", r.calls[i].arguments, file);
        }
    }
    expect_u64(e, "input", r.input_tokens, file);
    expect_u64(e, "cached", r.cached_input_tokens, file);
    expect_u64(e, "cache_write", r.cache_write_tokens, file);
    expect_u64(e, "cache_write_1h", r.cache_write_1h_tokens, file);
    expect_u64(e, "output", r.output_tokens, file);
    expect_u64(e, "reasoning", r.reasoning_tokens, file);
    const json_t *fin = json_object_get(e, "usage_final");
    if (fin && json_is_true(fin) != r.usage_final)
        fail_msg("%s: usage_final %d", file, r.usage_final);
    eph_model_response_release(&r);
    free(body);
}

static void error_case(const json_t *c)
{
    const char *file = json_string_value(json_object_get(c, "file"));
    const json_t *e = json_object_get(c, "expect");
    long status = (long)json_integer_value(json_object_get(c, "status"));
    const struct eph_http_provider *p =
        eph_http_provider_find(json_string_value(json_object_get(c, "provider")));
    if (!p)
        fail_msg("%s: no provider", file);
    size_t len;
    char *body = slurp(file, &len);
    uint64_t wait = 0;
    int retry = p->retryable(status, body, len, &wait);
    if (retry != json_is_true(json_object_get(e, "retryable")))
        fail_msg("%s: http %ld retryable %d", file, status, retry);
    char msg[EPH_HTTP_ERROR_MAX];
    eph_http_error_message(body, len, "sk-not-in-these-bodies", msg, sizeof(msg));
    expect_str(e, "message", msg, file);
    free(body);
}

static void test_fixtures(void **state)
{
    char script[PATH_MAX];
    assert_int_equal(fake_find_script(script, sizeof(script)), 0);
    char *slash = strrchr(script, '/');
    assert_non_null(slash);
    *slash = '\0';
    snprintf(dir, sizeof(dir), "%.*s/fixtures/providers", (int)(sizeof(dir) - 32), script);
    size_t len;
    char *text = slurp("cases.json", &len);
    json_error_t jerr;
    json_t *cases = json_loadb(text, len, 0, &jerr);
    free(text);
    assert_true(json_is_array(cases));
    assert_true(json_array_size(cases) >= 20);
    size_t i, answers = 0, errors = 0;
    const json_t *c;
    json_array_foreach(cases, i, c)
    {
        if (json_object_get(c, "status")) {
            error_case(c);
            errors++;
        } else {
            answer_case(c);
            answers++;
        }
    }
    printf("fixtures: %zu answers, %zu error bodies\n", answers, errors);
    json_decref(cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
