/* Webhooks without a socket (docs/WEBHOOKS.md): the signature against a vector computed apart,
 * the event of each terminal status and of a zero-data-retention run, the URL rule (schemes,
 * userinfo, every loopback spelling refused unless opened, the server's own socket refused
 * whatever is opened), secrets, and the retry schedule's bounds. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "run/webhooks.h"

static void test_signature_vector(void **state)
{
    (void)state;
    char sig[EPH_WEBHOOK_SIGNATURE_MAX];
    const char body[] = "{\"id\":\"evt_1\"}";
    eph_webhook_sign("whsec_test", 1700000000, body, strlen(body), sig);
    /* HMAC-SHA256(key "whsec_test", "1700000000." + body), computed with Python's hmac. */
    assert_string_equal(
        sig, "t=1700000000,v1=c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925");
    /* Another secret or another byte of the body is another signature. */
    char other[EPH_WEBHOOK_SIGNATURE_MAX];
    eph_webhook_sign("whsec_tesu", 1700000000, body, strlen(body), other);
    assert_string_not_equal(sig, other);
    eph_webhook_sign("whsec_test", 1700000001, body, strlen(body), other);
    assert_string_not_equal(sig + 14, other + 14);
}

static void test_secret_form(void **state)
{
    (void)state;
    char a[EPH_WEBHOOK_SECRET_LEN], b[EPH_WEBHOOK_SECRET_LEN];
    eph_webhook_secret_new(a);
    eph_webhook_secret_new(b);
    assert_int_equal(strlen(a), 6 + 48);
    assert_memory_equal(a, "whsec_", 6);
    assert_int_equal(strspn(a + 6, "0123456789abcdef"), 48);
    assert_string_not_equal(a, b);
}

static void make_run(struct eph_run *r, enum eph_run_status st, bool zdr)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->id, sizeof(r->id), "run_%032d", 7);
    r->status = st;
    r->zdr = zdr;
}

static void test_event_types_follow_statuses(void **state)
{
    (void)state;
    size_t n = 0;
    for (enum eph_run_status st = EPH_RUN_QUEUED; st <= EPH_RUN_CANCELLED; st++) {
        struct eph_run r;
        make_run(&r, st, false);
        json_t *obj = json_pack("{s:s, s:s}", "id", r.id, "status", eph_run_status_name(st));
        struct eph_webhook_event ev;
        char *body = NULL;
        int rc = eph_webhook_event_make(obj, &r, &ev, &body);
        if (!eph_run_status_terminal(st)) {
            assert_int_equal(rc, -EINVAL); /* only a settlement has an event */
            json_decref(obj);
            continue;
        }
        assert_int_equal(rc, 0);
        char want[48];
        snprintf(want, sizeof(want), "run.%s", eph_run_status_name(st));
        assert_string_equal(ev.type, want);
        assert_true(eph_webhook_event_type_known(want));
        assert_string_equal(eph_webhook_event_types[n++], want);
        json_t *got = json_loads(body, 0, NULL);
        assert_non_null(got);
        assert_string_equal(json_string_value(json_object_get(got, "id")), ev.id);
        assert_memory_equal(ev.id, "evt_", 4);
        assert_string_equal(json_string_value(json_object_get(got, "object")), "event");
        assert_string_equal(json_string_value(json_object_get(got, "type")), want);
        assert_non_null(json_string_value(json_object_get(got, "created_at")));
        assert_string_equal(json_string_value(json_object_get(json_object_get(got, "data"), "id")),
                            r.id);
        json_decref(got);
        json_decref(obj);
        free(body);
    }
    assert_string_equal(eph_webhook_event_types[n], "sandbox.ended");
    assert_null(eph_webhook_event_types[n + 1]);
    assert_false(eph_webhook_event_type_known("run.started"));
    assert_false(eph_webhook_event_type_known("sandbox.stopped"));
}

/* A sandbox's end is one type whatever ended it; its data is the object given (the sandbox's). */
static void test_sandbox_ended(void **state)
{
    (void)state;
    static const enum eph_run_status ends[] = {EPH_RUN_COMPLETED, EPH_RUN_FAILED, EPH_RUN_TIMED_OUT,
                                               EPH_RUN_BUDGET_EXHAUSTED, EPH_RUN_CANCELLED};
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        struct eph_run r;
        make_run(&r, ends[i], false);
        r.kind = EPH_KIND_SANDBOX;
        r.zdr = i % 2; /* an object without prompt or result gets none added */
        json_t *obj = json_pack("{s:s, s:s}", "id", "sbx_1", "object", "sandbox");
        struct eph_webhook_event ev;
        char *body = NULL;
        assert_int_equal(eph_webhook_event_make(obj, &r, &ev, &body), 0);
        assert_string_equal(ev.type, "sandbox.ended");
        json_t *got = json_loads(body, 0, NULL);
        assert_string_equal(json_string_value(json_object_get(got, "type")), "sandbox.ended");
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(got, "data"), "object")), "sandbox");
        assert_int_equal(json_object_size(json_object_get(got, "data")), 2);
        json_decref(got);
        json_decref(obj);
        free(body);
    }
    assert_true(eph_webhook_event_type_known("sandbox.ended"));
}

