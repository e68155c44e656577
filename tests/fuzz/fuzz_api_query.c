/* libFuzzer driver: what a request carries beside its body, through the API's validation: the
 * query string of each route (split on '&' and '=' as the server's parser hands it over) and the
 * Prefer header. Checks that an accepted query only holds values in their ranges and that an
 * accepted Prefer: wait is within the maximum. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "common/id.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const routes[] = {"/v1/runs", "/v1/runs/{id}/events", "/v1/balance",
                                     "/v1/runs/{id}", "/healthz"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    const char *route = routes[data[0] % (sizeof(routes) / sizeof(routes[0]))];
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';

    /* The whole input as a Prefer header. */
    struct eph_api_error e;
    unsigned wait = 12345;
    if (eph_api_validate_prefer(s, EPH_API_WAIT_MAX, &wait, &e) == 0) {
        if (wait > EPH_API_WAIT_MAX)
            abort();
    } else if (e.status != 400 || strcmp(e.param, "Prefer") != 0) {
        abort();
    }

    /* ... and as a query string. */
    const char *names[16], *values[16];
    size_t n = 0;
    for (char *save = NULL, *p = strtok_r(s, "&", &save); p && n < 16;
         p = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        names[n] = p;
        values[n++] = eq ? eq + 1 : NULL;
    }
    struct eph_api_query q;
    if (eph_api_validate_query(route, data[0] & 0x80 ? "POST" : "GET", n, names, values, &q, &e) ==
        0) {
        if (q.limit < 1 || q.limit > 100 || (q.after && !eph_id_is_run(q.after)))
            abort();
        if (n && ((data[0] & 0x80) || strcmp(route, "/v1/balance") == 0))
            abort(); /* no parameter is known there */
    } else if (e.status != 400 || !e.message[0]) {
        abort();
    }
    free(s);
    return 0;
}
