/* Shared checks of the model answer fuzz drivers (fuzz_openai_response.c,
 * fuzz_anthropic_response.c, fuzz_gemini_response.c): the promises a parsed answer makes to the
 * agent loop, the same for every provider. */
#ifndef FUZZ_MODEL_ANSWER_H
#define FUZZ_MODEL_ANSWER_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/model.h"
#include "agent/providers.h"

/* A string the agent can put in the conversation: jansson takes it (valid UTF-8, no NUL). */
static void must_be_json_string(const char *s)
{
    json_t *j = json_string(s);
    if (!j)
        abort();
    json_decref(j);
}

/* The first byte chooses plain or stream and the prior call count; the rest is the body, parsed
 * through the provider's table entry (providers.h), as a real call parses a 2xx answer. */
static int fuzz_answer(const struct eph_http_provider *p, const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool stream = data[0] & 1;
    unsigned prior = data[0] >> 1;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct eph_model_response resp;
    char err[512];
    memset(err, 'x', sizeof(err));
    int rc = eph_provider_parse_answer(p, body, len, stream, prior, &resp, err, sizeof(err));
    if (rc != 0 && rc != -EPROTO && rc != -EMSGSIZE && rc != -EIO && rc != -ENOMEM)
        abort();
    /* The message is one clean line, terminated, and never empty on error. */
    size_t elen = strnlen(err, sizeof(err));
    if (elen == sizeof(err) || (rc && elen == 0))
        abort();
    for (size_t i = 0; i < elen; i++)
        if ((unsigned char)err[i] < 0x20)
            abort();
    if (rc == 0) {
        if (!resp.finish_reason || resp.ncalls > EPH_MODEL_MAX_CALLS)
            abort();
        must_be_json_string(resp.finish_reason);
        if (resp.content)
            must_be_json_string(resp.content);
        for (size_t i = 0; i < resp.ncalls; i++) {
            const struct eph_tool_call *c = &resp.calls[i];
            if (!c->id || !c->id[0] || !c->name || !c->arguments)
                abort();
            must_be_json_string(c->id);
            must_be_json_string(c->name);
            must_be_json_string(c->arguments);
        }
    }
    eph_model_response_release(&resp);
    return 0;
}

#endif
