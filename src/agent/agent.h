/*
 * agent.h - the agent loop: model call, tool calls in the sandbox, repeat.
 *
 * The loop runs until the model answers without tool calls (the result), the deadline, the budget
 * or a cancel stops it, or the turn limit is reached. Everything the model sends is validated: a
 * malformed tool call becomes a tool error the model sees, never a crash. Every model call and
 * every tool call is an event on the caller's sink (docs/AGENT.md, "The record"), and the sink's
 * progress callback is called whenever the usage or the budget moved, so that the owner can
 * persist them and a crash settles what was measured. The agent knows nothing of runs, the store
 * or the live timeline: its caller (run/worker.c) supplies the sink and the cancel token.
 */
#ifndef EPH_AGENT_H
#define EPH_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "agent/model.h"
#include "broker/broker.h"
#include "common/sink.h"
#include "ledger/budget.h"
#include "sandbox/sandbox.h"

/* What the loop counts as it goes (the owner copies it into its usage record on progress). */
struct eph_agent_usage {
    uint64_t model_calls;    /* calls the loop made: a retried call counts once */
    uint64_t model_attempts; /* requests sent for them, retries included */
    uint64_t input_tokens;   /* uncached + cached + cache writes */
    uint64_t output_tokens;
    uint64_t shell_commands;
};

struct eph_agent_ctx {
    const struct eph_sink *sink; /* events and progress */
    struct eph_cancel cancel;
    const char *run_id; /* for log lines only */
    const char *prompt;
    const char *recording; /* replay: the recording to answer from (the run's metadata
                              "transcript"), or NULL */
    bool shell, web, zdr;  /* the permissions; zdr: no content in any event */
    unsigned timeout_seconds;
    struct eph_agent_usage *usage; /* kept current */
    struct eph_model *model;
    const struct eph_model_config *mcfg;
    struct eph_sandbox *sb;
    struct eph_budget *budget;
    uint64_t deadline_ns; /* the run's deadline (CLOCK_MONOTONIC) */
    unsigned turn_limit;
    unsigned command_timeout_ms; /* the most a command may ask for (timeout_seconds) */
    unsigned output_cap;         /* bytes per stream returned to the model */
    unsigned live_output_bytes;  /* shell.output text per command (0: none; docs/AGENT.md) */
    const struct eph_sandbox_limits *limits;
    const char *backend_name;
    struct eph_broker *broker; /* the run's way out (web, connections), or NULL */
    unsigned turn;             /* set by the loop: the model turn being worked (1-based) */
};

enum eph_agent_status {
    EPH_AGENT_COMPLETED,
    EPH_AGENT_FAILED,
    EPH_AGENT_TIMED_OUT,
    EPH_AGENT_BUDGET_EXHAUSTED,
    EPH_AGENT_CANCELLED,
};

struct eph_agent_outcome {
    enum eph_agent_status status;
    char *result;        /* completed: the model's final Markdown (free()) */
    char error_code[48]; /* otherwise */
    char error_message[256];
};

int eph_agent_run(struct eph_agent_ctx *ctx, struct eph_agent_outcome *out);

/*
 * The least a run's first model call can cost, in micros: the worst case of its first attempt
 * (ledger/budget.h) with the fewest output tokens the loop ever asks for. ctx describes the run as
 * it will be (prompt, permissions, model, limits; sb, broker and budget NULL), so that the request
 * measured is the first one the loop sends, or shorter: every part the loop fills in only once
 * the sandbox exists (the scratch path, the budget left, the connections) is counted at its
 * shortest, so the figure never exceeds what the run will need. A budget below it ends the run
 * with no model call at all (docs/MONEY.md). 0, or -ENOMEM / -EINVAL (err says why).
 */
int eph_agent_first_call_min(const struct eph_agent_ctx *ctx, int64_t *micros, char *err,
                             size_t errlen) __attribute__((warn_unused_result));

/* The request_digest of a model turn (docs/AGENT.md, "The record"): the sha256 hex of the
 * provider-neutral messages array as jansson writes it compact with sorted keys (UTF-8 as is,
 * '/' not escaped). A replay compares it to the recorded one. */
void eph_agent_messages_digest(const json_t *messages, char out[65]);

/* Tools (tools.c). */

/* Caps of the file tools (docs/AGENT.md). */
#define EPH_TOOL_FILE_MAX (4u << 20)      /* the largest file read_file/edit_file take whole */
#define EPH_TOOL_WRITE_MAX (1u << 20)     /* write_file content, edit_file result */
#define EPH_TOOL_READ_DEFAULT (16u << 10) /* read_file limit when none is given */
#define EPH_TOOL_READ_MAX (64u << 10)     /* read_file limit at most (and at most output_cap) */

/* The tool declarations for a run's permissions (new reference). */
json_t *eph_tools_declare(bool shell, bool web);
/* Executes one tool call and records it as an event (tool.rejected when it never ran); the result
 * text for the model goes to *content (free()). Never fails for bad input from the model: that
 * becomes an error text. Returns -ECANCELED, -ETIMEDOUT or -EDQUOT when the run must stop,
 * -ENOMEM when the result or the record cannot be made whole (nothing is recorded then, and
 * *content is NULL), else 0.
 */
int eph_tools_execute(struct eph_agent_ctx *ctx, const struct eph_tool_call *call, char **content);
/* The system prompt for a run (free()). */
char *eph_agent_system_prompt(const struct eph_agent_ctx *ctx);

#endif
