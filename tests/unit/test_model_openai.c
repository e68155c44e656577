/*
 * test_model_openai.c - the openai provider against tests/fake_model_server.py speaking the real
 * Chat Completions wire format, plain and streaming; plus the SSE parser, the error message
 * sanitiser and the provider table.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/http_client.h"
#include "agent/model.h"
#include "agent/providers.h"
#include "common/clock.h"
#include "fake_model.h"

#define KEY_ENV "EPH_TEST_OPENAI_KEY"
#define KEY "sk-test-0123456789abcdef"

struct fixture {
    struct fake_server srv;
    struct eph_model_config cfg;
    struct eph_model *model;
    json_t *messages;
    json_t *tools;
    struct eph_model_response resp;
    struct attempt_log log; /* every attempt of the last call */
    char err[512];
};

/* Starts a server with script and opens an openai model on it. */
static void start(struct fixture *f, const char *script, bool stream)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(fake_start(&f->srv, script, KEY), 0);
    f->cfg.id = "test/fake-model";
    f->cfg.provider = "openai";
    f->cfg.base_url = f->srv.url;
    f->cfg.api_key_env = KEY_ENV;
    f->cfg.max_output_tokens = 512;
    f->cfg.timeout_seconds = 20;
    assert_int_equal(setenv(KEY_ENV, KEY, 1), 0);
    assert_int_equal(eph_model_openai_ops.open(&f->cfg, &f->model, f->err, sizeof(f->err)), 0);
    assert_int_equal(eph_model_set_stream(f->model, stream), 0);
    f->messages = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "system", "content",
                            "you are in a sandbox", "role", "user", "content", "list the files");
    f->tools = json_pack("[{s:s,s:s,s:{s:s,s:{s:{s:s}},s:[s]}}]", "name", "shell", "description",
                         "runs a command", "parameters", "type", "object", "properties", "command",
                         "type", "string", "required", "command");
    assert_non_null(f->messages);
    assert_non_null(f->tools);
}

static void finish(struct fixture *f)
{
    eph_model_response_release(&f->resp);
    eph_model_openai_ops.free(f->model);
    json_decref(f->messages);
    json_decref(f->tools);
    fake_stop(&f->srv);
}

static int call_with(struct fixture *f, uint64_t deadline_ns, const atomic_bool *cancel)
{
    eph_model_response_release(&f->resp);
    struct eph_model_request req = {.messages = f->messages,
                                    .tools = f->tools,
                                    .max_tokens = 256,
                                    .deadline_ns = deadline_ns,
                                    .cancel = cancel,
                                    .prompt = "list the files"};
    f->err[0] = '\0';
    uint32_t cap = f->log.cap;
    memset(&f->log, 0, sizeof(f->log));
    f->log.cap = cap;
    struct eph_model_meter meter = {attempt_log_authorise, attempt_log_record, &f->log};
    return eph_model_call(f->model, &req, &meter, &f->resp, f->err, sizeof(f->err));
}

static int call(struct fixture *f)
{
    return call_with(f, eph_clock_mono_ns() + 30ull * 1000000000u, NULL);
}

/* ---- connections ---- */

/* Every call of a model, retries included, rides the first TCP connection (the server numbers
 * the connections it accepts and keeps them open): none is opened per call. */
static void check_one_connection(bool stream)
{
    struct fixture f;
    start(&f, FAKE_REUSE_SCRIPT, stream);
    assert_int_equal(fake_check_one_connection(f.model, &f.srv), 0);
    finish(&f);
}

static void test_calls_reuse_one_connection(void **state)
{
    check_one_connection(false);
    check_one_connection(true);
}

/* CALLERS runs at once, as CALLERS workers would, each making ROUNDS calls through the one model.
 * The server answers nothing before CALLERS requests are in, so CALLERS handles are out of the
 * pool at the same time: it accepts CALLERS connections for all the calls (not one per call, and
 * not fewer: the calls really overlapped), and every caller gets the echo of its own marker. */
#define CALLERS 4
#define ROUNDS 3

static void check_concurrent_calls(bool stream)
{
    char *script = fake_echo_script(CALLERS * ROUNDS, CALLERS);
    struct fixture f;
    start(&f, script, stream);
    free(script);
    assert_int_equal(fake_check_concurrent(f.model, &f.srv, CALLERS, ROUNDS), 0);
    finish(&f);
}

static void test_concurrent_calls_share_the_pool(void **state)
{
    check_concurrent_calls(false);
    check_concurrent_calls(true);
}

/* The pool's bound, through the HTTP client itself: a pool that keeps KEPT handles, CALLERS
 * callers at once. Every call still succeeds with its own answer; when the callers give their
 * handles back the pool keeps KEPT and closes the rest, so the next round of CALLERS concurrent
 * calls reuses KEPT connections and opens exactly CALLERS - KEPT new ones. */
#define KEPT 2

struct pooled {
    struct eph_http_pool *pool;
    char url[128];
};

static int pooled_marked(void *ctx, const char *marker, char *answer, size_t len)
{
    struct pooled *p = ctx;
    static const char *const headers[] = {"Content-Type: application/json",
                                          "Authorization: Bearer " KEY, NULL};
    json_t *body = json_pack("{s:s,s:[{s:s,s:s}]}", "model", "fake", "messages", "role", "user",
                             "content", marker);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct eph_http_request req = {.what = "pooled",
                                   .url = p->url,
                                   .headers = headers,
                                   .body = text,
                                   .body_len = strlen(text),
                                   .deadline_ns = eph_clock_mono_ns() + 60ull * 1000000000u,
                                   .max_body = 1u << 20,
                                   .max_attempts = 1,
                                   .pool = p->pool};
    struct eph_http_response resp;
    char err[256];
    int rc = eph_http_post(&req, &resp, err, sizeof(err));
    free(text);
    if (!rc && resp.status != 200)
        rc = -EIO;
    json_t *got = rc ? NULL : json_loadb(resp.body.data, resp.body.len, 0, NULL);
    const char *content = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(got, "choices"), 0), "message"), "content"));
    snprintf(answer, len, "%s", content ? content : rc ? err : "");
    json_decref(got);
    eph_http_response_release(&resp);
    return rc;
}

