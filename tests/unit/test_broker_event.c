/* What the timeline keeps of a broker event (broker/event.h): with zero data retention, only the
 * method (standard ones, else OTHER), the org's connection name (any other name as "?"), status,
 * byte counts, duration, cost and a fixed denial code; never a host, port, path or text of the
 * sandbox's choosing, in the data or in the message. Without it, everything, as before. Then a
 * real broker in zero-data-retention mode, driven through a socket pair as the tunnel does: the
 * event its callback gets is already scrubbed, for a web request to a name that does not resolve,
 * a CONNECT, an unknown connection, a known connection's refused path, an odd method and a
 * web_fetch hop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "broker/broker.h"
#include "broker/event.h"

#define CANARY "c4n4ry"

static bool known_github(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "github") == 0;
}

/* Fails when the canary is anywhere in the data (serialised) or the message. */
static void assert_clean(json_t *data, const char *msg)
{
    char *s = json_dumps(data, JSON_COMPACT);
    assert_non_null(s);
    if (strstr(s, CANARY) || strstr(msg, CANARY))
        fail_msg("canary kept: %s / %s", s, msg);
    free(s);
}

static void test_method(void **state)
{
    (void)state;
    assert_string_equal(eph_broker_event_method("GET"), "GET");
    assert_string_equal(eph_broker_event_method("CONNECT"), "CONNECT");
    assert_string_equal(eph_broker_event_method("PATCH"), "PATCH");
    assert_string_equal(eph_broker_event_method("get"), "OTHER");
    assert_string_equal(eph_broker_event_method("GETX"), "OTHER");
    assert_string_equal(eph_broker_event_method("C4N4RY"), "OTHER");
    assert_string_equal(eph_broker_event_method(""), "OTHER");
    assert_string_equal(eph_broker_event_method(NULL), "OTHER");
}

static void test_code(void **state)
{
    (void)state;
    assert_true(eph_broker_event_code_ok("host_not_allowed"));
    assert_true(eph_broker_event_code_ok("dns_failed"));
    assert_false(eph_broker_event_code_ok(NULL));
    assert_false(eph_broker_event_code_ok(""));
    assert_false(eph_broker_event_code_ok("no such host c4n4ry.example"));
    assert_false(eph_broker_event_code_ok("Upper"));
    assert_false(eph_broker_event_code_ok("a_code_that_goes_on_for_more_than_forty_chars"));
}

