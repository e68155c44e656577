/* The record and its replay: events as transcript lines (run/transcript.c), transcript lines read
 * back (hostile input: bad JSON, wrong types, lines and files over their caps), the model of a
 * replay_of run (recorded turns in order, no usage, divergences, the end of the record), and the
 * replay provider reading exported transcripts by name and picking up new ones. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/providers.h"
#include "agent/replay.h"
#include "run/transcript.h"

static struct eph_event event(uint64_t seq, const char *type, const char *data)
{
    struct eph_event e = {.seq = seq, .t_ms = (int64_t)seq * 1000};
    snprintf(e.type, sizeof(e.type), "%s", type);
    snprintf(e.source, sizeof(e.source), "x");
    e.data = json_loads(data, 0, NULL);
    assert_non_null(e.data);
    return e;
}

/* The lines of one event (a new array). */
static json_t *lines_of(uint64_t seq, const char *type, const char *data)
{
    struct eph_event e = event(seq, type, data);
    json_t *lines = json_array();
    assert_int_equal(eph_transcript_event_lines(&e, lines), 0);
    json_decref(e.data);
    return lines;
}

static const char *kind_at(json_t *lines, size_t i)
{
    return json_string_value(json_object_get(json_array_get(lines, i), "kind"));
}

static void test_transcript_lines(void **state)
{
    (void)state;
    json_t *l = lines_of(4, "model.call",
                         "{\"turn\": 1, \"request_digest\": \"ab\", \"replayed\": false, "
                         "\"response\": {\"text\": null, \"tool_calls\": [{\"id\": \"c1\", "
                         "\"name\": \"shell\", \"arguments\": \"{}\"}], \"finish_reason\": "
                         "\"tool_calls\", \"usage\": {\"input_tokens\": 3}}}");
    assert_int_equal(json_array_size(l), 1);
    assert_string_equal(kind_at(l, 0), "model_turn");
    json_t *o = json_array_get(l, 0);
    assert_int_equal(json_integer_value(json_object_get(o, "seq")), 4);
    assert_int_equal(json_integer_value(json_object_get(o, "turn")), 1);
    assert_string_equal(json_string_value(json_object_get(o, "request_digest")), "ab");
    assert_true(json_is_object(json_object_get(o, "response")));
    json_decref(l);

    /* An attempt without an answer (a retry, an error) records nothing to replay. */
    l = lines_of(5, "model.call", "{\"turn\": 1, \"outcome\": \"http_error\"}");
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);

    l = lines_of(6, "shell.command",
                 "{\"turn\": 1, \"call\": {\"id\": \"c1\", \"name\": \"shell\", \"arguments\": "
                 "\"{}\"}, \"result\": \"out\", \"stdout\": \"out\"}");
    assert_int_equal(json_array_size(l), 1);
    assert_string_equal(kind_at(l, 0), "tool_call");
    o = json_array_get(l, 0);
    assert_string_equal(json_string_value(json_object_get(o, "result")), "out");
    assert_string_equal(json_string_value(json_object_get(o, "type")), "shell.command");
    assert_null(json_object_get(o, "stdout"));
    json_decref(l);

    /* web_fetch: a tool call and an exchange of the same seq. */
    l = lines_of(7, "web.request",
                 "{\"turn\": 2, \"call\": {\"id\": \"c2\", \"name\": \"web_fetch\"}, \"result\": "
                 "\"page\", \"exchange\": {\"request\": {\"method\": \"GET\"}, \"response\": "
                 "{\"status\": 200}}}");
    assert_int_equal(json_array_size(l), 2);
    assert_string_equal(kind_at(l, 0), "tool_call");
    assert_string_equal(kind_at(l, 1), "exchange");
    o = json_array_get(l, 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "response"), "status")),
                     200);
    json_decref(l);

    /* A sandbox's own request through the broker: an exchange only. */
    l = lines_of(8, "connection.request",
                 "{\"exchange\": {\"request\": {\"method\": \"POST\"}, \"response\": {}}}");
    assert_int_equal(json_array_size(l), 1);
    assert_string_equal(kind_at(l, 0), "exchange");
    json_decref(l);

    l = lines_of(9, "replay.divergence",
                 "{\"turn\": 1, \"call_id\": \"c1\", \"tool\": \"shell\", \"original\": \"a\", "
                 "\"replayed\": \"b\"}");
    assert_int_equal(json_array_size(l), 1);
    assert_string_equal(kind_at(l, 0), "divergence");
    o = json_array_get(l, 0);
    assert_string_equal(json_string_value(json_object_get(o, "replayed")), "b");
    json_decref(l);

    /* Events that record nothing, and fields of the wrong type: no line, no crash. */
    l = lines_of(10, "shell.command", "{\"exit_code\": 0}");
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);
    l = lines_of(11, "file.read", "{\"call\": \"not an object\", \"result\": 3}");
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);
    l = lines_of(12, "model.call", "{\"response\": [1, 2]}");
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);
    l = lines_of(13, "sandbox.ready", "{\"call\": {\"id\": \"x\"}}");
    assert_int_equal(json_array_size(l), 0);
    json_decref(l);
}