static void test_pool_past_its_size(void **state)
{
    char *script = fake_echo_script(CALLERS * (ROUNDS + 1), CALLERS);
    struct fake_server srv;
    assert_int_equal(fake_start(&srv, script, KEY), 0);
    free(script);
    struct pooled p = {.pool = eph_http_pool_new(KEPT)};
    assert_non_null(p.pool);
    snprintf(p.url, sizeof(p.url), "%s/chat/completions", srv.url);
    assert_int_equal(fake_crowd_check(pooled_marked, &p, CALLERS, ROUNDS), 0);
    /* Between rounds a handle given back may be borrowed again before the pool is full: at
     * least CALLERS connections, at most CALLERS - KEPT more per later round. */
    long before = fake_accepted(&srv);
    assert_in_range(before, CALLERS, CALLERS + (ROUNDS - 1) * (CALLERS - KEPT));
    assert_int_equal(fake_crowd_check(pooled_marked, &p, CALLERS, 1), 0);
    assert_int_equal(fake_accepted(&srv) - before, CALLERS - KEPT);
    assert_int_equal(fake_request_count(&srv), CALLERS * (ROUNDS + 1));
    eph_http_pool_free(p.pool);
    fake_stop(&srv);
}

/* A connection the server closed: after an answer that said "Connection: close", and after one
 * that kept the connection alive and then dropped it anyway. The next call succeeds at its first
 * attempt (libcurl connects again by itself) on a new connection, and no request is lost or sent
 * twice. */
static void check_reconnect(bool stream)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"one\",\"keep_alive\":true},{\"text\":\"two\",\"drop_after\":true},"
          "{\"text\":\"three\"},{\"text\":\"four\",\"keep_alive\":true},"
          "{\"text\":\"five\",\"keep_alive\":true}]",
          stream);
    static const char *const want[] = {"one", "two", "three", "four", "five"};
    static const long conn[] = {1, 1, 2, 3, 3};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(call(&f), 0);
        assert_string_equal(f.resp.content, want[i]);
        assert_int_equal(f.log.n, 1);
    }
    long got[5];
    assert_int_equal(fake_conns(&f.srv, got, 5), 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(got[i], conn[i]);
    assert_int_equal(fake_accepted(&f.srv), 3);
    finish(&f);
}

static void test_closed_connection_reconnects(void **state)
{
    check_reconnect(false);
    check_reconnect(true);
}

/* ---- plain ---- */

static void test_text_answer(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"hello world\",\"usage\":{\"input\":100,\"output\":7,\"cached\":40}}]",
          false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "hello world");
    assert_int_equal(f.resp.ncalls, 0);
    assert_string_equal(f.resp.finish_reason, "stop");
    assert_int_equal(f.resp.input_tokens, 60);
    assert_int_equal(f.resp.cached_input_tokens, 40);
    assert_int_equal(f.resp.output_tokens, 7);
    assert_int_equal(f.resp.attempts, 1);
    assert_false(f.resp.replayed);
    assert_false(f.resp.usage_missing);

    json_t *reqs = fake_requests(&f.srv);
    assert_int_equal(json_array_size(reqs), 1);
    json_t *r = json_array_get(reqs, 0);
    assert_string_equal(json_string_value(json_object_get(r, "path")), "/v1/chat/completions");
    assert_true(json_is_true(json_object_get(r, "auth_ok")));
    json_t *b = fake_body(reqs, 0);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "fake-model");
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 256);
    assert_null(json_object_get(b, "max_completion_tokens"));
    assert_null(json_object_get(b, "stream"));
    json_t *msgs = json_object_get(b, "messages");
    assert_int_equal(json_array_size(msgs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "role")),
                        "system");
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 1), "content")),
                        "list the files");
    json_t *tool = json_array_get(json_object_get(b, "tools"), 0);
    assert_string_equal(json_string_value(json_object_get(tool, "type")), "function");
    json_t *fn = json_object_get(tool, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "shell");
    assert_string_equal(json_string_value(json_object_get(fn, "description")), "runs a command");
    assert_true(json_is_object(json_object_get(json_object_get(fn, "parameters"), "properties")));
    json_decref(reqs);
    finish(&f);
}

/* Call 1 answers with tool calls (one without an id, one with malformed arguments); the
 * conversation then goes back with the results, and the server must see the right ids. */
