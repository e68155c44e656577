/*
 * agent.c - the agent loop (see agent.h and docs/AGENT.md).
 */
#include "agent/agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/money.h"
#include "common/text.h"

/* The smallest answer worth asking for: below this, the budget is exhausted. */
#define MIN_OUTPUT_TOKENS 16

static void outcome(struct eph_agent_outcome *out, enum eph_agent_status st, const char *code,
                    const char *msg)
{
    out->status = st;
    eph_text_format_cut(out->error_code, sizeof(out->error_code), "%s", code ? code : "");
    eph_text_format_cut(out->error_message, sizeof(out->error_message), "%s", msg ? msg : "");
}

/* Maps why the run must stop to its terminal status. */
static void stop_for(struct eph_agent_ctx *ctx, int rc, struct eph_agent_outcome *out)
{
    if (rc == -ECANCELED || eph_cancelled(&ctx->cancel))
        outcome(out, EPH_AGENT_CANCELLED, "cancelled", "the run was cancelled");
    else if (rc == -EDQUOT)
        outcome(out, EPH_AGENT_BUDGET_EXHAUSTED, "budget_exhausted",
                "the budget cannot cover any more work");
    else
        outcome(out, EPH_AGENT_TIMED_OUT, "timeout", "the run reached its time limit");
}

/* The budget's side of one model call (struct eph_model_meter): every attempt is authorised
 * against what is left before it is sent, and charged and recorded after it ended. */
struct meter {
    struct eph_agent_ctx *ctx;
    struct eph_price price;
    unsigned call;        /* the turn */
    bool lowered;         /* the budget lowered max_tokens of the last attempt */
    bool budget_first;    /* the last attempt's deadline was the compute deadline */
    bool capped;          /* some attempt of this call was charged less than it reported */
    int64_t available;    /* what was left when the last attempt was authorised */
    uint64_t deadline_ns; /* the last attempt's deadline */
    char digest[65];      /* of the turn's request messages (the record) */
    int record_err;       /* -ENOMEM: an attempt's model.call event could not be made */
};

/* The longest an attempt may take, for the compute set aside while it is in flight: the idle
 * timeout (a live answer may take longer; its deadline then is the compute deadline). */
static uint64_t attempt_ns(const struct eph_agent_ctx *ctx, uint64_t now)
{
    const struct eph_model_config *m = ctx->mcfg;
    uint64_t ns = (uint64_t)(m->timeout_seconds ? m->timeout_seconds : 120) * 1000000000u;
    if (now < ctx->deadline_ns && ns > ctx->deadline_ns - now)
        ns = ctx->deadline_ns - now;
    return ns;
}

/* The answer's tool calls as the record and the conversation hold them (a new reference), NULL
 * when one of them cannot be made. */
static json_t *calls_array(const struct eph_model_response *resp)
{
    json_t *calls = json_array();
    for (size_t i = 0; calls && i < resp->ncalls; i++) {
        if (json_array_append_new(
                calls, json_pack("{s:s, s:s, s:s}", "id", resp->calls[i].id, "name",
                                 resp->calls[i].name ? resp->calls[i].name : "", "arguments",
                                 resp->calls[i].arguments ? resp->calls[i].arguments : ""))) {
            json_decref(calls);
            calls = NULL;
        }
    }
    return calls;
}

/* What came back, for the record: text, tool calls with their raw arguments, finish reason and
 * usage. NULL when a part of it cannot be made. */
static json_t *response_record(const struct eph_model_response *resp,
                               const struct eph_token_usage *u)
{
    json_t *calls = calls_array(resp);
    if (!calls)
        return NULL;
    return json_pack(
        "{s:s?, s:o, s:s?, s:{s:I, s:I, s:I, s:I, s:I, s:I}}", "text", resp->content, "tool_calls",
        calls, "finish_reason", resp->finish_reason, "usage", "input_tokens",
        (json_int_t)u->input_tokens, "cached_input_tokens", (json_int_t)u->cached_input_tokens,
        "cache_write_tokens", (json_int_t)u->cache_write_tokens, "cache_write_1h_tokens",
        (json_int_t)u->cache_write_1h_tokens, "output_tokens", (json_int_t)u->output_tokens,
        "reasoning_tokens", (json_int_t)u->reasoning_tokens);
}

