/*
 * replay.h - recorded runs, read back: the record a replay answers from (docs/AGENT.md,
 * docs/MODELS.md).
 *
 * A record is built from the lines of a run's transcript (run/transcript.h, docs/AGENT.md): the
 * model turns in order (each the response the model gave), the result of every tool call by its
 * id, and the broker exchanges. It is what the `replay` provider reads from an exported file, and
 * what a run with replay_of answers from. Everything in it is hostile input: lines are size-capped
 * and checked for type, and a bad line is an error naming it, never a crash.
 */
#ifndef EPH_REPLAY_H
#define EPH_REPLAY_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "agent/model.h"

/* A transcript line, a transcript, and the model turns of one record at most. */
#define EPH_REPLAY_LINE_MAX (8u << 20)
#define EPH_REPLAY_TEXT_MAX (64u << 20)
#define EPH_REPLAY_TURNS_MAX 4096u

struct eph_replay_record {
    char *name;        /* the recording's name (file or folder name, or the run id) */
    char *prompt;      /* the recorded run's prompt, or NULL */
    json_t *turns;     /* model turns' responses, in order */
    json_t *results;   /* tool call id -> the result the model was given (string) */
    json_t *exchanges; /* the broker exchanges (the transcript's exchange lines), in order */
    bool exported;     /* from a transcript (answers verbatim), not a hand-written recording */
};

/* 0 or -ENOMEM. */
int eph_replay_record_init(struct eph_replay_record *rec, const char *name);
void eph_replay_record_release(struct eph_replay_record *rec);
/* Adds one transcript line (borrowed). 0, or -EINVAL with err saying what is wrong with it, or
 * -E2BIG past EPH_REPLAY_TURNS_MAX model turns, or -ENOMEM. Kinds it does not use are skipped. */
int eph_replay_record_add(struct eph_replay_record *rec, const json_t *line, char *err,
                          size_t errlen);
/* Adds every line of a JSON Lines text (an exported transcript): 0, or the first error with its
 * line number in err. Blank lines are skipped; a line over EPH_REPLAY_LINE_MAX or a text over
 * EPH_REPLAY_TEXT_MAX is -EMSGSIZE. */
int eph_replay_record_parse(struct eph_replay_record *rec, const char *text, size_t len, char *err,
                            size_t errlen);

/* A tool result of a replay that differs from the original's. */
struct eph_replay_divergence {
    unsigned turn; /* the model turn that asked for the call */
    const char *call_id, *tool;
    const char *original, *replayed;
};

struct eph_replay_hooks {
    void (*diverged)(void *ctx, const struct eph_replay_divergence *d);
    void *ctx;
};

/*
 * A model for one run that replays rec (taken: released even on error): the n-th call gets the
 * n-th recorded turn, reports no usage (nothing is billed), and before answering compares each
 * tool result the conversation holds with the recorded one under the same call id, calling
 * hooks->diverged once per result that differs. Past the last recorded turn a call fails with
 * -ENODATA ("replay_exhausted"). cfg is borrowed for the model's life. Free it with
 * (*out)->ops->free.
 */
int eph_replay_model_open(struct eph_replay_record *rec, const struct eph_model_config *cfg,
                          const struct eph_replay_hooks *hooks, struct eph_model **out);

#endif