static void tool_round_trip(bool stream, bool no_index)
{
    char script[1024];
    snprintf(script, sizeof(script),
             "[{\"tool_calls\":[{\"id\":\"call_abc\",\"name\":\"shell\","
             "\"arguments\":\"{\\\"command\\\":\\\"ls -la\\\"}\"},"
             "{\"name\":\"shell\",\"arguments\":\"{\\\"command\\\": oops\"}],%s"
             "\"usage\":{\"input\":50,\"output\":20,\"cached\":0}},"
             "{\"text\":\"done: 2 files\"}]",
             no_index ? "\"no_index\":true," : "");
    struct fixture f;
    start(&f, script, stream);
    assert_int_equal(call(&f), 0);
    assert_int_equal(f.resp.ncalls, 2);
    assert_null(f.resp.content);
    assert_string_equal(f.resp.finish_reason, "tool_calls");
    assert_string_equal(f.resp.calls[0].id, "call_abc");
    assert_string_equal(f.resp.calls[0].name, "shell");
    assert_string_equal(f.resp.calls[0].arguments, "{\"command\":\"ls -la\"}");
    /* no id from the model: one made up, unique in the conversation */
    assert_string_equal(f.resp.calls[1].id, "call_2");
    assert_string_equal(f.resp.calls[1].arguments, "{\"command\": oops");
    assert_int_equal(f.resp.input_tokens, 50);
    assert_int_equal(f.resp.output_tokens, 20);

    /* what the agent loop appends */
    json_t *calls = json_array();
    for (size_t i = 0; i < f.resp.ncalls; i++)
        json_array_append_new(calls, json_pack("{s:s,s:s,s:s}", "id", f.resp.calls[i].id, "name",
                                               f.resp.calls[i].name, "arguments",
                                               f.resp.calls[i].arguments));
    json_array_append_new(f.messages, json_pack("{s:s,s:n,s:o}", "role", "assistant", "content",
                                                "tool_calls", calls));
    json_array_append_new(f.messages,
                          json_pack("{s:s,s:s,s:s,s:s}", "role", "tool", "tool_call_id", "call_abc",
                                    "name", "shell", "content", "a.txt\nb.txt"));
    json_array_append_new(f.messages,
                          json_pack("{s:s,s:s,s:s,s:s}", "role", "tool", "tool_call_id", "call_2",
                                    "name", "shell", "content", "error: invalid arguments"));
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "done: 2 files");
    assert_int_equal(f.resp.ncalls, 0);

    json_t *reqs = fake_requests(&f.srv);
    assert_int_equal(json_array_size(reqs), 2);
    json_t *msgs = json_object_get(fake_body(reqs, 1), "messages");
    assert_int_equal(json_array_size(msgs), 5);
    json_t *asst = json_array_get(msgs, 2);
    assert_string_equal(json_string_value(json_object_get(asst, "role")), "assistant");
    assert_true(json_is_null(json_object_get(asst, "content")));
    json_t *tc = json_array_get(json_object_get(asst, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(tc, "id")), "call_abc");
    assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
    json_t *fn = json_object_get(tc, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "shell");
    assert_string_equal(json_string_value(json_object_get(fn, "arguments")),
                        "{\"command\":\"ls -la\"}");
    json_t *tc2 = json_array_get(json_object_get(asst, "tool_calls"), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(tc2, "function"), "arguments")),
        "{\"command\": oops");
    json_t *t1 = json_array_get(msgs, 3), *t2 = json_array_get(msgs, 4);
    assert_string_equal(json_string_value(json_object_get(t1, "role")), "tool");
    assert_string_equal(json_string_value(json_object_get(t1, "tool_call_id")), "call_abc");
    assert_string_equal(json_string_value(json_object_get(t1, "content")), "a.txt\nb.txt");
    assert_string_equal(json_string_value(json_object_get(t2, "tool_call_id")), "call_2");
    assert_string_equal(json_string_value(json_object_get(t2, "content")),
                        "error: invalid arguments");
    if (stream) {
        json_t *b = fake_body(reqs, 0);
        assert_true(json_is_true(json_object_get(b, "stream")));
        assert_true(
            json_is_true(json_object_get(json_object_get(b, "stream_options"), "include_usage")));
    }
    json_decref(reqs);
    finish(&f);
}

static void test_tool_round_trip(void **state)
{
    tool_round_trip(false, false);
}

static void test_unknown_finish_reason(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"hmm\",\"finish_reason\":\"weird_reason\"}]", false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.finish_reason, "weird_reason");
    assert_string_equal(f.resp.content, "hmm");
    finish(&f);
}

static void test_length_finish_reason(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"cut\",\"finish_reason\":\"length\"}]", false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.finish_reason, "length");
    finish(&f);
}

static void test_500_then_200_retried(void **state)
{
    struct fixture f;
    start(&f, "[{\"status\":500,\"error\":\"internal trouble\"},{\"text\":\"second time\"}]",
          false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "second time");
    assert_int_equal(f.resp.attempts, 2);
    assert_int_equal(fake_request_count(&f.srv), 2);
    finish(&f);
}

static void test_429_retry_after(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":429,\"error\":\"slow down\",\"headers\":{\"Retry-After\":\"1\"}},"
          "{\"text\":\"ok\"}]",
          false);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call(&f), 0);
    double secs = fake_seconds_since(t0);
    assert_string_equal(f.resp.content, "ok");
    assert_int_equal(f.resp.attempts, 2);
    /* the backoff alone would be 0.25-0.5 s: Retry-After made it wait a second */
    assert_true(secs >= 0.95);
    assert_true(secs < 5.0);
    finish(&f);
}

static void test_all_attempts_fail(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":503,\"error\":\"a\"},{\"status\":502,\"error\":\"b\"},"
          "{\"status\":500,\"error\":\"c\"},{\"status\":500,\"error\":\"last one\"},"
          "{\"text\":\"never reached\"}]",
          false);
    assert_int_equal(call(&f), -EIO);
    assert_int_equal(f.resp.attempts, 4);
    assert_non_null(strstr(f.err, "http 500"));
    assert_non_null(strstr(f.err, "last one"));
    assert_int_equal(fake_request_count(&f.srv), 4);
    finish(&f);
}

static void test_400_not_retried_and_key_never_shown(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":400,\"error\":\"Invalid request: the key " KEY
          " is wrong\\nand\\tthis message goes on and on and on and on and on and on and on and "
          "on and on and on and on and on and on and on and on and on and on and on and on and "
          "on and on and on and on and on and on and on and on and on and on and on and on\"},"
          "{\"text\":\"never\"}]",
          false);
    assert_int_equal(call(&f), -EIO);
    assert_int_equal(f.resp.attempts, 1);
    assert_int_equal(fake_request_count(&f.srv), 1);
    assert_non_null(strstr(f.err, "openai: http 400: Invalid request"));
    assert_null(strstr(f.err, KEY));
    assert_null(strstr(f.err, "0123456789abcdef"));
    assert_non_null(strstr(f.err, "[redacted]"));
    assert_null(strchr(f.err, '\n'));
    assert_null(strchr(f.err, '\t'));
    assert_true(strlen(f.err) <= 200 + strlen("openai: http 400: "));
    finish(&f);
}