void eph_agent_messages_digest(const json_t *messages, char out[65])
{
    char *s = json_dumps(messages, JSON_COMPACT | JSON_SORT_KEYS);
    eph_sha256_hex(s ? s : "", s ? strlen(s) : 0, out);
    free(s);
}

static int meter_authorise(void *p, unsigned attempt, uint64_t at_ns, uint64_t input_bound,
                           bool check_only, uint32_t *max_tokens, uint64_t *deadline_ns)
{
    struct meter *mt = p;
    struct eph_agent_ctx *ctx = mt->ctx;
    if (check_only) {
        return eph_budget_authorise_check(ctx->budget, at_ns, input_bound, attempt_ns(ctx, at_ns),
                                          &mt->price, MIN_OUTPUT_TOKENS, max_tokens);
    }
    uint32_t asked = *max_tokens;
    mt->available = eph_budget_available(ctx->budget, at_ns);
    int rc = eph_budget_authorise(ctx->budget, at_ns, input_bound, attempt_ns(ctx, at_ns),
                                  &mt->price, MIN_OUTPUT_TOKENS, max_tokens);
    if (rc)
        return rc;
    mt->lowered = *max_tokens < asked;
    /* The attempt may last until the deadline or until compute, with its worst case earmarked,
     * would exhaust the budget. */
    uint64_t budget_end = eph_budget_compute_deadline(ctx->budget);
    mt->budget_first = budget_end < *deadline_ns;
    if (mt->budget_first)
        *deadline_ns = budget_end;
    mt->deadline_ns = *deadline_ns;
    EPH_DEBUG("agent",
              "run %s: model call %u attempt %u authorised: input bound %llu, "
              "max_tokens %u, earmark %lld",
              ctx->run_id, mt->call, attempt, (unsigned long long)input_bound, *max_tokens,
              (long long)eph_price_worst_case(&mt->price, input_bound, *max_tokens));
    return 0;
}

/* A finish reason as a zero-data-retention event keeps it: the providers' usual words, else
 * "other" (the provider's field is free text). */
static const char *zdr_finish(const char *f)
{
    static const char *const known[] = {"stop",           "tool_calls", "length",    "refusal",
                                        "content_filter", "pause_turn", "max_tokens"};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(f, known[i]) == 0)
            return known[i];
    return "other";
}

/* How an attempt is charged (docs/MONEY.md): what the provider reported when it reported its
 * whole usage; its worst case when it may bill without having said how much (an answer without
 * usage, a stream cut after the request went out); nothing when it cannot bill (an HTTP error
 * status, a request that never went out whole). */
static enum eph_attempt_charge charge_kind(const struct eph_model_attempt *a)
{
    const struct eph_model_response *r = a->resp;
    if (r->usage_final)
        return EPH_CHARGE_USAGE;
    if (a->outcome == EPH_ATTEMPT_HTTP_ERROR || a->outcome == EPH_ATTEMPT_NOT_SENT || !r->sent)
        return EPH_CHARGE_NOTHING;
    return EPH_CHARGE_EARMARK;
}

/* Sets key of o to v (stolen); a field that cannot be made or set is counted in *err. */
static void record_put(json_t *o, const char *key, json_t *v, int *err)
{
    if (!o) {
        json_decref(v);
        *err = -ENOMEM;
    } else if (json_object_set_new(o, key, v)) {
        *err = -ENOMEM;
    }
}

