/*
 * fake_sandbox.h - a sandbox backend for unit tests, built on the generic guest layer
 * (src/sandbox/backend.h): only boot and release are fake.
 *
 * Boot starts the real ephemeral-init on the host, without isolation, in a fresh PID and network
 * namespace only (so that init's "kill everything" at its end reaches nothing else, and its proxy
 * listener cannot collide with the host's ports), with its run directory made on the host under
 * /tmp. Everything else - the guest protocol, exec, files, caps, interrupt, destroy - is the code
 * the real backends run. It needs root (or CAP_SYS_ADMIN) for the PID namespace, and the init
 * binary: eph_fake_sandbox_config() finds it in $BUILD.
 *
 * Test-only: it is never in the backend table and never linked into ephemerald.
 */
#ifndef EPH_TESTS_FAKE_SANDBOX_H
#define EPH_TESTS_FAKE_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "sandbox/sandbox.h"

extern const struct eph_sandbox_ops eph_fake_sandbox_ops;

/* A config for the fake: init from $BUILD (or ./build), no image. init_buf holds the path. 0, or
 * -ENOENT with a reason in why when the fake cannot run here. */
int eph_fake_sandbox_config(struct eph_sandbox_config *cfg, char *init_buf, size_t init_cap,
                            char *why, size_t whylen);

#endif
