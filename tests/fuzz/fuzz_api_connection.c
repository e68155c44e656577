/* libFuzzer driver: a connection's description (POST /v1/connections, `ephemerald admin
 * connection add`) through the connection rules, without sealing. Checks the promises of an
 * accepted connection: a name from a-z0-9_-, a base_url that is http(s) with a host and no
 * userinfo, no control character anywhere a header could be injected. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The field names the structure-aware mutator adds (json_mutator.h). */
#define JSON_MUTATOR_KEYS                                                                          \
    {                                                                                              \
        "name", "base_url", "headers", "query", "methods", "path_prefixes"                         \
    }
#include "json_mutator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body =
        json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (!body)
        return 0;
    struct eph_connection c;
    const char *param = NULL;
    char err[256] = "";
    int rc = eph_api_connection_check(body, &c, &param, err, sizeof(err));
    if (rc) {
        if (rc == -22 && (!param || !err[0]))
            abort();
        json_decref(body);
        return 0;
    }
    if (!c.name[0] || strspn(c.name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(c.name))
        abort();
    const char *host = strncmp(c.base_url, "https://", 8) == 0  ? c.base_url + 8
                       : strncmp(c.base_url, "http://", 7) == 0 ? c.base_url + 7
                                                                : NULL;
    if (!host || !*host)
        abort();
    size_t authority = strcspn(host, "/?#");
    if (memchr(host, '@', authority))
        abort();
    for (const char *p = c.base_url; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            abort();
    if (json_array_size(c.methods) == 0 || json_array_size(c.path_prefixes) == 0)
        abort();
    eph_connection_release(&c);
    json_decref(body);
    return 0;
}
