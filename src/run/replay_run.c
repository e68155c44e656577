/*
 * replay_run.c - a replay_of run's model, from the original's events (see replay_run.h).
 */
#include "run/replay_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/replay.h"
#include "common/error.h"
#include "common/log.h"
#include "run/transcript.h"

struct eph_replay_run {
    struct eph_service *svc;
    struct eph_run *run;
    struct eph_live *live;
    struct eph_model_config cfg;
    struct eph_model *model;
    json_t *exchanges;
};

struct load {
    struct eph_replay_record *rec;
    json_t *lines;
    char err[200];
};

static int load_cb(const struct eph_event *e, void *ctx)
{
    struct load *l = ctx;
    json_array_clear(l->lines);
    int rc = eph_transcript_event_lines(e, l->lines);
    size_t i;
    json_t *line;
    json_array_foreach(l->lines, i, line)
    {
        if (rc)
            break;
        char why[160];
        rc = eph_replay_record_add(l->rec, line, why, sizeof(why));
        if (rc)
            snprintf(l->err, sizeof(l->err), "event %llu: %s", (unsigned long long)e->seq, why);
    }
    return rc;
}

static void diverged(void *ctx, const struct eph_replay_divergence *d)
{
    struct eph_replay_run *rr = ctx;
    rr->run->divergences++;
    json_t *data =
        json_pack("{s:I, s:s, s:s, s:s, s:s}", "turn", (json_int_t)d->turn, "call_id", d->call_id,
                  "tool", d->tool, "original", d->original, "replayed", d->replayed);
    eph_live_emit(rr->live, rr->svc->store, "replay", "replay.divergence", data,
                  "divergence in %s (turn %u)", d->tool, d->turn);
}

int eph_replay_run_open(struct eph_service *svc, struct eph_run *r, struct eph_live *live,
                        struct eph_replay_run **out, char *err, size_t errlen)
{
    struct eph_store *st = svc->store;
    struct eph_run orig;
    int rc = st->ops->run_get(st, r->replay_of, r->org_id, &orig);
    if (rc) {
        snprintf(err, errlen, "the run to replay, %s, cannot be read: %s", r->replay_of,
                 rc == -ENOENT ? "it no longer exists" : eph_strerror(rc));
        return rc;
    }
    bool gone = orig.zdr || orig.log_purged;
    eph_run_release(&orig);
    if (gone) {
        snprintf(err, errlen, "the run to replay, %s, has no record any more", r->replay_of);
        return -ENOENT;
    }
    struct eph_replay_run *rr = calloc(1, sizeof(*rr));
    struct eph_replay_record rec;
    if (!rr || eph_replay_record_init(&rec, r->replay_of)) {
        free(rr);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    struct load l = {.rec = &rec, .lines = json_array()};
    rc = l.lines ? st->ops->events_list(st, r->replay_of, 0, 0, load_cb, &l) : -ENOMEM;
    json_decref(l.lines);
    if (rc) {
        snprintf(err, errlen, "the record of %s cannot be replayed: %s", r->replay_of,
                 l.err[0] ? l.err : eph_strerror(rc));
        eph_replay_record_release(&rec);
        free(rr);
        return rc;
    }
    rr->svc = svc;
    rr->run = r;
    rr->live = live;
    rr->exchanges = json_incref(rec.exchanges);
    /* A model that costs nothing: the budget's check of each call is then always met. */
    rr->cfg.id = r->model;
    rr->cfg.provider = "replay";
    rr->cfg.max_output_tokens = 4096;
    rr->cfg.timeout_seconds = 120;
    EPH_INFO("worker", "run %s replays %s: %zu model turns, %zu tool results, %zu exchanges", r->id,
             r->replay_of, json_array_size(rec.turns), json_object_size(rec.results),
             json_array_size(rec.exchanges));
    struct eph_replay_hooks hooks = {diverged, rr};
    rc = eph_replay_model_open(&rec, &rr->cfg, &hooks, &rr->model);
    if (rc) {
        snprintf(err, errlen, "out of memory");
        json_decref(rr->exchanges);
        free(rr);
        return rc;
    }
    *out = rr;
    return 0;
}

struct eph_model *eph_replay_run_model(struct eph_replay_run *rr)
{
    return rr->model;
}

const struct eph_model_config *eph_replay_run_config(struct eph_replay_run *rr)
{
    return &rr->cfg;
}

json_t *eph_replay_run_exchanges(struct eph_replay_run *rr)
{
    return rr->exchanges;
}

void eph_replay_run_free(struct eph_replay_run *rr)
{
    if (!rr)
        return;
    if (rr->model)
        rr->model->ops->free(rr->model);
    json_decref(rr->exchanges);
    free(rr);
}
