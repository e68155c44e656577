/*
 * test_model_anthropic.c - the anthropic provider against tests/fake_model_server.py speaking the
 * real Messages API wire format, plain and streaming.
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

#define KEY_ENV "EPH_TEST_ANTHROPIC_KEY"
#define KEY "sk-ant-test-fedcba9876543210"

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

static void start(struct fixture *f, const char *script, bool stream)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(fake_start(&f->srv, script, KEY), 0);
    f->cfg.id = "claude-test-1";
    f->cfg.provider = "anthropic";
    f->cfg.base_url = f->srv.url;
    f->cfg.api_key_env = KEY_ENV;
    f->cfg.max_output_tokens = 1024;
    f->cfg.timeout_seconds = 20;
    assert_int_equal(setenv(KEY_ENV, KEY, 1), 0);
    assert_int_equal(eph_model_anthropic_ops.open(&f->cfg, &f->model, f->err, sizeof(f->err)), 0);
    assert_int_equal(eph_model_set_stream(f->model, stream), 0);
    f->messages = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "system", "content",
                            "you are in a sandbox", "role", "user", "content", "list the files");
    f->tools = json_pack("[{s:s,s:s,s:{s:s,s:{s:{s:s}}}}]", "name", "shell", "description",
                         "runs a command", "parameters", "type", "object", "properties", "command",
                         "type", "string");
    assert_non_null(f->messages);
    assert_non_null(f->tools);
}

static void finish(struct fixture *f)
{
    eph_model_response_release(&f->resp);
    eph_model_anthropic_ops.free(f->model);
    json_decref(f->messages);
    json_decref(f->tools);
    fake_stop(&f->srv);
}

static int call_with(struct fixture *f, uint64_t deadline_ns, const atomic_bool *cancel)
{
    eph_model_response_release(&f->resp);
    struct eph_model_request req = {.messages = f->messages,
                                    .tools = f->tools,
                                    .max_tokens = 300,
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

static const char *jstr(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* ---- connections ---- */

/* Every call of a model, a retry included, rides the first TCP connection; CALLERS runs at once,
 * ROUNDS calls each, through the one model, with the server gathering CALLERS requests before it
 * answers, make CALLERS connections for all the calls, and every caller gets the echo of its own
 * marker (test_model_openai.c says more). Plain, then streamed. */
#define CALLERS 4
#define ROUNDS 3

static void test_calls_reuse_one_connection(void **state)
{
    for (int stream = 0; stream < 2; stream++) {
        struct fixture f;
        start(&f, FAKE_REUSE_SCRIPT, stream);
        assert_int_equal(fake_check_one_connection(f.model, &f.srv), 0);
        finish(&f);
    }
}

static void test_concurrent_calls_share_the_pool(void **state)
{
    char *script = fake_echo_script(CALLERS * ROUNDS, CALLERS);
    for (int stream = 0; stream < 2; stream++) {
        struct fixture f;
        start(&f, script, stream);
        assert_int_equal(fake_check_concurrent(f.model, &f.srv, CALLERS, ROUNDS), 0);
        finish(&f);
    }
    free(script);
}

static void text_answer(bool stream)
{
    struct fixture f;
    start(&f, "[{\"text\":\"hello world\",\"usage\":{\"input\":100,\"output\":7,\"cached\":40}}]",
          stream);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "hello world");
    assert_int_equal(f.resp.ncalls, 0);
    assert_string_equal(f.resp.finish_reason, "stop");
    /* Anthropic's input_tokens already excludes cache reads */
    assert_int_equal(f.resp.input_tokens, 100);
    assert_int_equal(f.resp.cached_input_tokens, 40);
    assert_int_equal(f.resp.output_tokens, 7);
    assert_int_equal(f.resp.attempts, 1);

    json_t *reqs = fake_requests(&f.srv);
    assert_int_equal(json_array_size(reqs), 1);
    json_t *r = json_array_get(reqs, 0);
    assert_string_equal(jstr(r, "path"), "/v1/messages");
    assert_true(json_is_true(json_object_get(r, "auth_ok")));
    json_t *h = json_object_get(r, "headers");
    assert_string_equal(jstr(h, "anthropic-version"), "2023-06-01");
    assert_string_equal(jstr(h, "x-api-key"), "<redacted>");
    assert_null(json_object_get(h, "authorization"));
    json_t *b = fake_body(reqs, 0);
    assert_string_equal(jstr(b, "model"), "claude-test-1");
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 300);
    assert_string_equal(jstr(b, "system"), "you are in a sandbox");
    assert_true(json_is_true(json_object_get(b, "stream")) == stream);
    json_t *msgs = json_object_get(b, "messages");
    assert_int_equal(json_array_size(msgs), 1);
    json_t *m0 = json_array_get(msgs, 0);
    assert_string_equal(jstr(m0, "role"), "user");
    json_t *blk = json_array_get(json_object_get(m0, "content"), 0);
    assert_string_equal(jstr(blk, "type"), "text");
    assert_string_equal(jstr(blk, "text"), "list the files");
    json_t *tool = json_array_get(json_object_get(b, "tools"), 0);
    assert_string_equal(jstr(tool, "name"), "shell");
    assert_string_equal(jstr(tool, "description"), "runs a command");
    assert_string_equal(jstr(json_object_get(tool, "input_schema"), "type"), "object");
    json_decref(reqs);
    finish(&f);
}