static void meter_record(void *p, const struct eph_model_attempt *a)
{
    struct meter *mt = p;
    struct eph_agent_ctx *ctx = mt->ctx;
    const struct eph_model_response *resp = a->resp;
    struct eph_token_usage u = {.input_tokens = resp->input_tokens,
                                .cached_input_tokens = resp->cached_input_tokens,
                                .cache_write_tokens = resp->cache_write_tokens,
                                .cache_write_1h_tokens = resp->cache_write_1h_tokens,
                                .output_tokens = resp->output_tokens,
                                .reasoning_tokens = resp->reasoning_tokens};
    enum eph_attempt_charge how = charge_kind(a);
    struct eph_attempt_cost cost;
    eph_budget_charge_attempt(ctx->budget, eph_clock_mono_ns(), how, &u, &mt->price, &cost);
    if (cost.capped)
        mt->capped = true;
    uint64_t in = eph_tokens_add(eph_tokens_add(u.input_tokens, u.cached_input_tokens),
                                 eph_tokens_add(u.cache_write_tokens, u.cache_write_1h_tokens));
    uint64_t tokens = eph_tokens_add(in, u.output_tokens);
    struct eph_agent_usage *use = ctx->usage;
    /* A call is counted once, at its first attempt; every attempt is counted apart. */
    if (a->number == 1)
        use->model_calls = eph_tokens_add(use->model_calls, 1);
    use->model_attempts = eph_tokens_add(use->model_attempts, 1);
    use->input_tokens = eph_tokens_add(use->input_tokens, in);
    use->output_tokens = eph_tokens_add(use->output_tokens, u.output_tokens);
    eph_metrics_observe_model_call(a->latency_ns);

    const char *outcome_name = eph_model_outcome_name(a->outcome);
    json_t *data = json_pack(
        "{s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "call",
        (json_int_t)mt->call, "attempt", (json_int_t)a->number, "outcome", outcome_name,
        "input_tokens", (json_int_t)in, "cached_input_tokens", (json_int_t)u.cached_input_tokens,
        "cache_write_tokens", (json_int_t)u.cache_write_tokens, "cache_write_1h_tokens",
        (json_int_t)u.cache_write_1h_tokens, "output_tokens", (json_int_t)u.output_tokens,
        "reasoning_tokens", (json_int_t)u.reasoning_tokens, "cost_micros", (json_int_t)cost.micros,
        "earmark_micros", (json_int_t)cost.earmark, "max_tokens", (json_int_t)a->max_tokens,
        "input_bound_tokens",
        (json_int_t)(a->input_bound > EPH_TOKENS_MAX ? EPH_TOKENS_MAX : a->input_bound),
        "latency_ms", (json_int_t)(a->latency_ns / 1000000u), "replayed", resp->replayed);
    /* An event with a part missing is not emitted: the attempt's record fails the run
     * (mt->record_err, which the loop reads when the call returns). */
    int err = 0;
    record_put(data, "available_micros", json_integer(mt->available), &err);
    if (resp->http_status)
        record_put(data, "http_status", json_integer(resp->http_status), &err);
    if (resp->finish_reason)
        record_put(data, "finish_reason",
                   json_string(ctx->zdr ? zdr_finish(resp->finish_reason) : resp->finish_reason),
                   &err);
    if (how == EPH_CHARGE_EARMARK)
        record_put(data, "usage_missing", json_true(), &err);
    if (cost.capped)
        record_put(data, "capped_at_reservation", json_true(), &err);
    if (cost.above_bound)
        record_put(data, "above_bound", json_true(), &err);
    if (a->rc)
        record_put(data, "failed", json_true(), &err);
    if (!a->rc) {
        /* The record (docs/AGENT.md): which turn, what was asked (a digest), what came back. */
        record_put(data, "turn", json_integer(mt->call), &err);
        if (!ctx->zdr) {
            record_put(data, "request_digest", json_string(mt->digest), &err);
            record_put(data, "response", response_record(resp, &u), &err);
        }
    }
    /* The common case reads as before ("model call 2 · 1,877 tokens · $0.00012"); a retry or a
     * failed attempt says which and how. */
    char tok[32], money[EPH_MONEY_FMT_MAX], which[64] = "";
    eph_format_thousands(tokens, tok);
    eph_money_format(cost.micros, money);
    size_t w = 0;
    if (a->number > 1)
        w += (size_t)snprintf(which + w, sizeof(which) - w, " · attempt %u", a->number);
    if (a->outcome != EPH_ATTEMPT_OK && w < sizeof(which))
        w += (size_t)snprintf(which + w, sizeof(which) - w, " · %s", outcome_name);
    if (a->outcome == EPH_ATTEMPT_HTTP_ERROR && w < sizeof(which))
        snprintf(which + w, sizeof(which) - w, " %ld", resp->http_status);
    const char *why = how == EPH_CHARGE_EARMARK
                          ? (a->rc ? " · cut without usage: worst case charged"
                                   : " · no usage reported: worst case charged")
                      : how == EPH_CHARGE_NOTHING && a->rc ? " · not billed"
                                                           : "";
    int rc;
    if (err) {
        /* No event with a part missing; the usage it moved is kept all the same. */
        json_decref(data);
        mt->record_err = err;
        rc = eph_sink_progress(ctx->sink);
    } else {
        /* The call's event and the usage and cost it brought: one write. */
        rc = eph_sink_emit_progress(ctx->sink, "model", "model.call", data,
                                    "model call %u%s · %s tokens · %s%s%s%s%s", mt->call, which,
                                    tok, money, resp->replayed ? " · replayed" : "", why,
                                    cost.above_bound ? " · usage above the bound" : "",
                                    cost.capped ? " · capped at the reservation" : "");
    }
    /* A provider's error can quote what it was sent: a zero-data-retention run logs none. */
    if (a->rc && a->err && a->err[0])
        EPH_INFO("agent", "run %s: model call %u attempt %u: %s", ctx->run_id, mt->call, a->number,
                 ctx->zdr ? outcome_name : a->err);
    if (rc)
        EPH_WARN("agent", "run %s: cannot record a model call and its progress: %s", ctx->run_id,
                 strerror(-rc));
}

