/* What the harness's self-test fails calls in (tests/blackbox/faults_selftest.sh): copies two
 * strings with two allocations. FAULT_PLANT picks a bug for the second one's failure path:
 * "crash" uses the NULL, "leak" drops the first copy, "hang" never returns. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sample_pair(const char *a, const char *b, char **oa, char **ob);

int sample_pair(const char *a, const char *b, char **oa, char **ob)
{
    char *x = strdup(a);
    if (!x)
        return -ENOMEM;
    size_t n = strlen(b) + 1;
    char *y = malloc(n);
    if (!y) {
        const char *plant = getenv("FAULT_PLANT");
        if (plant && strcmp(plant, "crash") == 0) {
            char *volatile p = y;
            p[0] = 0;
        }
        while (plant && strcmp(plant, "hang") == 0)
            pause();
        if (!plant || strcmp(plant, "leak") != 0)
            free(x);
        return -ENOMEM;
    }
    memcpy(y, b, n);
    *oa = x;
    *ob = y;
    return 0;
}