static void test_text_answer(void **state)
{
    text_answer(false);
}

static void test_stream_text_answer(void **state)
{
    text_answer(true);
}

static void tool_round_trip(bool stream)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"let me look\",\"tool_calls\":[{\"id\":\"toolu_01A\",\"name\":\"shell\","
          "\"arguments\":\"{\\\"command\\\":\\\"ls\\\"}\"},{\"name\":\"shell\","
          "\"input\":{\"command\":\"pwd\"},\"arguments\":\"{\\\"command\\\":\\\"pwd\\\"}\"}],"
          "\"usage\":{\"input\":80,\"output\":30,\"cached\":0}},"
          "{\"text\":\"two files\"}]",
          stream);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.finish_reason, "tool_calls");
    assert_string_equal(f.resp.content, "let me look");
    assert_int_equal(f.resp.ncalls, 2);
    assert_string_equal(f.resp.calls[0].id, "toolu_01A");
    assert_string_equal(f.resp.calls[0].name, "shell");
    assert_string_equal(f.resp.calls[0].arguments, "{\"command\":\"ls\"}");
    assert_string_equal(f.resp.calls[1].id, "call_2"); /* missing id made up */
    assert_string_equal(f.resp.calls[1].arguments, "{\"command\":\"pwd\"}");
    assert_int_equal(f.resp.input_tokens, 80);
    assert_int_equal(f.resp.output_tokens, 30);

    json_t *calls = json_array();
    for (size_t i = 0; i < f.resp.ncalls; i++)
        json_array_append_new(calls, json_pack("{s:s,s:s,s:s}", "id", f.resp.calls[i].id, "name",
                                               f.resp.calls[i].name, "arguments",
                                               f.resp.calls[i].arguments));
    /* a third call whose arguments were not JSON: sent back with input {} */
    json_array_append_new(calls, json_pack("{s:s,s:s,s:s}", "id", "call_3", "name", "shell",
                                           "arguments", "{\"command\": oops"));
    json_array_append_new(f.messages, json_pack("{s:s,s:s,s:o}", "role", "assistant", "content",
                                                f.resp.content, "tool_calls", calls));
    json_array_append_new(f.messages,
                          json_pack("{s:s,s:s,s:s,s:s}", "role", "tool", "tool_call_id",
                                    "toolu_01A", "name", "shell", "content", "a.txt\nb.txt"));
    json_array_append_new(f.messages, json_pack("{s:s,s:s,s:s,s:s}", "role", "tool", "tool_call_id",
                                                "call_2", "name", "shell", "content", "/scratch"));
    json_array_append_new(f.messages,
                          json_pack("{s:s,s:s,s:s,s:s}", "role", "tool", "tool_call_id", "call_3",
                                    "name", "shell", "content", "error: invalid arguments"));
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "two files");

    json_t *reqs = fake_requests(&f.srv);
    assert_int_equal(json_array_size(reqs), 2);
    json_t *msgs = json_object_get(fake_body(reqs, 1), "messages");
    /* user, assistant, and the three results merged into one user message */
    assert_int_equal(json_array_size(msgs), 3);
    json_t *asst = json_array_get(msgs, 1);
    assert_string_equal(jstr(asst, "role"), "assistant");
    json_t *ac = json_object_get(asst, "content");
    assert_int_equal(json_array_size(ac), 4);
    assert_string_equal(jstr(json_array_get(ac, 0), "type"), "text");
    assert_string_equal(jstr(json_array_get(ac, 0), "text"), "let me look");
    json_t *tu = json_array_get(ac, 1);
    assert_string_equal(jstr(tu, "type"), "tool_use");
    assert_string_equal(jstr(tu, "id"), "toolu_01A");
    assert_string_equal(jstr(tu, "name"), "shell");
    assert_string_equal(jstr(json_object_get(tu, "input"), "command"), "ls");
    assert_string_equal(jstr(json_array_get(ac, 2), "id"), "call_2");
    json_t *bad = json_array_get(ac, 3);
    assert_true(json_is_object(json_object_get(bad, "input")));
    assert_int_equal(json_object_size(json_object_get(bad, "input")), 0);

    json_t *user = json_array_get(msgs, 2);
    assert_string_equal(jstr(user, "role"), "user");
    json_t *uc = json_object_get(user, "content");
    assert_int_equal(json_array_size(uc), 3);
    json_t *r1 = json_array_get(uc, 0), *r2 = json_array_get(uc, 1), *r3 = json_array_get(uc, 2);
    assert_string_equal(jstr(r1, "type"), "tool_result");
    assert_string_equal(jstr(r1, "tool_use_id"), "toolu_01A");
    assert_string_equal(jstr(r1, "content"), "a.txt\nb.txt");
    assert_string_equal(jstr(r2, "tool_use_id"), "call_2");
    assert_string_equal(jstr(r2, "content"), "/scratch");
    assert_string_equal(jstr(r3, "tool_use_id"), "call_3");
    json_decref(reqs);
    finish(&f);
}