static json_t *assistant_message(const struct eph_model_response *resp)
{
    json_t *calls = calls_array(resp);
    if (!calls)
        return NULL;
    return json_pack("{s:s, s:o, s:o}", "role", "assistant", "content",
                     resp->content ? json_string(resp->content) : json_null(), "tool_calls", calls);
}

/* What the model is told when its answer was cut by max_tokens. */
#define CONTINUE_PROMPT                                                                            \
    "Your answer was cut off by the output token limit. Continue exactly where it stopped, "       \
    "without repeating anything."

/* The model's refusal, as the run's error. */
static void refused(struct eph_agent_outcome *out, const struct eph_model_response *resp)
{
    char msg[256];
    if (resp->refusal && resp->refusal[0])
        snprintf(msg, sizeof(msg), "the model refused: %s", resp->refusal);
    else if (resp->finish_reason && strcmp(resp->finish_reason, "content_filter") == 0)
        snprintf(msg, sizeof(msg), "the provider's content filter stopped the answer");
    else
        snprintf(msg, sizeof(msg), "the model refused to answer");
    outcome(out, EPH_AGENT_FAILED, "model_refused", msg);
}

static bool finish_is(const struct eph_model_response *resp, const char *word)
{
    return resp->finish_reason && strcmp(resp->finish_reason, word) == 0;
}

