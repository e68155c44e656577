/*
 * agent.h - the agent loop: model call, tool calls in the sandbox, repeat.
 *
 * The loop runs until the model answers without tool calls (the result), the deadline, the budget
 * or a cancel stops it, or the turn limit is reached. Everything the model sends is validated: a
 * malformed tool call becomes a tool error the model sees, never a crash. Every model call and
 * every command is a timeline event, and the run's usage and cost are kept current in the store so
 * that a crash settles what was measured.
 */
#ifndef EPH_AGENT_H
#define EPH_AGENT_H

#include <stdint.h>

#include "agent/model.h"
#include "broker/broker.h"
#include "ledger/budget.h"
#include "run/live.h"
#include "run/run.h"
#include "sandbox/sandbox.h"
#include "store/store.h"

struct eph_agent_ctx {
    struct eph_store *store;
    struct eph_live *live;
    struct eph_run *run; /* usage and cost are updated as the loop goes */
    struct eph_model *model;
    const struct eph_model_config *mcfg;
    struct eph_sandbox *sb;
    struct eph_budget *budget;
    uint64_t deadline_ns; /* the run's deadline (CLOCK_MONOTONIC) */
    unsigned turn_limit;
    unsigned command_timeout_ms;
    unsigned output_cap; /* bytes per stream returned to the model */
    const struct eph_sandbox_limits *limits;
    const char *backend_name;
    struct eph_broker *broker; /* the run's way out (web, connections), or NULL */
};

struct eph_agent_outcome {
    enum eph_run_status status;
    char *result;        /* completed: the model's final Markdown (free()) */
    char error_code[48]; /* otherwise */
    char error_message[256];
};

int eph_agent_run(struct eph_agent_ctx *ctx, struct eph_agent_outcome *out);

/* Tools (tools.c). */

/* The tool declarations for a run's permissions (new reference). */
json_t *eph_tools_declare(bool shell, bool web);
/* Executes one tool call; the result text for the model goes to *content (free()). Never fails
 * for bad input from the model: that becomes an error text. Returns -ECANCELED or -ETIMEDOUT when
 * the run must stop, else 0. */
int eph_tools_execute(struct eph_agent_ctx *ctx, const struct eph_tool_call *call, char **content);
/* The system prompt for a run (free()). */
char *eph_agent_system_prompt(const struct eph_agent_ctx *ctx);

#endif