static void test_tool_round_trip(void **state)
{
    tool_round_trip(false);
}

static void test_stream_tool_round_trip(void **state)
{
    tool_round_trip(true);
}

static void test_stream_malformed_partial_json_raw(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"tool_calls\":[{\"id\":\"toolu_x\",\"name\":\"shell\","
          "\"arguments\":\"{\\\"command\\\": \\\"ls\"}],\"finish_reason\":\"max_tokens\"}]",
          true);
    assert_int_equal(call(&f), 0);
    assert_int_equal(f.resp.ncalls, 1);
    assert_string_equal(f.resp.calls[0].arguments, "{\"command\": \"ls");
    assert_string_equal(f.resp.finish_reason, "length");
    finish(&f);
}

static void test_stop_reasons(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"a\",\"finish_reason\":\"max_tokens\"},"
          "{\"text\":\"b\",\"finish_reason\":\"stop_sequence\"},"
          "{\"text\":\"c\",\"finish_reason\":\"refusal\"}]",
          false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.finish_reason, "length");
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.finish_reason, "stop");
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.finish_reason, "refusal");
    finish(&f);
}

static void test_529_then_200_retried(void **state)
{
    struct fixture f;
    start(&f, "[{\"status\":529,\"error\":\"Overloaded\"},{\"text\":\"second time\"}]", false);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "second time");
    assert_int_equal(f.resp.attempts, 2);
    finish(&f);
}

static void test_429_retry_after(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":429,\"error\":\"rate limited\",\"headers\":{\"retry-after\":\"1\"}},"
          "{\"text\":\"ok\"}]",
          false);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call(&f), 0);
    double secs = fake_seconds_since(t0);
    assert_int_equal(f.resp.attempts, 2);
    assert_true(secs >= 0.95);
    assert_true(secs < 5.0);
    finish(&f);
}

static void test_401_not_retried_key_redacted(void **state)
{
    struct fixture f;
    start(&f, "[{\"status\":401,\"error\":\"invalid x-api-key " KEY "\"},{\"text\":\"never\"}]",
          false);
    assert_int_equal(call(&f), -EIO);
    assert_int_equal(f.resp.attempts, 1);
    assert_non_null(strstr(f.err, "anthropic: http 401: invalid x-api-key [redacted]"));
    assert_null(strstr(f.err, KEY));
    assert_int_equal(fake_request_count(&f.srv), 1);
    finish(&f);
}