static void test_zero_data_retention_event(void **state)
{
    (void)state;
    struct eph_run r;
    make_run(&r, EPH_RUN_COMPLETED, true);
    json_t *obj = json_pack("{s:s, s:s, s:s, s:[s]}", "id", r.id, "prompt", "the secret prompt",
                            "result", "the secret result", "outputs", "out.txt");
    struct eph_webhook_event ev;
    char *body = NULL;
    assert_int_equal(eph_webhook_event_make(obj, &r, &ev, &body), 0);
    assert_null(strstr(body, "secret"));
    assert_null(strstr(body, "out.txt"));
    json_t *got = json_loads(body, 0, NULL);
    json_t *data = json_object_get(got, "data");
    assert_true(json_is_null(json_object_get(data, "prompt")));
    assert_true(json_is_null(json_object_get(data, "result")));
    assert_null(json_object_get(data, "outputs"));
    /* The caller's object is left as it was. */
    assert_string_equal(json_string_value(json_object_get(obj, "prompt")), "the secret prompt");
    json_decref(got);
    free(body);
    /* The same run without zero data retention carries them. */
    r.zdr = false;
    assert_int_equal(eph_webhook_event_make(obj, &r, &ev, &body), 0);
    assert_non_null(strstr(body, "the secret result"));
    free(body);
    json_decref(obj);
}

static int check(const struct eph_config *cfg, const struct eph_guard_own *own, const char *url)
{
    char why[200];
    struct eph_addr a;
    return eph_webhook_check_url(cfg, own, url, &a, why, sizeof(why));
}

static void test_url_rule(void **state)
{
    (void)state;
    struct eph_config cfg = {0};
    /* Not http(s), userinfo, not a URL. */
    assert_int_equal(check(&cfg, NULL, "ftp://93.184.215.14/x"), -EINVAL);
    assert_int_equal(check(&cfg, NULL, "file:///etc/passwd"), -EINVAL);
    assert_int_equal(check(&cfg, NULL, "93.184.215.14/x"), -EINVAL);
    assert_int_equal(check(&cfg, NULL, "http://user:pw@93.184.215.14/x"), -EINVAL);
    assert_int_equal(check(&cfg, NULL, "http://user@93.184.215.14/x"), -EINVAL);
    assert_int_equal(check(&cfg, NULL, "http://93.184.215.14/a b"), -EINVAL);
    assert_int_equal(check(&cfg, NULL, "http:///x"), -EINVAL);
    char longer[EPH_WEBHOOK_URL_MAX + 32] = "http://93.184.215.14/";
    memset(longer + strlen(longer), 'a', EPH_WEBHOOK_URL_MAX);
    longer[sizeof(longer) - 1] = '\0';
    assert_int_equal(check(&cfg, NULL, longer), -EINVAL);
    /* A public literal passes (nothing is resolved or contacted). */
    assert_int_equal(check(&cfg, NULL, "https://93.184.215.14/hook?x=1"), 0);
    assert_int_equal(check(&cfg, NULL, "HTTP://93.184.215.14:8443/hook"), 0);
    /* Every spelling of loopback, and the other refused ranges, without an allow-list. */
    static const char *const refused[] = {
        "http://127.0.0.1/",          "http://127.1/",       "http://2130706433/",
        "http://0x7f000001/",         "http://0177.0.0.1/",  "http://[::1]/",
        "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/",     "http://10.0.0.1/",
        "http://169.254.169.254/",    "http://192.168.1.1/", "http://[fe80::1]/",
        "http://100.64.0.1/",         "http://224.0.0.1/",   "http://[64:ff9b::7f00:1]/",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (check(&cfg, NULL, refused[i]) != -EACCES)
            fail_msg("'%s' was not refused", refused[i]);
    /* webhooks.allow_private_cidrs opens exactly its range. */
    char *allow[] = {"127.0.0.1/32"};
    cfg.webhooks.allow_private_cidrs = allow;
    cfg.webhooks.nallow_private_cidrs = 1;
    assert_int_equal(check(&cfg, NULL, "http://127.0.0.1:9000/hook"), 0);
    assert_int_equal(check(&cfg, NULL, "http://127.1:9000/hook"), 0);
    assert_int_equal(check(&cfg, NULL, "http://127.0.0.2:9000/hook"), -EACCES);
    assert_int_equal(check(&cfg, NULL, "http://[::1]:9000/hook"), -EACCES);
    assert_int_equal(check(&cfg, NULL, "http://10.0.0.1/"), -EACCES);
    /* The server's own socket stays refused whatever is opened. */
    struct eph_guard_own own = {0};
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9000)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(eph_guard_own_add(&own, (const struct sockaddr *)&sin), 0);
    assert_int_equal(check(&cfg, &own, "http://127.0.0.1:9000/hook"), -EPERM);
    assert_int_equal(check(&cfg, &own, "http://127.0.0.1:9001/hook"), 0);
}

static void test_retry_schedule(void **state)
{
    (void)state;
    for (unsigned attempt = 1; attempt <= 40; attempt++) {
        int64_t full = 1000;
        for (unsigned i = 1; i < attempt && full < 3600000; i++)
            full *= 2;
        if (full > 3600000)
            full = 3600000;
        for (int k = 0; k < 50; k++) {
            int64_t d = eph_webhook_retry_delay_ms(1000, attempt);
            if (d > full || d < full - full / 2)
                fail_msg("attempt %u: %lld ms outside [%lld, %lld]", attempt, (long long)d,
                         (long long)(full - full / 2), (long long)full);
        }
    }
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature_vector),
        cmocka_unit_test(test_secret_form),
        cmocka_unit_test(test_event_types_follow_statuses),
        cmocka_unit_test(test_zero_data_retention_event),
        cmocka_unit_test(test_sandbox_ended),
        cmocka_unit_test(test_url_rule),
        cmocka_unit_test(test_retry_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
