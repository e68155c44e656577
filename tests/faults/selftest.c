/* The injector's self-test driver: copies a string with two allocations and reports a failure
 * as an error (exit 2). FAULT_PLANT_CRASH=1 plants a crash on the failure path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((weak)) void fault_arm(void);

int main(void)
{
    if (fault_arm != NULL)
        fault_arm();
    char *a = malloc(16);
    if (a == NULL) {
        fputs("error: out of memory\n", stderr);
        return 2;
    }
    char *b = malloc(16);
    if (b == NULL) {
        if (getenv("FAULT_PLANT_CRASH") != NULL)
            abort();
        free(a);
        fputs("error: out of memory\n", stderr);
        return 2;
    }
    free(a);
    free(b);
    return 0;
}
