#include "common/clock.h"

#include <stdio.h>
#include <time.h>

uint64_t eph_clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t eph_clock_real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *eph_clock_format_iso8601(int64_t ms, char *out, size_t outlen)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
    return out;
}

void eph_clock_timespec(uint64_t mono_ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(mono_ns / 1000000000u);
    ts->tv_nsec = (long)(mono_ns % 1000000000u);
}