static void test_deadline(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"late\",\"delay\":20}]", false);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call_with(&f, t0 + 1000000000u, NULL), -ETIMEDOUT);
    double secs = fake_seconds_since(t0);
    assert_true(secs >= 0.95);
    assert_true(secs < 1.5);
    finish(&f);
}

struct canceller {
    struct fake_server *srv;
    atomic_bool flag;
    uint64_t set_at;
};

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
    int rc = call_with(&f, eph_clock_mono_ns() + 30ull * 1000000000u, &c.flag);
    uint64_t t1 = eph_clock_mono_ns();
    pthread_join(t, NULL);
    assert_int_equal(rc, -ECANCELED);
    assert_true(c.set_at != 0);
    assert_true((double)(t1 - c.set_at) / 1e9 < 0.3);
    finish(&f);
}

static void test_cancel(void **state)
{
    cancel_case("[{\"text\":\"late\",\"delay\":20}]", false);
}

/* Sets the flag once the first event (message_start, with the input usage) is on the wire. */
static void *cancel_after_first_event(void *arg)
{
    struct canceller *c = arg;
    if (fake_wait_first_event(c->srv, 10000) == 0) {
        c->set_at = eph_clock_mono_ns();
        atomic_store(&c->flag, true);
    }
    return NULL;
}

static void test_stream_cancel_keeps_reported_usage(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"a long story\",\"stall_after\":20,\"usage\":{\"input\":70,\"output\":9,"
          "\"cached\":5}}]",
          true);
    struct canceller c = {.srv = &f.srv};
    atomic_init(&c.flag, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_after_first_event, &c), 0);
    int rc = call_with(&f, eph_clock_mono_ns() + 30ull * 1000000000u, &c.flag);
    uint64_t t1 = eph_clock_mono_ns();
    pthread_join(t, NULL);
    assert_int_equal(rc, -ECANCELED);
    assert_true(c.set_at != 0);
    assert_true((double)(t1 - c.set_at) / 1e9 < 0.3);
    /* message_start said 70 input tokens (5 cached) and 1 output token: those are paid for */
    assert_int_equal(f.resp.input_tokens, 70);
    assert_int_equal(f.resp.cached_input_tokens, 5);
    assert_int_equal(f.resp.output_tokens, 1);
    assert_null(f.resp.content);
    finish(&f);
}

static void test_stream_error_event_retried_and_both_paid(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"text\":\"x\",\"stream_error\":\"Overloaded\",\"usage\":{\"input\":40,\"output\":3,"
          "\"cached\":0}},{\"text\":\"second\",\"usage\":{\"input\":40,\"output\":6,"
          "\"cached\":0}}]",
          true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "second");
    assert_int_equal(f.resp.attempts, 2);
    assert_int_equal(f.log.n, 2);
    /* The first attempt broke off after message_start (40 in, 1 out): its usage is not the
     * whole of it, so the meter charges its worst case. */
    assert_int_equal(f.log.a[0].outcome, EPH_ATTEMPT_CUT);
    assert_true(f.log.a[0].sent);
    assert_true(f.log.a[0].retryable);
    assert_false(f.log.a[0].usage_final);
    assert_int_equal(f.log.a[0].input, 40);
    assert_int_equal(f.log.a[0].output, 1);
    /* The second is whole: message_delta gave the final output count. */
    assert_int_equal(f.log.a[1].outcome, EPH_ATTEMPT_OK);
    assert_true(f.log.a[1].usage_final);
    assert_int_equal(f.log.a[1].input, 40);
    assert_int_equal(f.log.a[1].output, 6);
    assert_int_equal(f.resp.input_tokens, 40);
    assert_int_equal(f.resp.output_tokens, 6);
    finish(&f);
}

static void test_oversized(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"big\",\"pad_bytes\":9000000}]", false);
    assert_int_equal(call(&f), -EMSGSIZE);
    assert_non_null(strstr(f.err, "response too large"));
    finish(&f);
}

static void test_stream_oversized(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"big\",\"pad_bytes\":9000000}]", true);
    assert_int_equal(call(&f), -EMSGSIZE);
    finish(&f);
}

static void test_non_json(void **state)
{
    struct fixture f;
    start(&f, "[{\"body\":\"upstream connect error\",\"content_type\":\"text/plain\"}]", false);
    assert_int_equal(call(&f), -EPROTO);
    assert_non_null(strstr(f.err, "not a json object"));
    finish(&f);
}

