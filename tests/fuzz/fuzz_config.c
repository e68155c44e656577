/* libFuzzer driver: the server's configuration file (ephemerald --config) parsed from memory over
 * the defaults. Checks that an accepted file leaves a configuration the server can use (its
 * default model is one of its models) and that a refusal says why. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eph_config cfg;
    if (eph_config_defaults(&cfg))
        abort();
    char err[512] = "";
    int rc = eph_config_load_buffer(&cfg, (const char *)data, size, "fuzz.json", err, sizeof(err));
    if (rc == 0 && !eph_config_model(&cfg, cfg.default_model))
        abort();
    if (rc && rc != -12 && !err[0])
        abort();
    eph_config_release(&cfg);
    return 0;
}
