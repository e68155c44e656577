/*
 * sandbox.c - the generic layer: the backend table, backend choice, defaults, results.
 *
 * Adding a backend is adding its file and one line in `backends` below, in order of strength
 * (strongest first), which is the order "auto" tries them in.
 */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "sandbox/gvisor/gvisor.h"
#include "sandbox/microvm/microvm.h"
#include "sandbox/namespaces/namespaces.h"

static const struct eph_sandbox_ops *const backends[] = {
    &eph_sandbox_microvm_ops, /* QEMU microvm + KVM, probed by booting a guest; never on TCG */
    &eph_sandbox_gvisor_ops,
    &eph_sandbox_namespaces_ops,
};

#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

const struct eph_sandbox_ops *eph_sandbox_backend(const char *name)
{
    for (size_t i = 0; i < NBACKENDS; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

bool eph_sandbox_records_commands(const struct eph_sandbox_ops *ops)
{
    return ops && ops->records_commands && ops->records_commands();
}

int eph_sandbox_choose(const struct eph_sandbox_config *cfg, const struct eph_sandbox_ops **out,
                       char *why, size_t whylen)
{
    const char *want = cfg->backend && cfg->backend[0] ? cfg->backend : "auto";
    char reason[256];
    if (strcmp(want, "auto") != 0) {
        const struct eph_sandbox_ops *ops = eph_sandbox_backend(want);
        if (!ops) {
            snprintf(why, whylen, "unknown sandbox backend '%s'", want);
            return -ENOENT;
        }
        reason[0] = '\0';
        int rc = ops->probe(cfg, reason, sizeof(reason));
        if (rc) {
            snprintf(why, whylen, "sandbox backend '%s' does not work here: %s", want, reason);
            return rc;
        }
        *out = ops;
        return 0;
    }
    int first_rc = -ENOENT;
    size_t used = 0;
    why[0] = '\0';
    for (size_t i = 0; i < NBACKENDS; i++) {
        reason[0] = '\0';
        int rc = backends[i]->probe(cfg, reason, sizeof(reason));
        if (rc == 0) {
            *out = backends[i];
            return 0;
        }
        if (first_rc == -ENOENT)
            first_rc = rc;
        EPH_DEBUG("sandbox", "backend '%s' unavailable: %s", backends[i]->name, reason);
        if (used < whylen) {
            int n = snprintf(why + used, whylen - used, "%s%s: %s", used ? "; " : "",
                             backends[i]->name, reason);
            if (n > 0)
                used += (size_t)n;
        }
    }
    return first_rc;
}

void eph_sandbox_limits_default(struct eph_sandbox_limits *l)
{
    l->vcpus = 1;
    l->memory_mib = 512;
    l->pids = 256;
    l->disk_mib = 1024;
    l->nofile = 1024;
    l->fsize_bytes = (uint64_t)l->disk_mib << 20;
}

void eph_exec_result_init(struct eph_exec_result *r)
{
    memset(r, 0, sizeof(*r));
    eph_buf_init(&r->out, 0);
    eph_buf_init(&r->err, 0);
}

void eph_exec_result_release(struct eph_exec_result *r)
{
    eph_buf_release(&r->out);
    eph_buf_release(&r->err);
}

void eph_sandbox_listing_release(struct eph_sandbox_listing *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].path);
        free(l->v[i].target);
    }
    free(l->v);
    memset(l, 0, sizeof(*l));
}

int eph_sandbox_cleanup_orphans(void)
{
    int total = 0, first_err = 0;
    for (size_t i = 0; i < NBACKENDS; i++) {
        if (!backends[i]->cleanup_orphans)
            continue;
        int n = backends[i]->cleanup_orphans();
        if (n < 0 && !first_err)
            first_err = n;
        else if (n > 0)
            total += n;
    }
    return total ? total : first_err;
}