static void test_no_content(void **state)
{
    struct fixture f;
    start(&f, "[{\"body\":\"{\\\"type\\\":\\\"message\\\",\\\"content\\\":\\\"hi\\\"}\"}]", false);
    assert_int_equal(call(&f), -EPROTO);
    assert_non_null(strstr(f.err, "no content"));
    finish(&f);
}

static void test_error_with_200(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"body\":\"{\\\"type\\\":\\\"error\\\",\\\"error\\\":{\\\"type\\\":"
          "\\\"invalid_request_error\\\",\\\"message\\\":\\\"prompt is too long\\\"}}\"}]",
          false);
    assert_int_equal(call(&f), -EIO);
    assert_non_null(strstr(f.err, "prompt is too long"));
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

static void test_stream_fallbacks(void **state)
{
    struct fixture f;
    /* an event stream labelled text/plain, then a plain JSON answer to a streaming request */
    start(&f,
          "[{\"text\":\"sniffed\",\"content_type\":\"application/octet-stream\"},"
          "{\"text\":\"plain\",\"stream\":false}]",
          true);
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "sniffed");
    assert_int_equal(call(&f), 0);
    assert_string_equal(f.resp.content, "plain");
    finish(&f);
}

static void test_consecutive_user_messages_merged(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"ok\"}]", false);
    /* two system messages joined; a second user message merged with the first */
    json_array_insert_new(f.messages, 1,
                          json_pack("{s:s,s:s}", "role", "system", "content", "be brief"));
    json_array_append_new(f.messages, json_pack("{s:s,s:s}", "role", "user", "content", "now"));
    assert_int_equal(call(&f), 0);
    json_t *reqs = fake_requests(&f.srv);
    json_t *b = fake_body(reqs, 0);
    assert_string_equal(jstr(b, "system"), "you are in a sandbox\n\nbe brief");
    json_t *msgs = json_object_get(b, "messages");
    assert_int_equal(json_array_size(msgs), 1);
    assert_int_equal(json_array_size(json_object_get(json_array_get(msgs, 0), "content")), 2);
    json_decref(reqs);
    finish(&f);
}

static void test_missing_usage(void **state)
{
    for (int stream = 0; stream < 2; stream++) {
        struct fixture f;
        start(&f, "[{\"text\":\"free?\",\"usage\":null},{\"text\":\"paid\"}]", stream);
        assert_int_equal(call(&f), 0);
        assert_string_equal(f.resp.content, "free?");
        assert_int_equal(f.resp.input_tokens, 0);
        assert_int_equal(f.resp.output_tokens, 0);
        assert_true(f.resp.usage_missing); /* the worker charges the worst case */
        assert_int_equal(call(&f), 0);
        assert_string_equal(f.resp.content, "paid");
        assert_false(f.resp.usage_missing);
        finish(&f);
    }
}

static void test_unknown_role_rejected(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"ok\"}]", false);
    json_array_append_new(f.messages, json_pack("{s:s,s:s}", "role", "narrator", "content", "x"));
    assert_int_equal(call(&f), -EINVAL);
    assert_non_null(strstr(f.err, "unknown role"));
    assert_int_equal(fake_request_count(&f.srv), 0);
    finish(&f);
}

static void test_default_base_url(void **state)
{
    struct eph_model_config cfg = {.id = "claude", .provider = "anthropic"};
    struct eph_model *m = NULL;
    char err[256];
    assert_int_equal(eph_model_anthropic_ops.open(&cfg, &m, err, sizeof(err)), 0);
    assert_string_equal(((struct eph_http_model *)m)->url, "https://api.anthropic.com/v1/messages");
    assert_string_equal(((struct eph_http_model *)m)->upstream, "claude");
    eph_model_anthropic_ops.free(m);
}

/* ---- metering, stream ends, finish reasons, prices (docs/AGENT.md) ---- */