/* The first turn's conversation and tools (new references), or -ENOMEM. */
static int first_turn(const struct eph_agent_ctx *ctx, json_t **messages, json_t **tools)
{
    char *system = eph_agent_system_prompt(ctx);
    *messages = system ? json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", system,
                                   "role", "user", "content", ctx->prompt ? ctx->prompt : "")
                       : NULL;
    free(system);
    *tools = eph_tools_declare(ctx->shell, ctx->web);
    if (*messages && *tools)
        return 0;
    json_decref(*messages);
    json_decref(*tools);
    *messages = *tools = NULL;
    return -ENOMEM;
}

static struct eph_price model_price(const struct eph_model_config *m)
{
    return (struct eph_price){.input_micros_per_mtok = m->input_micros_per_mtok,
                              .cached_input_micros_per_mtok = m->cached_input_micros_per_mtok,
                              .output_micros_per_mtok = m->output_micros_per_mtok,
                              .cache_write_micros_per_mtok = m->cache_write_micros_per_mtok,
                              .cache_write_1h_micros_per_mtok = m->cache_write_1h_micros_per_mtok};
}

int eph_agent_first_call_min(const struct eph_agent_ctx *ctx, int64_t *micros, char *err,
                             size_t errlen)
{
    json_t *messages, *tools;
    if (first_turn(ctx, &messages, &tools)) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    struct eph_model_request req = {.messages = messages,
                                    .tools = tools,
                                    .max_tokens = MIN_OUTPUT_TOKENS,
                                    .prompt = ctx->prompt,
                                    .recording = ctx->recording};
    uint64_t bound = 0;
    int rc = eph_model_input_bound(ctx->model, &req, &bound, err, errlen);
    json_decref(messages);
    json_decref(tools);
    if (rc)
        return rc;
    struct eph_price price = model_price(ctx->mcfg);
    *micros = eph_price_worst_case(&price, bound, MIN_OUTPUT_TOKENS);
    return 0;
}

/* The loop's state across its turns (eph_agent_run). */
struct loop {
    struct eph_agent_ctx *ctx;
    struct eph_agent_outcome *out;
    struct meter mt;
    struct eph_model_meter meter;
    json_t *messages, *tools;
    struct eph_buf partial;   /* a final answer cut by max_tokens, continued over the next turns */
    bool truncated;           /* the last answer was cut and is being continued */
    bool truncated_by_budget; /* ... because the budget lowered its max_tokens */
};

/* A turn's steps: go on to the next turn, or the run's outcome is set. */
enum turn_next { TURN_ON, TURN_DONE };

static enum turn_next out_of_memory(struct loop *L)
{
    outcome(L->out, EPH_AGENT_FAILED, "internal_error", "out of memory");
    return TURN_DONE;
}

/* The turn's model call, after the lease and the deadline allow it. TURN_DONE with the outcome
 * set when there is no answer (resp released). */
