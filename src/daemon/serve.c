/*
 * serve.c - `ephemerald serve`: start-up, the background reaper, and graceful shutdown.
 *
 * Start-up order: configuration, the sandbox launcher (a fork made while the process is small and
 * has one thread), store (migrations), sandbox backend (probed and logged), orphan
 * clean-up, readiness (the image, its guest agent and recipe, a real sandbox on the backend:
 * daemon/readiness.h; an unusable part stops the start-up, or the server starts not ready, as
 * "on_unready" says), models, recovery of what a dead server left, the worker pool, then the
 * listener. On
 * SIGTERM or SIGINT: refuse new runs (503), let running ones finish for the grace period, cancel
 * and settle the rest, destroy every sandbox, stop.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>
#include <sodium.h>

#include "agent/providers.h"
#include "api/api.h"
#include "api/json.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "daemon/commands.h"
#include "daemon/options.h"
#include "daemon/readiness.h"
#include "image/service.h"
#include "run/drive.h"
#include "run/cluster.h"
#include "run/egress.h"
#include "run/live.h"
#include "run/scheduler.h"
#include "run/service.h"
#include "run/worker.h"
#include "run/workers.h"
#include "sandbox/pool.h"

/* The reaper thread and its stop flag, on eph_cmd_serve's stack. */
struct reaper {
    struct eph_service *svc;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
};

/* Purges expired run logs and idempotency keys once a minute. */
static void *reaper_main(void *arg)
{
    struct reaper *rp = arg;
    struct eph_service *svc = rp->svc;
    for (;;) {
        unsigned purged = 0;
        int64_t now = eph_clock_real_ms();
        int rc = svc->store->ops->purge_logs(svc->store, now, &purged);
        if (rc)
            EPH_WARN("reaper", "purging expired logs failed: %s", eph_strerror(rc));
        else if (purged)
            EPH_INFO("reaper", "purged the logs of %u runs past retention", purged);
        svc->store->ops->idem_expire(svc->store,
                                     now - (int64_t)svc->cfg->idempotency_ttl_seconds * 1000);

        pthread_mutex_lock(&rp->lock);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ms = svc->cfg->reaper_interval_ms < 10 ? 10 : (long)svc->cfg->reaper_interval_ms;
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        while (!rp->stop)
            if (pthread_cond_timedwait(&rp->cond, &rp->lock, &ts) == ETIMEDOUT)
                break;
        bool stop = rp->stop;
        pthread_mutex_unlock(&rp->lock);
        if (stop)
            return NULL;
    }
}

static void reaper_stop(struct reaper *rp)
{
    pthread_mutex_lock(&rp->lock);
    rp->stop = true;
    pthread_cond_broadcast(&rp->cond);
    pthread_mutex_unlock(&rp->lock);
    pthread_join(rp->thread, NULL);
}

/* The configured models, opened: one that cannot open fails its runs (readiness says so), the
 * others still serve. -1 for an unknown provider or no memory. */
static int open_models(struct eph_service *svc)
{
    const struct eph_config *cfg = svc->cfg;
    char err[512];
    svc->models = calloc(cfg->nmodels, sizeof(*svc->models));
    if (!svc->models)
        return -1;
    for (size_t i = 0; i < cfg->nmodels; i++) {
        const struct eph_model_ops *ops = eph_model_provider(cfg->models[i].provider);
        if (!ops) {
            EPH_ERROR("serve", "model '%s': unknown provider '%s'", cfg->models[i].id,
                      cfg->models[i].provider);
            return -1;
        }
        err[0] = '\0';
        int rc = ops->open(&cfg->models[i], &svc->models[i], err, sizeof(err));
        if (rc) {
            EPH_WARN("serve", "model '%s' is unavailable: %s", cfg->models[i].id, err);
            svc->models[i] = NULL;
        } else if (cfg->models[i].stream && eph_model_set_stream(svc->models[i], true)) {
            EPH_WARN("serve", "model '%s': provider '%s' cannot stream", cfg->models[i].id,
                     cfg->models[i].provider);
        }
    }
    return 0;
}

/* The runs a dead server left: settled as worker_lost, or queued again. */
static void recover(struct eph_service *svc)
{
    unsigned lost = 0, requeued = 0;
    int rc = eph_recovery_run(svc, &lost, &requeued);
    if (rc)
        EPH_ERROR("serve", "recovery failed: %s", eph_strerror(rc));
    if (lost || requeued)
        EPH_WARN("serve",
                 "recovery: %u runs of a dead server settled as worker_lost, %u queued runs "
                 "resumed",
                 lost, requeued);
}