static void test_transcript_run_line(void **state)
{
    (void)state;
    struct eph_run r;
    eph_run_init(&r);
    snprintf(r.id, sizeof(r.id), "run_0123456789abcdef0123456789abcdef");
    r.model = strdup("m");
    r.prompt = strdup("hello");
    r.shell = true;
    r.status = EPH_RUN_COMPLETED;
    json_t *o = eph_transcript_run_line(&r);
    assert_non_null(o); /* NULL: out of memory, the whole line */
    assert_string_equal(json_string_value(json_object_get(o, "kind")), "run");
    assert_string_equal(json_string_value(json_object_get(o, "prompt")), "hello");
    assert_string_equal(json_string_value(json_object_get(o, "status")), "completed");
    assert_true(json_is_true(json_object_get(json_object_get(o, "permissions"), "shell")));
    assert_null(json_object_get(o, "replay_of"));
    json_decref(o);
    r.replay_of = strdup("run_ffffffffffffffffffffffffffffffff");
    o = eph_transcript_run_line(&r);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "replay_of")), r.replay_of);
    json_decref(o);
    eph_run_release(&r);
}

#define TURN1                                                                                      \
    "{\"kind\":\"model_turn\",\"turn\":1,\"response\":{\"text\":null,\"tool_calls\":[{\"id\":"     \
    "\"c1\",\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":\\\"ls\\\"}\"}],"                  \
    "\"finish_reason\":\"tool_calls\",\"usage\":{\"input_tokens\":10,\"output_tokens\":5}}}\n"
#define CALL1                                                                                      \
    "{\"kind\":\"tool_call\",\"call\":{\"id\":\"c1\",\"name\":\"shell\"},\"result\":\"A\"}\n"
#define TURN2                                                                                      \
    "{\"kind\":\"model_turn\",\"turn\":2,\"response\":{\"text\":\"done\",\"finish_reason\":"       \
    "\"stop\"}}\n"
#define RUNLINE "{\"kind\":\"run\",\"id\":\"run_x\",\"prompt\":\"the prompt\"}\n"
#define TRANSCRIPT RUNLINE TURN1 CALL1 TURN2

static int parse(const char *text, size_t len, char *err, size_t errlen)
{
    struct eph_replay_record rec;
    assert_int_equal(eph_replay_record_init(&rec, "t"), 0);
    int rc = eph_replay_record_parse(&rec, text, len, err, errlen);
    eph_replay_record_release(&rec);
    return rc;
}

