/*
 * agent.c - the agent loop (see agent.h and docs/AGENT.md).
 */
#include "agent/agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/money.h"

/* The smallest answer worth asking for: below this, the budget is exhausted. */
#define MIN_OUTPUT_TOKENS 16

/* An estimate of the input tokens of a conversation, on the high side: one token per three bytes
 * of its JSON (English text averages about four). Underestimating would only make the worst case
 * smaller; the charge is capped at the reservation in any case. */
static uint64_t estimate_input_tokens(json_t *messages, json_t *tools)
{
    size_t n =
        json_dumpb(messages, NULL, 0, JSON_COMPACT) + json_dumpb(tools, NULL, 0, JSON_COMPACT);
    return n / 3 + 16;
}

static void outcome(struct eph_agent_outcome *out, enum eph_run_status st, const char *code,
                    const char *msg)
{
    out->status = st;
    snprintf(out->error_code, sizeof(out->error_code), "%s", code ? code : "");
    snprintf(out->error_message, sizeof(out->error_message), "%s", msg ? msg : "");
}

/* Maps why the run must stop to its terminal status. */
static void stop_for(struct eph_agent_ctx *ctx, int rc, struct eph_agent_outcome *out)
{
    if (rc == -ECANCELED || eph_live_cancelled(ctx->live))
        outcome(out, EPH_RUN_CANCELLED, "cancelled", "the run was cancelled");
    else if (rc == -EDQUOT)
        outcome(out, EPH_RUN_BUDGET_EXHAUSTED, "budget_exhausted",
                "the budget cannot cover any more work");
    else
        outcome(out, EPH_RUN_TIMED_OUT, "timeout", "the run reached its time limit");
}

/* Charges a finished (or failed but reported) call and records its model.call event. Returns
 * whether the charge was capped at the reservation, that is whether the budget is now spent. */
static bool record_model_usage(struct eph_agent_ctx *ctx, const struct eph_model_response *resp,
                               uint64_t latency_ms, unsigned call_no, int call_rc)
{
    struct eph_run *r = ctx->run;
    const struct eph_model_config *m = ctx->mcfg;
    struct eph_price price = {m->input_micros_per_mtok, m->cached_input_micros_per_mtok,
                              m->output_micros_per_mtok};
    bool capped = false;
    /* An answer without usage is charged the worst case earmarked for it: the user agreed to pay
     * up to that, and less cannot be known. Anything less would be a guess billed as a fact. */
    bool missing = resp->usage_missing && !call_rc;
    int64_t cost =
        missing ? eph_budget_charge_model_worst_case(ctx->budget, eph_clock_mono_ns(),
                                                     resp->input_tokens, resp->cached_input_tokens,
                                                     resp->output_tokens, &price, &capped)
                : eph_budget_charge_model_call(ctx->budget, eph_clock_mono_ns(), resp->input_tokens,
                                               resp->cached_input_tokens, resp->output_tokens,
                                               &price, &capped);
    uint64_t in = resp->input_tokens + resp->cached_input_tokens;
    uint64_t tokens = in + resp->output_tokens;
    r->usage.model_calls++;
    r->usage.input_tokens += in;
    r->usage.output_tokens += resp->output_tokens;
    r->cost.model_micros = ctx->budget->model;

    json_t *data = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "call", (json_int_t)call_no,
                             "input_tokens", (json_int_t)in, "cached_input_tokens",
                             (json_int_t)resp->cached_input_tokens, "output_tokens",
                             (json_int_t)resp->output_tokens, "cost_micros", (json_int_t)cost,
                             "latency_ms", (json_int_t)latency_ms, "replayed", resp->replayed);
    if (resp->attempts > 1)
        json_object_set_new(data, "attempts", json_integer(resp->attempts));
    if (missing)
        json_object_set_new(data, "usage_missing", json_true());
    if (capped)
        json_object_set_new(data, "capped_at_reservation", json_true());
    if (call_rc)
        json_object_set_new(data, "failed", json_true());
    char tok[32], money[EPH_MONEY_FMT_MAX];
    eph_format_thousands(tokens, tok);
    eph_money_format(cost, money);
    eph_live_emit(ctx->live, ctx->store, "model", "model.call", data,
                  "model call %u · %s tokens · %s%s%s%s", call_no, tok, money,
                  resp->replayed ? " · replayed" : "",
                  missing ? " · no usage reported: worst case charged" : "",
                  capped ? " · capped at the reservation" : "");
    r->cost.compute_micros = eph_budget_compute(ctx->budget, eph_clock_mono_ns());
    int rc = ctx->store->ops->run_progress(ctx->store, r);
    if (rc)
        EPH_WARN("agent", "run %s: cannot record progress: %s", r->id, strerror(-rc));
    return capped;
}

static json_t *assistant_message(const struct eph_model_response *resp)
{
    json_t *calls = json_array();
    for (size_t i = 0; i < resp->ncalls; i++)
        json_array_append_new(calls,
                              json_pack("{s:s, s:s, s:s}", "id", resp->calls[i].id, "name",
                                        resp->calls[i].name ? resp->calls[i].name : "", "arguments",
                                        resp->calls[i].arguments ? resp->calls[i].arguments : ""));
    return json_pack("{s:s, s:o, s:o}", "role", "assistant", "content",
                     resp->content ? json_string(resp->content) : json_null(), "tool_calls", calls);
}