/* This node's name in leases: node_id, else the host name. */
static void node_name(struct eph_service *svc)
{
    const struct eph_config *cfg = svc->cfg;
    if (cfg->node_id && *cfg->node_id)
        snprintf(svc->node_id, sizeof(svc->node_id), "%s", cfg->node_id);
    else if (gethostname(svc->node_id, sizeof(svc->node_id) - 1) != 0 || !svc->node_id[0])
        snprintf(svc->node_id, sizeof(svc->node_id), "node");
}

/* Writes where the other nodes reach this node's API, so that they can send a sandbox's calls
 * here (docs/SANDBOXES.md); -1 for a node_url that cannot be one. */
static int node_advertise(struct eph_service *svc, struct eph_api *api)
{
    char url[512], err[256], host[256];
    if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    if (eph_api_node_url(svc->cfg->node_url, svc->cfg->listen, eph_api_port(api), host, url,
                         sizeof(url), err, sizeof(err))) {
        EPH_ERROR("serve", "config: %s", err);
        return -1;
    }
    int rc = svc->store->ops->node_put(svc->store, svc->node_id, url, eph_clock_real_ms());
    if (rc)
        EPH_WARN("serve",
                 "cannot record this node's URL (%s): other nodes cannot send its "
                 "sandboxes' calls here",
                 eph_strerror(rc));
    else
        EPH_INFO("serve", "node %s reached at %s", svc->node_id, url);
    return 0;
}

/* The sandbox launcher, before the first thread and while the process is small: it clones the
 * namespaces backend's sandboxes (docs/SANDBOX.md). Only where that backend may be chosen; a
 * server without it clones them itself. */
static void launcher_setup(const struct eph_config *cfg)
{
    const char *want = cfg->sandbox.backend ? cfg->sandbox.backend : "auto";
    if (geteuid() != 0 || (strcmp(want, "auto") != 0 && strcmp(want, "namespaces") != 0))
        return;
    int rc = eph_sandbox_launcher_start();
    if (rc)
        EPH_WARN("serve", "no sandbox launcher (sandboxes are cloned from the server): %s",
                 eph_strerror(rc));
}

/* The sandbox backend chosen, the orphans of a dead server removed, and readiness checked: -1
 * when the server must not start (not ready, and on_unready is not "serve"). */
static int sandbox_setup(struct eph_service *svc)
{
    const struct eph_config *cfg = svc->cfg;
    char err[512];
    svc->sandbox_cfg.backend = cfg->sandbox.backend;
    svc->sandbox_cfg.image = cfg->sandbox.image;
    svc->sandbox_cfg.init_path = cfg->sandbox.init_path;
    svc->sandbox_cfg.limits = cfg->sandbox.limits;
    bool refuse_unready = strcmp(cfg->on_unready, "serve") != 0;
    svc->readiness_ops = &eph_readiness_ops;
    if (eph_readiness_new(&svc->readiness))
        return -1;
    if (eph_sandbox_choose(&svc->sandbox_cfg, &svc->sandbox_ops, err, sizeof(err))) {
        /* Reported with the other parts below, which may say what is missing. */
        svc->sandbox_ops = NULL;
        eph_readiness_no_backend(svc->readiness, err);
    } else {
        EPH_INFO("serve", "sandbox backend: %s (asked for %s)", svc->sandbox_ops->name,
                 cfg->sandbox.backend);
    }
    int orphans = eph_sandbox_cleanup_orphans();
    if (orphans > 0)
        EPH_WARN("serve", "removed %d sandboxes left by a dead server", orphans);
    if (!eph_readiness_check(svc->readiness, svc)) {
        if (refuse_unready) {
            EPH_ERROR("serve", "not starting: the server would not be ready (see above; "
                               "\"on_unready\": \"serve\" starts it anyway, not ready)");
            return -1;
        }
        EPH_WARN("serve", "starting not ready: /healthz answers 503 and runs fail until the "
                          "parts above are usable");
    }
    return 0;
}

/* The warm pool (by default on the namespaces backend only), and the launcher kept only for that
 * backend: the others start runsc or QEMU, not a clone. */
static void pool_setup(struct eph_service *svc)
{
    bool ns = svc->sandbox_ops && !strcmp(svc->sandbox_ops->name, "namespaces");
    if (!ns)
        eph_sandbox_launcher_stop();
    unsigned pool = svc->cfg->sandbox.warm_pool;
    if (pool == EPH_WARM_POOL_AUTO)
        pool = ns ? 2 : 0;
    int rc;
    if (svc->sandbox_ops &&
        (rc = eph_sandbox_pool_start(svc->pool, svc->sandbox_ops, &svc->sandbox_cfg, pool)))
        EPH_WARN("serve", "no warm sandbox pool: %s", eph_strerror(rc));
}