/* Every field the sandbox chooses carries the canary; the builder keeps none of them. */
static void test_zdr_data(void **state)
{
    (void)state;
    json_t *x = json_pack("{s:s}", "url", "http://" CANARY ".example/" CANARY);
    struct eph_broker_event ev = {.connection = NULL,
                                  .method = CANARY "M",
                                  .scheme = "https",
                                  .host = CANARY ".example",
                                  .port = 8443,
                                  .path = "/" CANARY "/path",
                                  .status = 502,
                                  .bytes_up = 17,
                                  .bytes_down = 1234,
                                  .duration_ms = 9,
                                  .cost_micros = 33,
                                  .denied = "dns_failed",
                                  .exchange = x};
    char msg[EPH_BROKER_EVENT_MSG_MAX];
    json_t *d = eph_broker_event_data(&ev, true, known_github, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_clean(d, msg);
    char *s = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"bytes_down\":1234,\"bytes_up\":17,\"cost_micros\":33,"
                           "\"denied\":\"dns_failed\",\"duration_ms\":9,\"method\":\"OTHER\","
                           "\"status\":502}");
    assert_string_equal(msg, "OTHER web → 502 · dns_failed");
    free(s);
    json_decref(d);

    /* A connection the run has keeps its name; any other name is the fixed word. */
    ev.method = "POST";
    ev.connection = "github";
    ev.denied = "path_not_allowed";
    d = eph_broker_event_data(&ev, true, known_github, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_clean(d, msg);
    assert_string_equal(json_string_value(json_object_get(d, "connection")), "github");
    assert_string_equal(msg, "POST github → 502 · path_not_allowed");
    json_decref(d);
    ev.connection = CANARY "conn";
    d = eph_broker_event_data(&ev, true, known_github, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_clean(d, msg);
    assert_string_equal(json_string_value(json_object_get(d, "connection")), "?");
    assert_string_equal(msg, "POST ? → 502 · path_not_allowed");
    json_decref(d);
    d = eph_broker_event_data(&ev, true, NULL, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_string_equal(json_string_value(json_object_get(d, "connection")), "?");
    json_decref(d);

    /* A denial that is not one of the fixed codes is not kept as it is. */
    ev.connection = NULL;
    ev.denied = "refused " CANARY;
    d = eph_broker_event_data(&ev, true, NULL, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_clean(d, msg);
    assert_string_equal(json_string_value(json_object_get(d, "denied")), "denied");
    json_decref(d);
    json_decref(x);
}

/* Without zero data retention the event is whole, its exchange included. */
static void test_full_data(void **state)
{
    (void)state;
    json_t *x = json_pack("{s:s}", "url", "http://h.example/p");
    struct eph_broker_event ev = {.method = "GET",
                                  .scheme = "http",
                                  .host = "h.example",
                                  .port = 8080,
                                  .path = "/p",
                                  .status = 200,
                                  .bytes_down = 1234,
                                  .exchange = x};
    char msg[EPH_BROKER_EVENT_MSG_MAX];
    json_t *d = eph_broker_event_data(&ev, false, NULL, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_string_equal(json_string_value(json_object_get(d, "host")), "h.example");
    assert_string_equal(json_string_value(json_object_get(d, "path")), "/p");
    assert_int_equal(json_integer_value(json_object_get(d, "port")), 8080);
    assert_ptr_equal(json_object_get(d, "exchange"), x);
    assert_string_equal(msg, "GET http://h.example:8080/p → 200 · 1,234 bytes");
    json_decref(d);
    ev.scheme = "tunnel";
    ev.method = "CONNECT";
    d = eph_broker_event_data(&ev, false, NULL, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_string_equal(msg, "CONNECT h.example:8080 → 200 · 1,234 bytes");
    json_decref(d);
    ev.connection = "github";
    ev.denied = "path_not_allowed";
    ev.status = 403;
    ev.method = "GET";
    d = eph_broker_event_data(&ev, false, NULL, NULL, msg, sizeof(msg));
    assert_non_null(d);
    assert_string_equal(msg, "github · GET /p → 403 · path_not_allowed");
    json_decref(d);
    json_decref(x);
}

static void test_scrub(void **state)
{
    (void)state;
    struct eph_broker_event ev = {.connection = CANARY,
                                  .method = "PUT",
                                  .scheme = "https",
                                  .host = CANARY ".example",
                                  .port = 443,
                                  .path = "/" CANARY,
                                  .status = 200,
                                  .bytes_up = 5,
                                  .denied = CANARY};
    eph_broker_event_scrub(&ev, known_github, NULL);
    assert_string_equal(ev.connection, "?");
    assert_string_equal(ev.method, "PUT");
    assert_string_equal(ev.host, "");
    assert_string_equal(ev.path, "");
    assert_string_equal(ev.scheme, "");
    assert_int_equal(ev.port, 0);
    assert_string_equal(ev.denied, "denied");
    assert_int_equal(ev.status, 200);
    assert_int_equal(ev.bytes_up, 5);
    assert_null(ev.exchange);
    ev.connection = "github";
    eph_broker_event_scrub(&ev, known_github, NULL);
    assert_string_equal(ev.connection, "github");
}

/* ---- a broker with zero data retention ---- */

static struct eph_broker_event seen[8];
static char seen_host[8][256], seen_path[8][256], seen_method[8][32], seen_conn[8][64];
static int nseen;
static bool seen_exchange;

static void on_event(void *arg, const struct eph_broker_event *ev)
{
    (void)arg;
    if (nseen >= 8)
        return;
    seen[nseen] = *ev;
    snprintf(seen_host[nseen], sizeof(seen_host[0]), "%s", ev->host ? ev->host : "");
    snprintf(seen_path[nseen], sizeof(seen_path[0]), "%s", ev->path ? ev->path : "");
    snprintf(seen_method[nseen], sizeof(seen_method[0]), "%s", ev->method ? ev->method : "");
    snprintf(seen_conn[nseen], sizeof(seen_conn[0]), "%s", ev->connection ? ev->connection : "");
    seen_exchange |= ev->exchange != NULL;
    nseen++;
}

/* One request through a new stream; the answer read to its end (the broker closes). */
static void one(struct eph_broker *b, uint32_t id, const char *req)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(eph_broker_on_stream(b, id, sv[1]), 0);
    assert_int_equal(write(sv[0], req, strlen(req)), (ssize_t)strlen(req));
    char buf[4096];
    while (read(sv[0], buf, sizeof(buf)) > 0)
        ;
    close(sv[0]);
}

static void test_broker_zdr(void **state)
{
    (void)state;
    static const char *const methods[] = {"GET"};
    static const char *const prefixes[] = {"/allowed"};
    static const char *const hn[] = {"Authorization"}, *const hv[] = {"Bearer x"};
    struct eph_broker_conn c = {.name = "github",
                                .base_url = "http://127.0.0.1:9/",
                                .methods = methods,
                                .nmethods = 1,
                                .prefixes = prefixes,
                                .nprefixes = 1,
                                .header_names = hn,
                                .header_values = hv,
                                .nheaders = 1};
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    s.request_timeout_seconds = 5;
    /* web with an allow-list: a host outside it is refused before any resolution, so that no
     * name is ever looked up outside this machine. */
    static const char *const allow[] = {"allowed.test"};
    struct eph_broker_run run = {.web = true,
                                 .web_allow = allow,
                                 .nweb_allow = 1,
                                 .conns = &c,
                                 .nconns = 1,
                                 .record = false,
                                 .zdr = true,
                                 .on_event = on_event};
    struct eph_broker *b;
    assert_int_equal(eph_broker_new(&s, &run, &b), 0);
    one(b, 1,
        "GET http://" CANARY "-host.test/" CANARY "-path?q=" CANARY " HTTP/1.1\r\n"
        "Host: " CANARY "-host.test\r\nX-C: " CANARY "\r\n\r\n");
    one(b, 2, "CONNECT " CANARY "-tunnel.test:443 HTTP/1.1\r\nHost: " CANARY "\r\n\r\n");
    one(b, 3, "GET /" CANARY "-conn/x?y=" CANARY " HTTP/1.1\r\nHost: x\r\n\r\n");
    one(b, 4, "GET /github/" CANARY "-denied HTTP/1.1\r\nHost: x\r\n\r\n");
    one(b, 5, "C4N4RYMETHOD /github/allowed HTTP/1.1\r\nHost: x\r\n\r\n");
    /* web_fetch's hop, refused by the allow-list: an event like the others. */
    struct eph_web_fetch wf;
    char err[256];
    assert_int_not_equal(eph_broker_web_fetch(b, "http://" CANARY "-fetch.test/" CANARY, 1024, &wf,
                                              err, sizeof(err)),
                         0);
    eph_broker_close(b);
    eph_broker_free(b);
    assert_int_equal(nseen, 6);
    assert_false(seen_exchange);
    for (int i = 0; i < nseen; i++) {
        if (strcasestr(seen_host[i], CANARY) || strcasestr(seen_path[i], CANARY) ||
            strcasestr(seen_method[i], CANARY) || strcasestr(seen_conn[i], CANARY))
            fail_msg("event %d kept a canary: %s %s %s %s", i, seen_method[i], seen_host[i],
                     seen_path[i], seen_conn[i]);
        assert_string_equal(seen_host[i], "");
        assert_string_equal(seen_path[i], "");
        assert_int_equal(seen[i].port, 0);
    }
    /* The events arrive in the order their streams end; find each by what stays. */
    int web = 0, tunnel = 0, unknown = 0, denied = 0, other = 0;
    for (int i = 0; i < nseen; i++) {
        if (!seen_conn[i][0] && strcmp(seen_method[i], "GET") == 0)
            web++; /* the request, and web_fetch's hop */
        else if (strcmp(seen_method[i], "CONNECT") == 0)
            tunnel++;
        else if (strcmp(seen_conn[i], "?") == 0)
            unknown++;
        else if (strcmp(seen_conn[i], "github") == 0 && strcmp(seen_method[i], "GET") == 0)
            denied++;
        else if (strcmp(seen_conn[i], "github") == 0 && strcmp(seen_method[i], "OTHER") == 0)
            other++;
    }
    assert_int_equal(web, 2);
    assert_int_equal(tunnel, 1);
    assert_int_equal(unknown, 1);
    assert_int_equal(denied, 1);
    assert_int_equal(other, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_method),   cmocka_unit_test(test_code),
        cmocka_unit_test(test_zdr_data), cmocka_unit_test(test_full_data),
        cmocka_unit_test(test_scrub),    cmocka_unit_test(test_broker_zdr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