static void test_max_completion_tokens_fallback(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":400,\"error\":\"Unsupported parameter: 'max_tokens' is not supported "
          "with this model. Use 'max_completion_tokens' instead.\"},{\"text\":\"ok\"},"
          "{\"text\":\"again\"}]",
          false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "ok");
    assert_int_equal(f.resp.attempts, 2);
    assert_int_equal(call(&f), 0); /* remembered: straight to max_completion_tokens */
    assert_int_equal(f.resp.attempts, 1);
    json_t *reqs = fake_requests(&f.srv);
    assert_int_equal(json_array_size(reqs), 3);
    assert_non_null(json_object_get(fake_body(reqs, 0), "max_tokens"));
    assert_null(json_object_get(fake_body(reqs, 1), "max_tokens"));
    assert_int_equal(
        json_integer_value(json_object_get(fake_body(reqs, 1), "max_completion_tokens")), 256);
    assert_non_null(json_object_get(fake_body(reqs, 2), "max_completion_tokens"));
    json_decref(reqs);
    finish(&f);
}

static void test_deadline_during_slow_response(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"too late\",\"delay\":20}]", false);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call_with(&f, t0 + 1000000000u, NULL), -ETIMEDOUT);
    double secs = fake_seconds_since(t0);
    assert_true(secs >= 0.95);
    assert_true(secs < 1.5);
    assert_int_equal(f.resp.attempts, 1);
    assert_non_null(strstr(f.err, "deadline"));
    finish(&f);
}

struct canceller {
    struct fake_server *srv;
    atomic_bool flag;
    uint64_t set_at;
};

/* Sets the flag once the server has the request (it logs it before answering). */
static void *cancel_thread(void *arg)
{
    struct canceller *c = arg;
    if (fake_wait_requests(c->srv, 1, 10000) == 0) {
        c->set_at = eph_clock_mono_ns();
        atomic_store(&c->flag, true);
    }
    return NULL;
}

static void cancel_case(const char *script, bool stream)
{
    struct fixture f;
    start(&f, script, stream);
    struct canceller c = {.srv = &f.srv};
    atomic_init(&c.flag, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_thread, &c), 0);
    uint64_t t0 = eph_clock_mono_ns();
    int rc = call_with(&f, t0 + 30ull * 1000000000u, &c.flag);
    uint64_t t1 = eph_clock_mono_ns();
    pthread_join(t, NULL);
    assert_int_equal(rc, -ECANCELED);
    assert_true(c.set_at != 0);
    /* abandoned at once: well under the server's 20 s */
    assert_true((double)(t1 - c.set_at) / 1e9 < 0.3);
    assert_non_null(strstr(f.err, "cancelled"));
    finish(&f);
}

static void test_cancel_during_slow_response(void **state)
{
    cancel_case("[{\"text\":\"too late\",\"delay\":20}]", false);
}

static void test_cancel_before_the_call(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"x\"}]", false);
    atomic_bool flag;
    atomic_init(&flag, true);
    assert_int_equal(call_with(&f, eph_clock_mono_ns() + 10000000000u, &flag), -ECANCELED);
    assert_int_equal(fake_request_count(&f.srv), 0);
    finish(&f);
}

static void test_oversized_response(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"big\",\"pad_bytes\":9000000}]", false);
    assert_int_equal(call(&f), -EMSGSIZE);
    assert_non_null(strstr(f.err, "response too large"));
    assert_int_equal(f.resp.attempts, 1);
    finish(&f);
}

static void test_non_json_body(void **state)
{
    struct fixture f;
    start(&f, "[{\"body\":\"<html>bad gateway, sort of</html>\",\"content_type\":\"text/html\"}]",
          false);
    assert_int_equal(call(&f), -EPROTO);
    assert_non_null(strstr(f.err, "not a json object"));
    assert_null(strstr(f.err, "html")); /* the body is not quoted */
    finish(&f);
}

static void test_empty_choices(void **state)
{
    struct fixture f;
    start(&f, "[{\"body\":\"{\\\"choices\\\":[],\\\"usage\\\":{\\\"prompt_tokens\\\":9}}\"}]",
          false);
    assert_int_equal(call(&f), -EPROTO);
    assert_non_null(strstr(f.err, "no choices"));
    assert_int_equal(f.resp.input_tokens, 9); /* reported usage survives the error */
    finish(&f);
}

static void test_wrong_types(void **state)
{
    struct fixture f;
    /* every field of the wrong type: no crash, a protocol error */
    start(&f,
          "[{\"body\":\"{\\\"choices\\\":[{\\\"message\\\":7}],\\\"usage\\\":\\\"lots\\\"}\"},"
          "{\"body\":\"{\\\"choices\\\":[{\\\"message\\\":{\\\"content\\\":5,"
          "\\\"tool_calls\\\":[{\\\"function\\\":{\\\"name\\\":1,\\\"arguments\\\":{\\\"a\\\":1}}}"
          ",3]},\\\"finish_reason\\\":8}],\\\"usage\\\":{\\\"prompt_tokens\\\":-5,"
          "\\\"completion_tokens\\\":2.5}}\"}]",
          false);
    assert_int_equal(call(&f), -EPROTO);
    assert_int_equal(call(&f), 0);
    assert_null(f.resp.content);
    assert_int_equal(f.resp.ncalls, 2);
    assert_string_equal(f.resp.calls[0].name, "");
    assert_string_equal(f.resp.calls[0].arguments, "{\"a\":1}");
    assert_string_equal(f.resp.calls[1].id, "call_2");
    assert_string_equal(f.resp.calls[1].arguments, "{}");
    assert_string_equal(f.resp.finish_reason, "tool_calls");
    assert_int_equal(f.resp.input_tokens, 0);
    assert_int_equal(f.resp.output_tokens, 0);
    finish(&f);
}

static void test_missing_usage(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"free?\",\"usage\":null}]", false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "free?");
    assert_int_equal(f.resp.input_tokens, 0);
    assert_int_equal(f.resp.cached_input_tokens, 0);
    assert_int_equal(f.resp.output_tokens, 0);
    assert_true(f.resp.usage_missing); /* the worker charges the worst case */
    finish(&f);

    /* A stream without the usage chunk: the same. */
    start(&f, "[{\"text\":\"free?\",\"usage\":null}]", true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "free?");
    assert_true(f.resp.usage_missing);
    finish(&f);

    /* Usage reported: not missing, even when it is zero. */
    start(&f, "[{\"text\":\"free\",\"usage\":{\"input\":0,\"output\":0}}]", true);
    assert_int_equal(call(&f), 0);
    assert_false(f.resp.usage_missing);
    finish(&f);
}