int eph_agent_run(struct eph_agent_ctx *ctx, struct eph_agent_outcome *out)
{
    memset(out, 0, sizeof(*out));
    struct eph_run *r = ctx->run;
    char *system = eph_agent_system_prompt(ctx);
    json_t *messages = json_pack("[{s:s, s:s?}, {s:s, s:s}]", "role", "system", "content", system,
                                 "role", "user", "content", r->prompt ? r->prompt : "");
    free(system);
    json_t *tools = eph_tools_declare(r->shell, r->web);
    if (!messages || !tools) {
        json_decref(messages);
        json_decref(tools);
        outcome(out, EPH_RUN_FAILED, "internal_error", "out of memory");
        return -ENOMEM;
    }
    const struct eph_model_config *m = ctx->mcfg;
    struct eph_price price = {m->input_micros_per_mtok, m->cached_input_micros_per_mtok,
                              m->output_micros_per_mtok};

    unsigned turn;
    for (turn = 1; turn <= ctx->turn_limit; turn++) {
        uint64_t now = eph_clock_mono_ns();
        if (eph_live_cancelled(ctx->live)) {
            stop_for(ctx, -ECANCELED, out);
            goto done;
        }
        if (now >= ctx->deadline_ns) {
            stop_for(ctx, -ETIMEDOUT, out);
            goto done;
        }
        uint32_t max_tokens = m->max_output_tokens;
        /* The longest this call may take: one attempt's timeout, never past the deadline. */
        uint64_t call_ns = (uint64_t)(m->timeout_seconds ? m->timeout_seconds : 120) * 1000000000u;
        if (call_ns > ctx->deadline_ns - now)
            call_ns = ctx->deadline_ns - now;
        int rc =
            eph_budget_plan_model_call(ctx->budget, now, estimate_input_tokens(messages, tools),
                                       call_ns, &price, MIN_OUTPUT_TOKENS, &max_tokens);
        if (rc) {
            outcome(out, EPH_RUN_BUDGET_EXHAUSTED, "budget_exhausted",
                    "the budget left cannot cover another model call");
            goto done;
        }
        /* The call may last until the deadline or until compute, with the call's worst case
         * earmarked, would exhaust the budget. */
        uint64_t deadline = ctx->deadline_ns;
        uint64_t budget_end = eph_budget_compute_deadline(ctx->budget);
        bool budget_first = budget_end < deadline;
        if (budget_first)
            deadline = budget_end;
        struct eph_model_request req = {.messages = messages,
                                        .tools = tools,
                                        .max_tokens = max_tokens,
                                        .deadline_ns = deadline,
                                        .cancel = eph_live_cancel_flag(ctx->live),
                                        .prompt = r->prompt};
        struct eph_model_response resp;
        memset(&resp, 0, sizeof(resp));
        char err[256] = "";
        uint64_t t0 = eph_clock_mono_ns();
        rc = ctx->model->ops->call(ctx->model, &req, &resp, err, sizeof(err));
        uint64_t latency_ms = (eph_clock_mono_ns() - t0) / 1000000u;
        eph_metrics_observe_model_call(eph_clock_mono_ns() - t0);
        bool spent = false;
        if (!rc || resp.input_tokens || resp.cached_input_tokens || resp.output_tokens)
            spent = record_model_usage(ctx, &resp, latency_ms, turn, rc);
        else
            ctx->budget->earmark = 0;
        if (rc) {
            eph_model_response_release(&resp);
            if (rc == -ECANCELED || rc == -ETIMEDOUT) {
                stop_for(ctx, rc == -ETIMEDOUT && budget_first ? -EDQUOT : rc, out);
            } else {
                char msg[300];
                snprintf(msg, sizeof(msg), "model call %u failed: %s", turn, err);
                outcome(out, EPH_RUN_FAILED, rc == -ENOENT ? "no_recording" : "model_error", msg);
            }
            goto done;
        }
        if (resp.ncalls == 0) {
            out->result = strdup(resp.content ? resp.content : "");
            outcome(out, EPH_RUN_COMPLETED, NULL, NULL);
            eph_model_response_release(&resp);
            goto done;
        }
        if (spent) {
            /* The answer cost more than was left: nothing remains to run its tools with. */
            eph_model_response_release(&resp);
            outcome(out, EPH_RUN_BUDGET_EXHAUSTED, "budget_exhausted",
                    "the model's reported usage used up the budget");
            goto done;
        }
        /* A message that cannot be built (out of memory) must not be skipped silently: the
         * model would see results of calls it did not make, or lose one. */
        if (json_array_append_new(messages, assistant_message(&resp))) {
            eph_model_response_release(&resp);
            outcome(out, EPH_RUN_FAILED, "internal_error", "out of memory");
            goto done;
        }
        for (size_t i = 0; i < resp.ncalls; i++) {
            char *content = NULL;
            rc = eph_tools_execute(ctx, &resp.calls[i], &content);
            if (rc) {
                free(content);
                eph_model_response_release(&resp);
                stop_for(ctx, rc, out);
                goto done;
            }
            json_t *msg = json_pack(
                "{s:s, s:s, s:s, s:s}", "role", "tool", "tool_call_id", resp.calls[i].id, "name",
                resp.calls[i].name ? resp.calls[i].name : "", "content", content ? content : "");
            /* Every tool error is {"error": ...} (tools.c); providers that can say so do. */
            if (msg && content && strncmp(content, "{\"error\":", 9) == 0)
                json_object_set_new(msg, "is_error", json_true());
            rc = json_array_append_new(messages, msg);
            free(content);
            if (rc) {
                eph_model_response_release(&resp);
                outcome(out, EPH_RUN_FAILED, "internal_error", "out of memory");
                goto done;
            }
        }
        eph_model_response_release(&resp);
    }
    {
        char msg[128];
        snprintf(msg, sizeof(msg), "the model did not finish within %u turns", ctx->turn_limit);
        outcome(out, EPH_RUN_FAILED, "turn_limit", msg);
    }
done:
    json_decref(messages);
    json_decref(tools);
    return 0;
}