static enum turn_next call_model(struct loop *L, unsigned turn, struct eph_model_response *resp)
{
    struct eph_agent_ctx *ctx = L->ctx;
    struct meter *mt = &L->mt;
    /* No model call while this node's lease of the run is in doubt (docs/RUN.md). */
    if (!eph_cancel_hold(&ctx->cancel)) {
        stop_for(ctx, -ECANCELED, L->out);
        return TURN_DONE;
    }
    if (eph_clock_mono_ns() >= ctx->deadline_ns) {
        stop_for(ctx, -ETIMEDOUT, L->out);
        return TURN_DONE;
    }
    mt->call = turn;
    ctx->turn = turn;
    eph_agent_messages_digest(L->messages, mt->digest);
    mt->lowered = mt->budget_first = mt->capped = false;
    mt->deadline_ns = ctx->deadline_ns;
    struct eph_model_request req = {.messages = L->messages,
                                    .tools = L->tools,
                                    .max_tokens = ctx->mcfg->max_output_tokens,
                                    .deadline_ns = ctx->deadline_ns,
                                    .cancel = ctx->cancel.flag,
                                    .prompt = ctx->prompt,
                                    .recording = ctx->recording,
                                    .zdr = ctx->zdr};
    char err[256] = "";
    mt->record_err = 0;
    int rc = eph_model_call(ctx->model, &req, &L->meter, resp, err, sizeof(err));
    if (mt->record_err) {
        /* An attempt happened that the run's record does not show. */
        eph_model_response_release(resp);
        return out_of_memory(L);
    }
    if (!rc)
        return TURN_ON;
    eph_model_response_release(resp);
    if (rc == -EDQUOT) {
        outcome(L->out, EPH_AGENT_BUDGET_EXHAUSTED, "budget_exhausted",
                L->truncated ? "the budget left cannot cover the rest of the answer"
                             : "the budget left cannot cover another model call");
    } else if (rc == -ECANCELED || (rc == -ETIMEDOUT && eph_clock_mono_ns() >= mt->deadline_ns)) {
        stop_for(ctx, rc == -ETIMEDOUT && mt->budget_first ? -EDQUOT : rc, L->out);
    } else {
        /* an idle timeout is the provider's failure, not the run's time limit */
        char msg[300];
        snprintf(msg, sizeof(msg), "model call %u failed: %s", turn, err);
        outcome(L->out, EPH_AGENT_FAILED,
                rc == -ENOENT    ? "no_recording"
                : rc == -ENODATA ? "replay_exhausted"
                                 : "model_error",
                msg);
    }
    return TURN_DONE;
}

/* An answer cut by max_tokens without tool calls: never reported as a result; the model is asked
 * to go on, within the budget and the turn limit. */
static enum turn_next continue_answer(struct loop *L, struct eph_model_response *resp)
{
    L->truncated = true;
    L->truncated_by_budget = L->mt.lowered;
    json_t *cut = json_pack("{s:s, s:s, s:[]}", "role", "assistant", "content",
                            resp->content ? resp->content : "", "tool_calls");
    json_t *more = json_pack("{s:s, s:s}", "role", "user", "content", CONTINUE_PROMPT);
    int arc = resp->content ? eph_buf_appends(&L->partial, resp->content) : 0;
    if (arc == -EMSGSIZE) {
        json_decref(cut);
        json_decref(more);
        outcome(L->out, EPH_AGENT_FAILED, "model_output_truncated",
                "the answer grew past its size limit");
        return TURN_DONE;
    }
    if (arc || json_array_append_new(L->messages, cut) || json_array_append_new(L->messages, more))
        return out_of_memory(L);
    return TURN_ON;
}

/* The final answer (with what came before it when it was continued). */
static enum turn_next final_answer(struct loop *L, const struct eph_model_response *resp)
{
    struct eph_agent_outcome *out = L->out;
    if (L->truncated && resp->content && eph_buf_appends(&L->partial, resp->content)) {
        outcome(out, EPH_AGENT_FAILED, "model_output_truncated",
                "the answer grew past its size limit");
        return TURN_DONE;
    }
    out->result =
        L->truncated ? eph_buf_steal(&L->partial) : strdup(resp->content ? resp->content : "");
    if (L->truncated && !out->result)
        out->result = strdup("");
    if (!out->result)
        return out_of_memory(L);
    outcome(out, EPH_AGENT_COMPLETED, NULL, NULL);
    return TURN_DONE;
}

