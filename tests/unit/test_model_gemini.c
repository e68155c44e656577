/* The gemini provider's request through its table entry (providers.h): the neutral conversation
 * as Gemini's contents (user and model turns, functionCall and functionResponse parts), the
 * tools as functionDeclarations, the key in x-goog-api-key and never in the URL, and the upstream
 * name in the path. Its answers, streams and error bodies are in the fixture suite
 * (test_model_fixtures, tests/fixtures/providers/gemini/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/model.h"
#include "agent/providers.h"

static void test_request(void **state)
{
    (void)state;
    setenv("EPH_TEST_GEMINI_KEY", "AIza-test-key-0123456789", 1);
    struct eph_model_config cfg = {.id = "gemini/gemini-2.5-flash",
                                   .provider = "gemini",
                                   .base_url = "http://127.0.0.1:9/v1beta",
                                   .api_key_env = "EPH_TEST_GEMINI_KEY",
                                   .upstream_model = "gemini-2.5-flash",
                                   .max_output_tokens = 512};
    struct eph_model *m = NULL;
    char err[256] = "";
    assert_int_equal(eph_provider_gemini.ops.open(&cfg, &m, err, sizeof(err)), 0);
    const struct eph_http_model *hm = (const struct eph_http_model *)m;
    assert_string_equal(hm->url,
                        "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:generateContent");
    assert_null(strstr(hm->url, "AIza"));
    assert_null(strstr(hm->stream_url, "AIza"));
    assert_string_equal(eph_provider_gemini.auth_header, "x-goog-api-key: ");

    json_t *messages = json_pack(
        "[{s:s, s:s}, {s:s, s:s}, {s:s, s:n, s:[{s:s, s:s, s:s}]}, {s:s, s:s, s:s, s:s}]", "role",
        "system", "content", "Be brief.", "role", "user", "content", "List the files.", "role",
        "assistant", "content", "tool_calls", "id", "call_1", "name", "shell", "arguments",
        "{\"command\":\"ls\"}", "role", "tool", "tool_call_id", "call_1", "name", "shell",
        "content", "{\"exit_code\":0,\"stdout\":\"a.txt\\n\"}");
    json_t *tools = json_pack("[{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}]", "name", "shell",
                              "description", "Run a command", "parameters", "type", "object",
                              "properties", "command", "type", "string", "required", "command");
    assert_non_null(messages);
    assert_non_null(tools);
    struct eph_model_request req = {.messages = messages, .tools = tools, .max_tokens = 100};
    int rc = 0;
    char *body = eph_provider_gemini.build(hm, &req, &rc, err, sizeof(err));
    assert_non_null(body);
    json_t *b = json_loads(body, 0, NULL);
    assert_non_null(b);
    /* The system prompt apart, as Gemini wants it. */
    assert_string_equal(
        json_string_value(json_object_get(
            json_array_get(json_object_get(json_object_get(b, "systemInstruction"), "parts"), 0),
            "text")),
        "Be brief.");
    json_t *contents = json_object_get(b, "contents");
    assert_int_equal(json_array_size(contents), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(contents, 0), "role")),
                        "user");
    json_t *model_turn = json_array_get(contents, 1);
    assert_string_equal(json_string_value(json_object_get(model_turn, "role")), "model");
    json_t *fc =
        json_object_get(json_array_get(json_object_get(model_turn, "parts"), 0), "functionCall");
    assert_string_equal(json_string_value(json_object_get(fc, "name")), "shell");
    assert_string_equal(json_string_value(json_object_get(json_object_get(fc, "args"), "command")),
                        "ls");
    json_t *fr =
        json_object_get(json_array_get(json_object_get(json_array_get(contents, 2), "parts"), 0),
                        "functionResponse");
    assert_string_equal(json_string_value(json_object_get(fr, "name")), "shell");
    assert_non_null(json_object_get(fr, "response"));
    json_t *decl = json_array_get(
        json_object_get(json_array_get(json_object_get(b, "tools"), 0), "functionDeclarations"), 0);
    assert_string_equal(json_string_value(json_object_get(decl, "name")), "shell");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "generationConfig"),
                                                        "maxOutputTokens")),
                     100);
    /* The key is in no part of the body either. */
    assert_null(strstr(body, "AIza"));
    json_decref(b);
    free(body);
    json_decref(messages);
    json_decref(tools);
    m->ops->free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