static void test_huge_usage(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"x\",\"usage\":{\"input\":1000000000000000,\"output\":9000000000000000000,"
          "\"cached\":1000000000000001}}]",
          false);
    assert_int_equal(call(&f), 0);
    /* cached above prompt: all of it cached, none uncached, no wrap-around */
    assert_int_equal(f.resp.input_tokens, 0);
    assert_true(f.resp.cached_input_tokens == 1000000000000000ull);
    assert_true(f.resp.output_tokens == 9000000000000000000ull);
    finish(&f);
}

static void test_missing_key_variable(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"x\"}]", false);
    eph_model_openai_ops.free(f.model);
    f.cfg.api_key_env = "EPH_TEST_OPENAI_KEY_UNSET";
    unsetenv("EPH_TEST_OPENAI_KEY_UNSET");
    assert_int_equal(eph_model_openai_ops.open(&f.cfg, &f.model, f.err, sizeof(f.err)), 0);
    assert_int_equal(call(&f), -EIO);
    assert_non_null(strstr(f.err, "EPH_TEST_OPENAI_KEY_UNSET"));
    assert_int_equal(fake_request_count(&f.srv), 0);
    finish(&f);
}

static void test_no_key_configured(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"local\"}]", false);
    eph_model_openai_ops.free(f.model);
    f.cfg.api_key_env = NULL; /* a local server: no Authorization at all */
    f.cfg.upstream_model = "llama3.1:8b";
    assert_int_equal(eph_model_openai_ops.open(&f.cfg, &f.model, f.err, sizeof(f.err)), 0);
    assert_int_equal(call(&f), 0);
    json_t *reqs = fake_requests(&f.srv);
    assert_false(json_is_true(json_object_get(json_array_get(reqs, 0), "auth_present")));
    assert_string_equal(json_string_value(json_object_get(fake_body(reqs, 0), "model")),
                        "llama3.1:8b");
    json_decref(reqs);
    finish(&f);
}

static void test_connection_refused(void **state)
{
    struct fixture f;
    start(&f, "[]", false);
    fake_stop(&f.srv); /* nothing listens on the port any more */
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call(&f), -EIO);
    assert_int_equal(f.resp.attempts, 4);
    assert_true(fake_seconds_since(t0) < 6.0);
    assert_non_null(strstr(f.err, "after 4 attempts"));
    finish(&f);
}

static void test_retry_never_sleeps_past_deadline(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":429,\"error\":\"busy\",\"headers\":{\"Retry-After\":\"10\"}},"
          "{\"text\":\"x\"}]",
          false);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call_with(&f, t0 + 2000000000u, NULL), -EIO);
    assert_true(fake_seconds_since(t0) < 1.0); /* gave up at once instead of waiting 10 s */
    assert_int_equal(f.resp.attempts, 1);
    assert_non_null(strstr(f.err, "http 429"));
    finish(&f);
}

/* ---- streaming ---- */

static void test_stream_text(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"hello from the stream\",\"usage\":{\"input\":30,\"output\":4,"
          "\"cached\":10}}]",
          true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "hello from the stream");
    assert_string_equal(f.resp.finish_reason, "stop");
    assert_int_equal(f.resp.input_tokens, 20);
    assert_int_equal(f.resp.cached_input_tokens, 10);
    assert_int_equal(f.resp.output_tokens, 4);
    json_t *reqs = fake_requests(&f.srv);
    json_t *r = json_array_get(reqs, 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "headers"), "accept")),
                        "text/event-stream");
    assert_true(json_is_true(json_object_get(fake_body(reqs, 0), "stream")));
    json_decref(reqs);
    finish(&f);
}

static void test_stream_tool_round_trip(void **state)
{
    tool_round_trip(true, false);
}

static void test_stream_tool_calls_without_index(void **state)
{
    tool_round_trip(true, true);
}

static void test_stream_unknown_finish_reason(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"hmm\",\"finish_reason\":\"content_filter\"}]", true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.finish_reason, "content_filter");
    finish(&f);
}

static void test_stream_cancel(void **state)
{
    /* the first event arrives, then the server stalls */
    cancel_case("[{\"text\":\"a long story\",\"stall_after\":20}]", true);
}

static void test_stream_deadline(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"a long story\",\"stall_after\":20}]", true);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call_with(&f, t0 + 1000000000u, NULL), -ETIMEDOUT);
    assert_true(fake_seconds_since(t0) < 1.5);
    finish(&f);
}

static void test_stream_ends_early(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"half\",\"no_done\":true}]", true);
    assert_int_equal(call(&f), -EPROTO);
    assert_non_null(strstr(f.err, "stream ended"));
    finish(&f);
}

static void test_stream_oversized(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"big\",\"pad_bytes\":9000000}]", true);
    assert_int_equal(call(&f), -EMSGSIZE);
    assert_non_null(strstr(f.err, "response too large"));
    finish(&f);
}

static void test_stream_line_too_long(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"x\",\"long_line\":2000000}]", true);
    assert_int_equal(call(&f), -EMSGSIZE);
    assert_non_null(strstr(f.err, "too large"));
    finish(&f);
}

static void test_stream_error_event_retried(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"x\",\"stream_error\":\"server had an error\"},{\"text\":\"second\"}]",
          true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "second");
    assert_int_equal(f.resp.attempts, 2);
    finish(&f);
}

static void test_stream_requested_json_answered(void **state)
{
    struct fixture f;
    /* a server that ignores "stream": true and answers plain JSON */
    start(&f, "[{\"text\":\"plain anyway\",\"stream\":false}]", true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "plain anyway");
    finish(&f);
}

static void test_stream_under_another_content_type(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"sniffed\",\"content_type\":\"text/plain\",\"usage\":{\"input\":5,"
          "\"output\":2,\"cached\":0}}]",
          true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "sniffed");
    assert_int_equal(f.resp.output_tokens, 2);
    finish(&f);
}

