/*
 * clock.h - the two clocks: monotonic for durations and deadlines (never goes back), real time for
 * timestamps shown to people. Durations, costs and deadlines always use the monotonic clock.
 */
#ifndef EPH_CLOCK_H
#define EPH_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t eph_clock_mono_ns(void);
/* Milliseconds since the Unix epoch on CLOCK_REALTIME. */
int64_t eph_clock_real_ms(void);
/* "2026-10-07T15:01:48.120Z"; out needs 25 bytes. Returns out. */
char *eph_clock_format_iso8601(int64_t ms, char *out, size_t outlen);
/* Fills ts with the absolute CLOCK_MONOTONIC time mono_ns (for pthread_cond_timedwait with a
 * monotonic condition variable). */
struct timespec;
void eph_clock_timespec(uint64_t mono_ns, struct timespec *ts);

#endif
