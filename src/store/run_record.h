/*
 * run_record.h - the run record as the store keeps it, and its state machine. Plain data: its
 * JSON form (the API's run object) is the API's (api/json.h).
 *
 * States: queued -> starting -> running -> one terminal state (completed, failed, timed_out,
 * budget_exhausted, cancelled). A terminal run always has charged + released = reserved and
 * charged = model + web + compute; the store writes the terminal state and the ledger entries in
 * one transaction.
 */
#ifndef EPH_RUN_RECORD_H
#define EPH_RUN_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "common/id.h"

enum eph_run_status {
    EPH_RUN_QUEUED = 0,
    EPH_RUN_STARTING,
    EPH_RUN_RUNNING,
    EPH_RUN_COMPLETED,
    EPH_RUN_FAILED,
    EPH_RUN_TIMED_OUT,
    EPH_RUN_BUDGET_EXHAUSTED,
    EPH_RUN_CANCELLED,
};

/* What a row is: a run of Ephemeral's agent, or a sandbox a caller drives (docs/SANDBOXES.md):
 * the same record, money, lease and timeline, without the agent. */
enum eph_run_kind {
    EPH_KIND_RUN = 0,
    EPH_KIND_SANDBOX,
};

struct eph_usage {
    uint64_t model_calls;    /* a retried call counts once */
    uint64_t model_attempts; /* requests sent, retries included */
    uint64_t input_tokens;   /* uncached + cached */
    uint64_t output_tokens;
    uint64_t shell_commands;
    uint64_t web_requests;
    uint64_t connection_requests;
};

struct eph_cost {
    int64_t reserved_micros;
    int64_t model_micros;
    int64_t web_micros;
    int64_t compute_micros;
    int64_t charged_micros;  /* set at settlement */
    int64_t released_micros; /* set at settlement */
};

struct eph_run {
    char id[EPH_RUN_ID_LEN + 1];
    char org_id[48];
    enum eph_run_status status;
    char *model;
    char *prompt;        /* NULL with zero data retention or once purged */
    json_t *files;       /* array of {path, content_base64}; NULL with ZDR or once purged */
    json_t *connections; /* array of strings */
    json_t *metadata;    /* object string -> string */
    bool shell, web, zdr;
    json_t *web_allow; /* web's allow-list: array of domains; NULL = every public host */
    unsigned timeout_seconds;
    int64_t created_at_ms, started_at_ms, finished_at_ms; /* 0 = not yet */
    char *result; /* NULL until completed, with ZDR, or once purged */
    char *error_type, *error_code, *error_message; /* all NULL, or all set */
    struct eph_usage usage;
    struct eph_cost cost;
    char *sandbox_backend; /* NULL until the sandbox exists */
    unsigned vcpus, memory_mib;
    int64_t log_expires_at_ms; /* set at finish: finished_at + retention */
    bool log_purged;
    char node_id[40];            /* the node working on it; "" while unclaimed */
    int64_t lease_expires_at_ms; /* that node's lease; 0 while unclaimed */
    char image[64];              /* the image it runs on ("" or "default": the default) */
    char image_digest[72];       /* that image's digest when the run was created */
    char *replay_of;             /* the run this one replays (docs/AGENT.md), or NULL */
    json_t *outputs;             /* output patterns (array of strings), or NULL: none */
    uint64_t divergences;        /* a replay: tool results that differ from the original's */
    enum eph_run_kind kind;
    unsigned idle_timeout_seconds; /* a sandbox: ended after this long without a call; 0: none */
};

void eph_run_init(struct eph_run *r);
void eph_run_release(struct eph_run *r);

const char *eph_run_status_name(enum eph_run_status s);
/* "run" or "sandbox", as the kind column keeps it. */
const char *eph_run_kind_name(enum eph_run_kind k);
int eph_run_status_parse(const char *s, enum eph_run_status *out);
bool eph_run_status_terminal(enum eph_run_status s);
/* Whether the state machine allows from -> to. */
bool eph_run_transition_ok(enum eph_run_status from, enum eph_run_status to);
/* Sets the error fields (copies): 0, or -ENOMEM with none of them set. */
int eph_run_set_error(struct eph_run *r, const char *type, const char *code, const char *message);

#endif