static void test_cache_writes_by_lifetime(void **state)
{
    struct fixture f;
    for (int stream = 0; stream < 2; stream++) {
        start(&f,
              "[{\"text\":\"ok\",\"usage\":{\"input\":10,\"output\":4,\"cached\":300,"
              "\"cache_write\":200,\"cache_write_1h\":50}}]",
              stream);
        assert_int_equal(call(&f), 0);
        assert_int_equal(f.resp.input_tokens, 10);
        assert_int_equal(f.resp.cached_input_tokens, 300);
        assert_int_equal(f.resp.cache_write_tokens, 200);
        assert_int_equal(f.resp.cache_write_1h_tokens, 50);
        assert_int_equal(f.resp.output_tokens, 4);
        assert_true(f.resp.usage_final);
        finish(&f);
    }
    /* Without the split, every write is a 5-minute one. */
    start(&f, "[{\"text\":\"ok\",\"usage\":{\"input\":10,\"output\":4,\"cache_write\":70}}]",
          false);
    assert_int_equal(call(&f), 0);
    assert_int_equal(f.resp.cache_write_tokens, 70);
    assert_int_equal(f.resp.cache_write_1h_tokens, 0);
    finish(&f);
}

static void test_stream_held_open_after_message_stop(void **state)
{
    struct fixture f;
    start(&f, "[{\"text\":\"complete\",\"hold_open\":30,\"usage\":{\"input\":5,\"output\":2}}]",
          true);
    uint64_t t0 = eph_clock_mono_ns();
    assert_int_equal(call(&f), 0);
    assert_true(fake_seconds_since(t0) < 15);
    assert_string_equal(f.resp.content, "complete");
    assert_true(f.resp.usage_final);
    assert_int_equal(f.resp.output_tokens, 2);
    assert_int_equal(f.resp.attempts, 1);
    finish(&f);
}

static void test_refusal_stop_reason(void **state)
{
    struct fixture f;
    for (int stream = 0; stream < 2; stream++) {
        start(&f, "[{\"refusal\":\"I will not do that.\"}]", stream);
        assert_int_equal(call(&f), 0);
        assert_string_equal(f.resp.finish_reason, "refusal");
        assert_string_equal(f.resp.refusal, "I will not do that.");
        finish(&f);
    }
}

static void test_overloaded_529_retried_and_metered(void **state)
{
    struct fixture f;
    start(&f,
          "[{\"status\":529,\"error\":\"Overloaded\",\"error_type\":\"overloaded_error\"},"
          "{\"text\":\"fine\",\"usage\":{\"input\":5,\"output\":2}}]",
          true);
    f.log.cap = 50;
    assert_int_equal(call(&f), 0);
    assert_int_equal(f.log.n, 2);
    assert_int_equal(f.log.a[0].outcome, EPH_ATTEMPT_HTTP_ERROR);
    assert_int_equal(f.log.a[0].status, 529);
    json_t *reqs = fake_requests(&f.srv);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(json_integer_value(json_object_get(fake_body(reqs, i), "max_tokens")), 50);
        char *body = json_dumps(fake_body(reqs, i), JSON_COMPACT);
        /* the bytes received plus the tool-use system prompt Anthropic documents */
        assert_true(f.log.a[i].input_bound >= strlen(body));
        free(body);
    }
    json_decref(reqs);
    finish(&f);
}

int main(void)
{
    assert_int_equal(eph_http_global_init(), 0);
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
        cmocka_unit_test(test_stream_text_answer),
        cmocka_unit_test(test_tool_round_trip),
        cmocka_unit_test(test_stream_tool_round_trip),
        cmocka_unit_test(test_stream_malformed_partial_json_raw),
        cmocka_unit_test(test_stop_reasons),
        cmocka_unit_test(test_529_then_200_retried),
        cmocka_unit_test(test_429_retry_after),
        cmocka_unit_test(test_401_not_retried_key_redacted),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_stream_cancel_keeps_reported_usage),
        cmocka_unit_test(test_stream_error_event_retried_and_both_paid),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_stream_oversized),
        cmocka_unit_test(test_non_json),
        cmocka_unit_test(test_no_content),
        cmocka_unit_test(test_error_with_200),
        cmocka_unit_test(test_stream_ends_early),
        cmocka_unit_test(test_stream_fallbacks),
        cmocka_unit_test(test_consecutive_user_messages_merged),
        cmocka_unit_test(test_missing_usage),
        cmocka_unit_test(test_unknown_role_rejected),
        cmocka_unit_test(test_default_base_url),
        cmocka_unit_test(test_cache_writes_by_lifetime),
        cmocka_unit_test(test_stream_held_open_after_message_stop),
        cmocka_unit_test(test_refusal_stop_reason),
        cmocka_unit_test(test_overloaded_529_retried_and_metered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
