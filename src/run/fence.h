/*
 * fence.h - the fence of a shared store's runs (fence.c; docs/RUN.md, "Fencing").
 */
#ifndef EPH_FENCE_H
#define EPH_FENCE_H

#include "run/live.h"
#include "run/service.h"

/* The fence (fence.c, docs/RUN.md "Fencing"), on shared stores only: a watchdog process of its
 * own, which needs neither the store nor this process to run, kills each sandbox whose run's
 * fence (eph_live_set_fence) has passed; and a thread that pauses a sandbox shortly before its
 * fence while the lease cannot be renewed (so that a store outage does not kill healthy runs),
 * keeps the watchdog from killing it while this process is alive to watch, and resumes it when the
 * lease is renewed. start: 0 on a single-node store (nothing started). arm: from when the
 * sandbox exists (after eph_live_attach_sandbox); disarm: before it is destroyed (a paused sandbox
 * is killed then). Both do nothing without a fence. */
int eph_fence_start(struct eph_service *svc) __attribute__((warn_unused_result));
void eph_fence_stop(struct eph_service *svc);
void eph_fence_arm(struct eph_fence *f, struct eph_live *l, struct eph_sandbox *sb);
void eph_fence_disarm(struct eph_fence *f, struct eph_live *l);
/* Sandboxes the watchdog killed at their fence, since start (tests, metrics). */
unsigned eph_fence_kills(struct eph_fence *f);

#endif