/* A webhook event's data (run/webhooks.h): the run or the sandbox as the API serves it. */
static json_t *webhook_object(const struct eph_run *r, unsigned retention_days)
{
    return r->kind == EPH_KIND_SANDBOX ? eph_sandbox_to_json(r, retention_days)
                                       : eph_run_to_json(r, retention_days);
}

int eph_cmd_serve(int argc, char **argv)
{
    struct eph_config cfg;
    struct eph_service svc = {.run_object = webhook_object};
    int status = 1;
    char err[512];
    struct eph_api *api = NULL;
    struct reaper reaper = {
        .svc = &svc, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    bool reaper_started = false, scheduler_started = false;

    if (eph_options_load(&cfg, argc, argv, 1, NULL, NULL)) {
        eph_config_release(&cfg);
        return 2;
    }
    if (eph_config_add_key_models(&cfg)) {
        EPH_ERROR("serve", "out of memory adding the models of the keys set");
        eph_config_release(&cfg);
        return 1;
    }
    svc.cfg = &cfg;
    atomic_init(&svc.shutting_down, false);

    /* Signals are taken by sigwait in this thread only; every thread started later inherits the
     * mask. A peer closing a socket must not kill the server. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    launcher_setup(&cfg);

    if (sodium_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
        eph_live_registry_new(&svc.live) || eph_sandbox_pool_new(&svc.pool)) {
        EPH_ERROR("serve", "cannot initialise the libraries");
        goto out;
    }
    eph_options_ensure_db_dir(cfg.db);
    int rc = eph_store_open_pool(cfg.db, cfg.db_pool_size, &svc.store, err, sizeof(err));
    if (rc) {
        EPH_ERROR("serve", "%s", err);
        goto out;
    }
    /* Image builds (docs/IMAGES.md): without the apt sources to build from, none are offered. */
    if (eph_images_for_config(&cfg, svc.store, &svc.images, err, sizeof(err)))
        EPH_WARN("serve", "images cannot be built here: %s", err);

    if (sandbox_setup(&svc))
        goto out;
    pool_setup(&svc);

    if (open_models(&svc))
        goto out;

    node_name(&svc);
    EPH_INFO("serve", "node %s, store %s", svc.node_id, svc.store->ops->name);

    /* Before any run: the sockets of this server that no broker request may reach. */
    eph_egress_learn_own(&svc);
    if ((rc = eph_service_start_workers(&svc))) {
        EPH_ERROR("serve", "cannot start the worker pool: %s", eph_strerror(rc));
        goto out;
    }
    scheduler_started = true;
    recover(&svc);

    eph_api_idem_recover(&svc);

    if ((rc = eph_cluster_start(&svc))) {
        EPH_ERROR("serve", "cannot listen to the other nodes: %s", eph_strerror(rc));
        goto out;
    }

    if (pthread_create(&reaper.thread, NULL, reaper_main, &reaper) == 0)
        reaper_started = true;

    if ((rc = eph_api_start(&svc, &api, err, sizeof(err)))) {
        EPH_ERROR("serve", "%s", err);
        goto out;
    }
    EPH_INFO("serve", "listening on http://%s (%u workers)", cfg.listen, cfg.max_concurrent_runs);
    if (node_advertise(&svc, api))
        goto out;

    int sig = 0;
    sigwait(&sigs, &sig);
    EPH_INFO("serve", "signal %d: shutting down (grace %u s)", sig, cfg.shutdown_grace_seconds);
    status = 0;
out:
    atomic_store(&svc.shutting_down, true);
    if (scheduler_started)
        eph_service_stop_workers(&svc, cfg.shutdown_grace_seconds);
    eph_sandbox_pool_stop(svc.pool); /* after the workers: its thread's end kills what it created */
    eph_api_stop(api);
    if (reaper_started)
        reaper_stop(&reaper);
    for (size_t i = 0; svc.models && i < cfg.nmodels; i++)
        if (svc.models[i])
            svc.models[i]->ops->free(svc.models[i]);
    free(svc.models);
    eph_images_free(svc.images); /* kills the builds under way */
    if (svc.store)
        svc.store->ops->close(svc.store);
    /* Nothing can reach these any more: the API, the workers and the store's listener are
     * stopped. */
    eph_scheduler_free(svc.sched);
    eph_drives_free(svc.drives);
    eph_sandbox_pool_free(svc.pool);
    eph_sandbox_launcher_stop(); /* after every sandbox was made: the pool and drives are gone */
    eph_live_registry_free(svc.live);
    eph_readiness_free(svc.readiness);
    eph_config_release(&cfg);
    curl_global_cleanup();
    EPH_INFO("serve", "stopped");
    return status;
}
