/* Allocation-failure injector (docs/HACKING.md, "Allocation failures"): preloaded into a driver,
 * it fails the Nth allocation (FAULT_FAIL_AT=N) counted from the driver's call of fault_arm(),
 * so only the operation under test is counted, not the start-up of its libraries. A hit is
 * written to stderr as "fault: injected failure at allocation N". glibc only (__libc_*). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);

void fault_arm(void);
int fault_hit(void);

static __thread int armed;
static __thread long counted;
static __thread int hit;

void fault_arm(void)
{
    armed = 1;
    counted = 0;
    hit = 0;
}

int fault_hit(void)
{
    return hit;
}

static int should_fail(void)
{
    if (!armed)
        return 0;
    const char *at = getenv("FAULT_FAIL_AT");
    if (at == NULL || ++counted != atol(at))
        return 0;
    hit = 1;
    armed = 0;
    fprintf(stderr, "fault: injected failure at allocation %ld\n", counted);
    errno = ENOMEM;
    return 1;
}

void *malloc(size_t size)
{
    return should_fail() ? NULL : __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    return should_fail() ? NULL : __libc_realloc(p, size);
}