static void test_record_parse(void **state)
{
    (void)state;
    struct eph_replay_record rec;
    char err[256] = "";
    assert_int_equal(eph_replay_record_init(&rec, "t"), 0);
    const char *text = TRANSCRIPT "\n   \n{\"kind\":\"divergence\"}\n{\"kind\":\"later\",\"x\":1}";
    assert_int_equal(eph_replay_record_parse(&rec, text, strlen(text), err, sizeof(err)), 0);
    assert_int_equal(json_array_size(rec.turns), 2);
    assert_string_equal(json_string_value(json_object_get(rec.results, "c1")), "A");
    assert_string_equal(rec.prompt, "the prompt");
    assert_true(rec.exported);
    eph_replay_record_release(&rec);

    /* Hostile input: each a clear error naming the line, never a crash. */
    const char *bad[][2] = {
        {RUNLINE "{not json\n", "line 2"},
        {RUNLINE "[1,2]\n", "line 2"},
        {"{\"no\":\"kind\"}\n", "line 1"},
        {"{\"kind\":\"model_turn\"}\n", "response"},
        {"{\"kind\":\"model_turn\",\"response\":{\"tool_calls\":{}}}\n", "tool_calls"},
        {"{\"kind\":\"model_turn\",\"response\":{\"tool_calls\":[{\"id\":1,\"name\":\"s\"}]}}\n",
         "tool call 1"},
        {"{\"kind\":\"model_turn\",\"response\":{\"text\":42}}\n", "text"},
        {"{\"kind\":\"model_turn\",\"response\":{\"usage\":[]}}\n", "usage"},
        {"{\"kind\":\"tool_call\",\"call\":{},\"result\":\"x\"}\n", "line 1"},
        {"{\"kind\":\"tool_call\",\"call\":{\"id\":\"a\"},\"result\":{}}\n", "line 1"},
        {"{\"kind\":\"run\",\"prompt\":7}\n", "prompt"},
        {"{\"kind\":\"run\",\"kind\":\"run\"}\n", "line 1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(parse(bad[i][0], strlen(bad[i][0]), err, sizeof(err)), -EINVAL);
        if (!strstr(err, bad[i][1]))
            fail_msg("case %zu: '%s' does not say '%s'", i, err, bad[i][1]);
    }
    /* A NUL inside a line is not JSON. */
    const char nul[] = "{\"kind\":\"run\"}\0x\n";
    assert_int_equal(parse(nul, sizeof(nul) - 1, err, sizeof(err)), -EINVAL);

    /* A line over its cap, and a transcript over its cap. */
    size_t n = EPH_REPLAY_LINE_MAX + 10;
    char *huge = malloc(n + 1);
    assert_non_null(huge);
    memset(huge, ' ', n);
    memcpy(huge, "{\"kind\":\"run\",\"p\":\"", 19);
    huge[n - 2] = '"';
    huge[n - 1] = '}';
    huge[n] = '\0';
    assert_int_equal(parse(huge, n, err, sizeof(err)), -EMSGSIZE);
    assert_non_null(strstr(err, "line 1"));
    assert_int_equal(parse(huge, EPH_REPLAY_TEXT_MAX + 1, err, sizeof(err)), -EMSGSIZE);
    free(huge);
}

struct seen {
    unsigned n;
    unsigned turn;
    char call_id[32], tool[32], original[32], replayed[32];
};

static void on_divergence(void *ctx, const struct eph_replay_divergence *d)
{
    struct seen *s = ctx;
    s->n++;
    s->turn = d->turn;
    snprintf(s->call_id, sizeof(s->call_id), "%s", d->call_id);
    snprintf(s->tool, sizeof(s->tool), "%s", d->tool);
    snprintf(s->original, sizeof(s->original), "%s", d->original);
    snprintf(s->replayed, sizeof(s->replayed), "%s", d->replayed);
}

static int call(struct eph_model *m, json_t *messages, struct eph_model_response *resp, char *err)
{
    json_t *tools = json_array();
    struct eph_model_request req = {.messages = messages, .tools = tools, .prompt = "p"};
    int rc = m->ops->call(m, &req, resp, err, 256);
    json_decref(tools);
    return rc;
}

static void test_replay_model(void **state)
{
    (void)state;
    struct eph_replay_record rec;
    char err[256];
    assert_int_equal(eph_replay_record_init(&rec, "run_x"), 0);
    assert_int_equal(eph_replay_record_parse(&rec, TRANSCRIPT, strlen(TRANSCRIPT), err, 256), 0);
    struct eph_model_config cfg = {.id = "m", .provider = "replay"};
    struct seen seen = {0};
    struct eph_replay_hooks hooks = {on_divergence, &seen};
    struct eph_model *m;
    assert_int_equal(eph_replay_model_open(&rec, &cfg, &hooks, &m), 0);

    json_t *messages = json_loads("[{\"role\":\"system\",\"content\":\"s\"},"
                                  "{\"role\":\"user\",\"content\":\"p\"}]",
                                  0, NULL);
    struct eph_model_response resp;
    assert_int_equal(call(m, messages, &resp, err), 0);
    assert_true(resp.replayed);
    assert_int_equal(resp.ncalls, 1);
    assert_string_equal(resp.calls[0].id, "c1");
    assert_string_equal(resp.calls[0].name, "shell");
    assert_string_equal(resp.calls[0].arguments, "{\"command\":\"ls\"}");
    /* Nothing billed: no usage, and the request never went out. */
    assert_int_equal(resp.input_tokens + resp.output_tokens, 0);
    assert_false(resp.sent);
    eph_model_response_release(&resp);

    /* The tool's result differs from the recorded "A": one divergence, reported once. */
    json_array_append_new(messages, json_loads("{\"role\":\"assistant\",\"content\":null,"
                                               "\"tool_calls\":[{\"id\":\"c1\",\"name\":\"shell\","
                                               "\"arguments\":\"{}\"}]}",
                                               0, NULL));
    json_array_append_new(messages, json_loads("{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                                               "\"name\":\"shell\",\"content\":\"B\"}",
                                               0, NULL));
    assert_int_equal(call(m, messages, &resp, err), 0);
    assert_string_equal(resp.content, "done");
    assert_int_equal(resp.ncalls, 0);
    eph_model_response_release(&resp);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.turn, 1);
    assert_string_equal(seen.call_id, "c1");
    assert_string_equal(seen.tool, "shell");
    assert_string_equal(seen.original, "A");
    assert_string_equal(seen.replayed, "B");

    /* Past the record: replay_exhausted (-ENODATA), the divergence not reported again. */
    json_array_append_new(messages, json_loads("{\"role\":\"assistant\",\"content\":\"x\","
                                               "\"tool_calls\":[]}",
                                               0, NULL));
    assert_int_equal(call(m, messages, &resp, err), -ENODATA);
    assert_non_null(strstr(err, "turn 3"));
    eph_model_response_release(&resp);
    assert_int_equal(seen.n, 1);
    json_decref(messages);
    m->ops->free(m);

    /* An equal result is no divergence. */
    assert_int_equal(eph_replay_record_init(&rec, "run_x"), 0);
    assert_int_equal(eph_replay_record_parse(&rec, TRANSCRIPT, strlen(TRANSCRIPT), err, 256), 0);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(eph_replay_model_open(&rec, &cfg, &hooks, &m), 0);
    messages = json_loads("[{\"role\":\"user\",\"content\":\"p\"},{\"role\":\"assistant\","
                          "\"tool_calls\":[]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                          "\"name\":\"shell\",\"content\":\"A\"}]",
                          0, NULL);
    assert_int_equal(call(m, messages, &resp, err), 0);
    eph_model_response_release(&resp);
    assert_int_equal(seen.n, 0);
    json_decref(messages);
    m->ops->free(m);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_provider_reads_exported_transcripts(void **state)
{
    (void)state;
    char dir[] = "/tmp/eph-replay-XXXXXX", path[128], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/seed.jsonl", dir);
    write_file(path, TRANSCRIPT);
    struct eph_model_config cfg = {.id = "r", .provider = "replay", .transcripts = dir};
    struct eph_model *m;
    assert_int_equal(eph_model_replay_ops.open(&cfg, &m, err, sizeof(err)), 0);
    json_t *messages = json_loads("[{\"role\":\"user\",\"content\":\"p\"}]", 0, NULL);
    json_t *tools = json_array();
    struct eph_model_response resp;
    /* By name (the run's metadata "transcript"), charged its recorded usage. */
    struct eph_model_request req = {.messages = messages, .tools = tools, .recording = "seed"};
    assert_int_equal(m->ops->call(m, &req, &resp, err, sizeof(err)), 0);
    assert_int_equal(resp.ncalls, 1);
    assert_int_equal(resp.input_tokens, 10);
    assert_true(resp.sent);
    eph_model_response_release(&resp);
    /* By prompt, from the transcript's run line. */
    req.recording = NULL;
    req.prompt = "the prompt";
    assert_int_equal(m->ops->call(m, &req, &resp, err, sizeof(err)), 0);
    eph_model_response_release(&resp);
    req.recording = "later";
    assert_int_equal(m->ops->call(m, &req, &resp, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "later"));
    eph_model_response_release(&resp);

    /* A new recording, and a bad one, dropped in while the model serves: the new one is used
     * at the next run's first call without a restart; the bad one is skipped. */
    snprintf(path, sizeof(path), "%s/later.jsonl", dir);
    write_file(path, RUNLINE TURN2);
    snprintf(path, sizeof(path), "%s/broken.jsonl", dir);
    write_file(path, "{\"kind\":\"model_turn\"}\n");
    struct timespec later[2] = {{.tv_sec = 12345}, {.tv_sec = 12345}};
    assert_int_equal(utimensat(AT_FDCWD, dir, later, 0), 0);
    assert_int_equal(m->ops->call(m, &req, &resp, err, sizeof(err)), 0);
    assert_string_equal(resp.content, "done");
    eph_model_response_release(&resp);
    req.recording = "broken";
    assert_int_equal(m->ops->call(m, &req, &resp, err, sizeof(err)), -ENOENT);
    eph_model_response_release(&resp);
    m->ops->free(m);

    /* At start-up, the bad recording stops the model, with its name and line. */
    assert_int_equal(eph_model_replay_ops.open(&cfg, &m, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "broken.jsonl"));
    assert_non_null(strstr(err, "line 1"));
    unlink(path);

    /* transcripts naming one file: every run replays it. */
    snprintf(path, sizeof(path), "%s/seed.jsonl", dir);
    cfg.transcripts = path;
    assert_int_equal(eph_model_replay_ops.open(&cfg, &m, err, sizeof(err)), 0);
    req.recording = NULL;
    req.prompt = "anything";
    assert_int_equal(m->ops->call(m, &req, &resp, err, sizeof(err)), 0);
    assert_int_equal(resp.ncalls, 1);
    eph_model_response_release(&resp);
    m->ops->free(m);

    json_decref(messages);
    json_decref(tools);
    unlink(path);
    snprintf(path, sizeof(path), "%s/later.jsonl", dir);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transcript_lines),
        cmocka_unit_test(test_transcript_run_line),
        cmocka_unit_test(test_record_parse),
        cmocka_unit_test(test_replay_model),
        cmocka_unit_test(test_provider_reads_exported_transcripts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