/* ---- pieces ---- */

struct sse_seen {
    char log[1024];
};

static int sse_collect(void *ctx, const char *event, const char *data, size_t len)
{
    struct sse_seen *s = ctx;
    size_t l = strlen(s->log);
    snprintf(s->log + l, sizeof(s->log) - l, "[%s|%.*s]", event, (int)len, data);
    return 0;
}

static void test_sse_parser(void **state)
{
    const char *stream = ": keep-alive\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\n"
                         "data: {\"x\":1}\n\nid: 5\nretry: 10\nfield-without-colon\n\n"
                         "event: b\rdata: cr only\r\rdata: last";
    /* every way of splitting the input gives the same events */
    for (size_t step = 1; step <= strlen(stream); step++) {
        struct sse_seen seen = {""};
        struct eph_sse s;
        eph_sse_init(&s, 64, sse_collect, &seen);
        for (size_t i = 0; i < strlen(stream); i += step) {
            size_t n = strlen(stream) - i < step ? strlen(stream) - i : step;
            assert_int_equal(eph_sse_feed(&s, stream + i, n), 0);
        }
        assert_int_equal(eph_sse_finish(&s), 0);
        eph_sse_release(&s);
        assert_string_equal(seen.log, "[a|one\ntwo][|{\"x\":1}][b|cr only][|last]");
    }
    /* An empty chunk between a CR and its LF changes nothing (found by fuzz_model_sse). */
    struct sse_seen seen = {""};
    struct eph_sse s;
    eph_sse_init(&s, 64, sse_collect, &seen);
    assert_int_equal(eph_sse_feed(&s, "data: a\r", 8), 0);
    assert_int_equal(eph_sse_feed(&s, "", 0), 0);
    assert_int_equal(eph_sse_feed(&s, "\ndata: b\n\n", 11), 0);
    assert_int_equal(eph_sse_finish(&s), 0);
    eph_sse_release(&s);
    assert_string_equal(seen.log, "[|a\nb]");
}

static void test_sse_line_cap(void **state)
{
    struct sse_seen seen = {""};
    struct eph_sse s;
    eph_sse_init(&s, 16, sse_collect, &seen);
    assert_int_equal(eph_sse_feed(&s, "data: 0123456789", 16), 0);
    assert_int_equal(eph_sse_feed(&s, "abcdef\n\n", 8), -EMSGSIZE);
    eph_sse_release(&s);
    /* many short data lines cannot grow one event past the cap either */
    eph_sse_init(&s, 16, sse_collect, &seen);
    int rc = 0;
    for (int i = 0; i < 10 && !rc; i++)
        rc = eph_sse_feed(&s, "data: abcd\n", 11);
    assert_int_equal(rc, -EMSGSIZE);
    eph_sse_release(&s);
}

static void test_error_message_sanitiser(void **state)
{
    char out[EPH_HTTP_ERROR_MAX];
    const char *b1 = "{\"error\":{\"message\":\"bad key sk-SECRET-123 given\\r\\n\\u0007x\"}}";
    eph_http_error_message(b1, strlen(b1), "sk-SECRET-123", out, sizeof(out));
    assert_string_equal(out, "bad key [redacted] given x");
    /* a long piece of the key's start, cut short by the server, is redacted too */
    const char *b5 = "{\"error\":\"key sk-SECRET-123-abcdefgh\"}";
    eph_http_error_message(b5, strlen(b5) - 6, "sk-SECRET-123-abcdefghijkl", out, sizeof(out));
    assert_null(strstr(out, "SECRET"));
    const char *b2 = "{\"type\":\"error\",\"error\":{\"type\":\"x\",\"message\":\"overloaded\"}}";
    eph_http_error_message(b2, strlen(b2), NULL, out, sizeof(out));
    assert_string_equal(out, "overloaded");
    const char *b3 = "{\"detail\":\"model not found\"}";
    eph_http_error_message(b3, strlen(b3), NULL, out, sizeof(out));
    assert_string_equal(out, "model not found");
    const char *b6 = "{\"detail\":[{\"msg\":\"Field required\",\"input\":{\"p\":\"prompt\"}}]}";
    eph_http_error_message(b6, strlen(b6), NULL, out, sizeof(out));
    assert_string_equal(out, "Field required");
    const char *b7 = "{\"oops\":{\"request\":\"the prompt\"}}";
    eph_http_error_message(b7, strlen(b7), NULL, out, sizeof(out));
    assert_string_equal(out, "");
    const char *b4 = "Bad Gateway";
    eph_http_error_message(b4, strlen(b4), NULL, out, sizeof(out));
    assert_string_equal(out, "Bad Gateway");
    /* cut at 200 bytes, never inside a UTF-8 sequence */
    char big[600] = "";
    for (int i = 0; i < 150; i++)
        strcat(big, "\xc3\xa9"); /* e acute, 2 bytes */
    eph_http_error_message(big, strlen(big), NULL, out, sizeof(out));
    assert_int_equal(strlen(out), 200);
    char small[8];
    eph_http_error_message(big, strlen(big), NULL, small, sizeof(small));
    assert_int_equal(strlen(small), 6);
}

static void test_provider_table(void **state)
{
    assert_ptr_equal(eph_model_provider("openai"), &eph_model_openai_ops);
    assert_ptr_equal(eph_model_provider("anthropic"), &eph_model_anthropic_ops);
    assert_ptr_equal(eph_model_provider("replay"), &eph_model_replay_ops);
    assert_ptr_equal(eph_model_provider("gemini"), &eph_provider_gemini.ops);
    assert_ptr_equal(eph_model_provider("openai-compatible"), &eph_provider_openai_compatible.ops);
    assert_null(eph_model_provider("mistral"));
    assert_null(eph_model_provider(NULL));
    char *u = eph_http_join_url("http://h:1/v1/", "/chat/completions");
    assert_string_equal(u, "http://h:1/v1/chat/completions");
    free(u);
}