/* The answer's tool calls, each run and its result appended for the next turn. */
static enum turn_next run_tools(struct loop *L, const struct eph_model_response *resp)
{
    struct eph_agent_ctx *ctx = L->ctx;
    /* Tool calls after a continuation: what came before was not the final answer. */
    L->truncated = L->truncated_by_budget = false;
    eph_buf_reset(&L->partial);
    if (L->mt.capped) {
        /* The answer cost more than was left: nothing remains to run its tools with. */
        outcome(L->out, EPH_AGENT_BUDGET_EXHAUSTED, "budget_exhausted",
                "the model's reported usage used up the budget");
        return TURN_DONE;
    }
    /* A message that cannot be built (out of memory) must not be skipped silently: the model
     * would see results of calls it did not make, or lose one. */
    if (json_array_append_new(L->messages, assistant_message(resp)))
        return out_of_memory(L);
    for (size_t i = 0; i < resp->ncalls; i++) {
        char *content = NULL;
        int rc = eph_cancel_hold(&ctx->cancel) ? eph_tools_execute(ctx, &resp->calls[i], &content)
                                               : -ECANCELED;
        if (rc) {
            free(content);
            if (rc == -ENOMEM)
                return out_of_memory(L);
            stop_for(ctx, rc, L->out);
            return TURN_DONE;
        }
        json_t *msg = json_pack(
            "{s:s, s:s, s:s, s:s}", "role", "tool", "tool_call_id", resp->calls[i].id, "name",
            resp->calls[i].name ? resp->calls[i].name : "", "content", content ? content : "");
        /* Every tool error is {"error": ...} (tools.c); providers that can say so do. */
        if (msg && content && strncmp(content, "{\"error\":", 9) == 0 &&
            json_object_set_new(msg, "is_error", json_true())) {
            json_decref(msg);
            msg = NULL;
        }

        rc = json_array_append_new(L->messages, msg);
        free(content);
        if (rc)
            return out_of_memory(L);
    }
    return TURN_ON;
}

/* One turn: the model call and what its answer asks for. */
static enum turn_next one_turn(struct loop *L, unsigned turn)
{
    struct eph_model_response resp;
    if (call_model(L, turn, &resp) == TURN_DONE)
        return TURN_DONE;
    enum turn_next next;
    if (resp.refusal || finish_is(&resp, "refusal") || finish_is(&resp, "content_filter")) {
        refused(L->out, &resp);
        next = TURN_DONE;
    } else if (resp.ncalls == 0 && finish_is(&resp, "length")) {
        next = continue_answer(L, &resp);
    } else if (resp.ncalls == 0) {
        next = final_answer(L, &resp);
    } else {
        next = run_tools(L, &resp);
    }
    eph_model_response_release(&resp);
    return next;
}

/* The turn limit was reached without an outcome. */
static void out_of_turns(struct loop *L)
{
    unsigned limit = L->ctx->turn_limit;
    if (L->truncated && L->truncated_by_budget) {
        outcome(L->out, EPH_AGENT_BUDGET_EXHAUSTED, "budget_exhausted",
                "the budget cut the answer short and the turn limit allows no more");
    } else if (L->truncated) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "the answer was still cut by the output token limit after %u turns", limit);
        outcome(L->out, EPH_AGENT_FAILED, "model_output_truncated", msg);
    } else {
        char msg[128];
        snprintf(msg, sizeof(msg), "the model did not finish within %u turns", limit);
        outcome(L->out, EPH_AGENT_FAILED, "turn_limit", msg);
    }
}

int eph_agent_run(struct eph_agent_ctx *ctx, struct eph_agent_outcome *out)
{
    memset(out, 0, sizeof(*out));
    struct loop L = {.ctx = ctx, .out = out, .mt = {.ctx = ctx, .price = model_price(ctx->mcfg)}};
    if (first_turn(ctx, &L.messages, &L.tools)) {
        outcome(out, EPH_AGENT_FAILED, "internal_error", "out of memory");
        return -ENOMEM;
    }
    L.meter = (struct eph_model_meter){meter_authorise, meter_record, &L.mt};
    eph_buf_init(&L.partial, EPH_MODEL_RESPONSE_MAX);
    unsigned turn;
    for (turn = 1; turn <= ctx->turn_limit; turn++)
        if (one_turn(&L, turn) == TURN_DONE)
            break;
    if (turn > ctx->turn_limit)
        out_of_turns(&L);
    eph_buf_release(&L.partial);
    json_decref(L.messages);
    json_decref(L.tools);
    return 0;
}
