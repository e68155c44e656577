/*
 * metrics.h - the process's counters and latency histograms, rendered for GET /metrics in the
 * Prometheus text format (version 0.0.4).
 *
 * Every function may be called from any thread at any time, before or without any set-up: the
 * state is static. Observations are lock-free (atomics) except HTTP requests, whose labelled
 * counters sit in a small table under a mutex. Labels come from fixed vocabularies (methods and
 * route patterns chosen by the caller, never a raw URL), so the number of series stays bounded.
 */
#ifndef EPH_METRICS_H
#define EPH_METRICS_H

#include <stdint.h>

#include "common/buf.h"

/* Sandbox creation to ready (ephemeral_sandbox_start_seconds). */
void eph_metrics_observe_sandbox_start(uint64_t ns);
/* One command in the sandbox, start to exit (ephemeral_exec_seconds). */
void eph_metrics_observe_exec(uint64_t ns);
/* One model call, retries included (ephemeral_model_call_seconds). */
void eph_metrics_observe_model_call(uint64_t ns);
/* One HTTP request, first byte to completion. method: the request's verb (anything but the known
 * ones counts as "OTHER"); route: a pattern such as "/v1/runs/{id}". */
void eph_metrics_observe_http(const char *method, const char *route, unsigned status, uint64_t ns);

/* One webhook attempt's outcome (ephemeral_webhook_deliveries_total): "delivered", "retried"
 * (failed, tried again later) or "failed" (given up); anything else counts as "failed". */
void eph_metrics_count_webhook(const char *outcome);

/* Appends every counter and histogram above to out. 0 or -EMSGSIZE / -ENOMEM from the buffer. */
int eph_metrics_render(struct eph_buf *out) __attribute__((warn_unused_result));

/* Forgets every observation (unit tests). */
void eph_metrics_reset(void);

#endif