static void test_bad_base_url(void **state)
{
    struct eph_model_config cfg = {.id = "x", .provider = "openai", .base_url = "file:///etc"};
    struct eph_model *m = NULL;
    char err[256];
    assert_int_equal(eph_model_openai_ops.open(&cfg, &m, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "base_url"));
}

/* ---- metering, retry rules, stream ends, finish reasons (docs/AGENT.md) ---- */

static void test_meter_sees_every_attempt_and_lowers_max_tokens(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":500,\"error\":\"hiccup\"},"
          "{\"text\":\"ok\",\"usage\":{\"input\":100,\"output\":7,\"cached\":40,\"reasoning\":3}}]",
          false);
    f.log.cap = 77;
    assert_int_equal(call(&f), 0);
    assert_int_equal(f.log.n, 2);
    assert_int_equal(f.log.a[0].outcome, EPH_ATTEMPT_HTTP_ERROR);
    assert_int_equal(f.log.a[0].status, 500);
    assert_false(f.log.a[0].usage_final);
    assert_int_equal(f.log.a[1].outcome, EPH_ATTEMPT_OK);
    assert_true(f.log.a[1].usage_final);
    assert_true(f.log.a[1].sent);
    assert_int_equal(f.log.a[1].input, 60);
    assert_int_equal(f.log.a[1].cached, 40);
    assert_int_equal(f.log.a[1].output, 7);
    assert_int_equal(f.log.a[1].reasoning, 3);
    /* What the meter authorised is what the server received, on every attempt. */
    json_t *reqs = fake_requests(&f.srv);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(f.log.a[i].max_tokens, 77);
        assert_int_equal(json_integer_value(json_object_get(fake_body(reqs, i), "max_tokens")), 77);
        /* The bound is never below the bytes of the body received. */
        char *body = json_dumps(fake_body(reqs, i), JSON_COMPACT);
        assert_true(f.log.a[i].input_bound >= strlen(body));
        free(body);
    }
    json_decref(reqs);
    finish(&f);
}

/* A meter that refuses the second attempt: it is not sent. */
static int refuse_second(void *ctx, unsigned attempt, uint64_t at_ns, uint64_t input_bound,
                         bool check_only, uint32_t *max_tokens, uint64_t *deadline_ns)
{
    return attempt >= 2 ? -EDQUOT : 0;
}

static void test_retry_not_sent_when_the_budget_refuses(void **state)
{
    struct fixture f;
    start(&f, "[{\"status\":503,\"error\":\"busy\"},{\"text\":\"never\"}]", false);
    struct eph_model_request req = {.messages = f.messages,
                                    .tools = f.tools,
                                    .max_tokens = 256,
                                    .deadline_ns = eph_clock_mono_ns() + 30ull * 1000000000u};
    struct eph_model_meter meter = {refuse_second, attempt_log_record, &f.log};
    assert_int_equal(eph_model_call(f.model, &req, &meter, &f.resp, f.err, sizeof(f.err)), -EIO);
    assert_int_equal(f.log.n, 1);
    assert_int_equal(fake_request_count(&f.srv), 1);
    finish(&f);
}

static void test_insufficient_quota_not_retried(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":429,\"error\":\"You exceeded your current quota\","
          "\"error_type\":\"insufficient_quota\"},{\"text\":\"never\"}]",
          false);
    assert_int_equal(call(&f), -EIO);
    assert_non_null(strstr(f.err, "quota"));
    assert_int_equal(fake_request_count(&f.srv), 1);
    assert_false(f.log.a[0].retryable);
    finish(&f);
}

static void test_4xx_retry_rules(void **state)
{
    struct fixture f;
    /* 409 (a conflict) and 408 are worth another attempt... */
    start(&f,
          "[{\"status\":409,\"error\":\"conflict\"},{\"status\":408,\"error\":\"late\"},"
          "{\"text\":\"third\"}]",
          false);
    assert_int_equal(call(&f), 0);
    assert_int_equal(fake_request_count(&f.srv), 3);
    finish(&f);
    /* ...a 404 or a 422 is not */
    start(&f, "[{\"status\":404,\"error\":\"no such model\"},{\"text\":\"never\"}]", false);
    assert_int_equal(call(&f), -EIO);
    assert_int_equal(fake_request_count(&f.srv), 1);
    finish(&f);
    start(&f, "[{\"status\":422,\"error\":\"bad\"},{\"text\":\"never\"}]", false);
    assert_int_equal(call(&f), -EIO);
    assert_int_equal(fake_request_count(&f.srv), 1);
    finish(&f);
}

static void test_stream_held_open_after_done(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"complete\",\"hold_open\":30,\"usage\":{\"input\":5,\"output\":2}}]",
          true);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call(&f), 0);
    /* Not the 30 s the server holds the connection, nor a retry. */
    assert_true(fake_seconds_since(t0) < 15);
    assert_string_equal(f.resp.content, "complete");
    assert_true(f.resp.usage_final);
    assert_int_equal(f.resp.attempts, 1);
    finish(&f);
}

static void test_stream_slow_but_live_is_not_cut(void **state)
{
    struct fixture f;
    /* One event every 0.6 s for longer than the 1 s idle timeout. */
    start(&f,
          "[{\"text\":\"a b c d\",\"pieces\":4,\"chunk_delay\":0.6,"
          "\"usage\":{\"input\":5,\"output\":4}}]",
          true);
    f.cfg.timeout_seconds = 1;
    eph_model_openai_ops.free(f.model);
    assert_int_equal(eph_model_openai_ops.open(&f.cfg, &f.model, f.err, sizeof(f.err)), 0);
    assert_int_equal(eph_model_set_stream(f.model, true), 0);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call(&f), 0);
    assert_true(fake_seconds_since(t0) > 1.0);
    assert_string_equal(f.resp.content, "a b c d");
    assert_int_equal(f.resp.attempts, 1);
    finish(&f);
}

