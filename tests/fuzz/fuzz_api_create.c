/* libFuzzer driver: the create-run body (POST /v1/runs) through the API's validation, without a
 * socket. Checks the promises of an accepted body, not just the absence of crashes: a prompt of 1
 * byte to 64 KiB without NUL, a positive budget, a timeout in range, at most 100 files whose paths
 * all pass the shared path rule and can all be files at once, at most 10 MiB of content; and a
 * refusal always says why. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "common/id.h"
#include "common/text.h"
#include "daemon/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The field names the structure-aware mutator adds (json_mutator.h). */
#define JSON_MUTATOR_KEYS                                                                          \
    {                                                                                              \
        "prompt", "model", "shell", "web", "connections", "files", "timeout_seconds",              \
            "max_cost_micros", "zero_data_retention", "metadata", "replay_of", "allow", "path",    \
            "content", "transcript"                                                                \
    }
#include "json_mutator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct eph_config cfg;
    static int ready;
    if (!ready) {
        if (eph_config_defaults(&cfg))
            abort();
        ready = 1;
    }
    json_t *body =
        json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (!body)
        return 0;
    struct eph_api_create c;
    struct eph_api_error e;
    memset(&e, 0, sizeof(e));
    int rc = eph_api_validate_create(body, &cfg, &c, &e);
    if (rc) {
        if (e.status != 400 && e.status != 500)
            abort();
        if (!e.type || !e.code || !e.message[0] || !memchr(e.param, 0, sizeof(e.param)))
            abort();
        json_decref(body);
        return 0;
    }
    /* A replay's prompt may be left to the original's; its replay_of is a run id. */
    if (c.replay_of && !eph_id_is_run(c.replay_of))
        abort();
    size_t plen = c.prompt ? strlen(c.prompt) : c.replay_of ? 1 : 0;
    if (plen == 0 || plen > EPH_API_PROMPT_MAX || c.max_cost <= 0 || c.timeout < 1 ||
        c.timeout > 3600 || !c.model)
        abort();
    size_t n = c.files ? json_array_size(c.files) : 0, total = 0;
    if (n > EPH_API_FILES_MAX)
        abort();
    const char *paths[EPH_API_FILES_MAX];
    for (size_t i = 0; i < n; i++) {
        json_t *f = json_array_get(c.files, i);
        paths[i] = json_string_value(json_object_get(f, "path"));
        if (!paths[i] || eph_text_file_path_error(paths[i], strlen(paths[i])))
            abort();
        total += (size_t)json_integer_value(json_object_get(f, "size"));
    }
    size_t a, b;
    if (total > EPH_API_FILES_BYTES_MAX || eph_text_file_paths_conflict(paths, n, &a, &b))
        abort();
    eph_api_create_release(&c);
    json_decref(body);
    return 0;
}
