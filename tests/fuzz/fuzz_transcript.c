/* libFuzzer driver: an exported transcript read back (agent/replay.c), as the replay provider
 * reads a file dropped in its folder. Checks the promises: a clear error or a record whose every
 * part has the type replay relies on, and a replay of that record answering its first turn with
 * exactly the recorded tool calls, never a crash. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eph_replay_record rec;
    if (eph_replay_record_init(&rec, "fuzz"))
        return 0;
    char err[256] = "";
    int rc = eph_replay_record_parse(&rec, (const char *)data, size, err, sizeof(err));
    if (rc) {
        if (rc != -EINVAL && rc != -EMSGSIZE && rc != -E2BIG && rc != -ENOMEM)
            abort();
        if (!err[0] && rc != -ENOMEM)
            abort(); /* every refusal says why */
        eph_replay_record_release(&rec);
        return 0;
    }
    if (json_array_size(rec.turns) > EPH_REPLAY_TURNS_MAX)
        abort();
    size_t i;
    json_t *t;
    json_array_foreach(rec.turns, i, t) if (!json_is_object(t)) abort();
    const char *key;
    json_t *v;
    json_object_foreach(rec.results, key, v) if (!json_is_string(v)) abort();
    json_t *first = json_incref(json_array_get(rec.turns, 0));
    struct eph_model_config cfg = {.id = "fuzz", .provider = "replay"};
    struct eph_model *m;
    if (eph_replay_model_open(&rec, &cfg, NULL, &m)) {
        json_decref(first);
        return 0;
    }
    json_t *messages = json_pack("[{s:s, s:s}]", "role", "user", "content", "p");
    json_t *tools = json_array();
    struct eph_model_request req = {.messages = messages, .tools = tools};
    struct eph_model_response resp;
    rc = m->ops->call(m, &req, &resp, err, sizeof(err));
    if (!first && rc != -ENODATA)
        abort(); /* an empty record is exhausted at once */
    if (first && rc == 0 && resp.ncalls != json_array_size(json_object_get(first, "tool_calls")))
        abort();
    if (resp.input_tokens || resp.output_tokens || resp.sent)
        abort(); /* a replay bills nothing */
    eph_model_response_release(&resp);
    m->ops->free(m);
    json_decref(messages);
    json_decref(tools);
    json_decref(first);
    return 0;
}