static void test_stream_idle_is_cut_and_retried(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"x\",\"stall_after\":20},{\"text\":\"second\"}]", true);
    f.cfg.timeout_seconds = 1;
    eph_model_openai_ops.free(f.model);
    assert_int_equal(eph_model_openai_ops.open(&f.cfg, &f.model, f.err, sizeof(f.err)), 0);
    assert_int_equal(eph_model_set_stream(f.model, true), 0);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "second");
    assert_int_equal(f.log.n, 2);
    assert_int_equal(f.log.a[0].outcome, EPH_ATTEMPT_TIMEOUT);
    assert_true(f.log.a[0].sent); /* billable: the meter charges its earmark */
    assert_false(f.log.a[0].usage_final);
    finish(&f);
}

static void test_stream_cut_is_retried(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"one two three\",\"pieces\":3,\"cut_after\":2},"
          "{\"text\":\"whole\",\"usage\":{\"input\":5,\"output\":1}}]",
          true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "whole");
    assert_int_equal(f.log.n, 2);
    assert_int_equal(f.log.a[0].outcome, EPH_ATTEMPT_CUT);
    assert_true(f.log.a[0].sent);
    assert_false(f.log.a[0].usage_final);
    finish(&f);
}

static void test_refusal_and_content_filter(void **state)
{
    struct fixture f;
    for (int stream = 0; stream < 2; stream++) {
        start(&f, "[{\"refusal\":\"I cannot help with that.\"}]", stream);
        assert_int_equal(call(&f), 0);
        assert_string_equal(f.resp.finish_reason, "refusal");
        assert_string_equal(f.resp.refusal, "I cannot help with that.");
        finish(&f);
        start(&f, "[{\"text\":\"\",\"finish_reason\":\"content_filter\"}]", stream);
        assert_int_equal(call(&f), 0);
        assert_string_equal(f.resp.finish_reason, "content_filter");
        finish(&f);
    }
}

static void test_stream_tool_calls_interleaved(void **state)
{
    struct fixture f;
    start(
        &f,
        "[{\"interleave\":true,\"tool_calls\":["
        "{\"id\":\"c0\",\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":\\\"echo zero\\\"}\"},"
        "{\"id\":\"c1\",\"name\":\"read_file\",\"arguments\":\"{\\\"path\\\":\\\"one.txt\\\"}\"}]}"
        "]",
        true);
    assert_int_equal(call(&f), 0);
    assert_int_equal(f.resp.ncalls, 2);
    assert_string_equal(f.resp.calls[0].id, "c0");
    assert_string_equal(f.resp.calls[0].arguments, "{\"command\":\"echo zero\"}");
    assert_string_equal(f.resp.calls[1].id, "c1");
    assert_string_equal(f.resp.calls[1].name, "read_file");
    assert_string_equal(f.resp.calls[1].arguments, "{\"path\":\"one.txt\"}");
    finish(&f);
}

int main(void)
{
    assert_int_equal(eph_http_global_init(), 0);
    /* a proxy from the environment must not stand between the test and 127.0.0.1 */
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("https_proxy");
    unsetenv("HTTPS_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_answer),
        cmocka_unit_test(test_calls_reuse_one_connection),
        cmocka_unit_test(test_concurrent_calls_share_the_pool),
        cmocka_unit_test(test_pool_past_its_size),
        cmocka_unit_test(test_closed_connection_reconnects),
        cmocka_unit_test(test_tool_round_trip),
        cmocka_unit_test(test_unknown_finish_reason),
        cmocka_unit_test(test_length_finish_reason),
        cmocka_unit_test(test_500_then_200_retried),
        cmocka_unit_test(test_429_retry_after),
        cmocka_unit_test(test_all_attempts_fail),
        cmocka_unit_test(test_400_not_retried_and_key_never_shown),
        cmocka_unit_test(test_max_completion_tokens_fallback),
        cmocka_unit_test(test_deadline_during_slow_response),
        cmocka_unit_test(test_cancel_during_slow_response),
        cmocka_unit_test(test_cancel_before_the_call),
        cmocka_unit_test(test_oversized_response),
        cmocka_unit_test(test_non_json_body),
        cmocka_unit_test(test_empty_choices),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_missing_usage),
        cmocka_unit_test(test_huge_usage),
        cmocka_unit_test(test_missing_key_variable),
        cmocka_unit_test(test_no_key_configured),
        cmocka_unit_test(test_connection_refused),
        cmocka_unit_test(test_retry_never_sleeps_past_deadline),
        cmocka_unit_test(test_stream_text),
        cmocka_unit_test(test_stream_tool_round_trip),
        cmocka_unit_test(test_stream_tool_calls_without_index),
        cmocka_unit_test(test_stream_unknown_finish_reason),
        cmocka_unit_test(test_stream_cancel),
        cmocka_unit_test(test_stream_deadline),
        cmocka_unit_test(test_stream_ends_early),
        cmocka_unit_test(test_stream_oversized),
        cmocka_unit_test(test_stream_line_too_long),
        cmocka_unit_test(test_stream_error_event_retried),
        cmocka_unit_test(test_stream_requested_json_answered),
        cmocka_unit_test(test_stream_under_another_content_type),
        cmocka_unit_test(test_sse_parser),
        cmocka_unit_test(test_sse_line_cap),
        cmocka_unit_test(test_error_message_sanitiser),
        cmocka_unit_test(test_provider_table),
        cmocka_unit_test(test_bad_base_url),
        cmocka_unit_test(test_meter_sees_every_attempt_and_lowers_max_tokens),
        cmocka_unit_test(test_retry_not_sent_when_the_budget_refuses),
        cmocka_unit_test(test_insufficient_quota_not_retried),
        cmocka_unit_test(test_4xx_retry_rules),
        cmocka_unit_test(test_stream_held_open_after_done),
        cmocka_unit_test(test_stream_slow_but_live_is_not_cut),
        cmocka_unit_test(test_stream_idle_is_cut_and_retried),
        cmocka_unit_test(test_stream_cut_is_retried),
        cmocka_unit_test(test_refusal_and_content_filter),
        cmocka_unit_test(test_stream_tool_calls_interleaved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
