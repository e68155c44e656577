/* libFuzzer driver: an Anthropic Messages answer, plain JSON or an event stream, parsed as
 * src/agent/anthropic.c parses what a server sends back. Checks the promises the agent loop
 * relies on (see fuzz_model_answer.h), not only the absence of crashes and leaks. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_model_answer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_answer(&eph_provider_anthropic, data, size);
}
