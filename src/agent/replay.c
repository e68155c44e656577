/*
 * replay.c - the embedded default model: recorded model turns, replayed.
 *
 * The transcripts folder holds one folder per example, each with request.json (whose "prompt"
 * selects the recording) and transcript.jsonl: one recorded model response per line,
 *
 *   {"content": "..." | null,
 *    "tool_calls": [{"id": "call_1", "name": "shell", "arguments": {...} | "raw string"}],
 *    "finish_reason": "tool_calls",
 *    "usage": {"input_tokens": 1536, "output_tokens": 166, "cached_input_tokens": 0}}
 *
 * The n-th model call of a run (n = the assistant turns already in the conversation, so a model
 * is stateless and shared by every run) gets the n-th line. Tool calls still execute for real.
 * So that a replayed answer reports what really happened rather than what happened when it was
 * recorded, its content may quote the results of earlier tool calls of the same run:
 *
 *   {{ID.stdout}}  {{ID.stderr}}  {{ID.exit_code}}  {{ID.stdout:N}}  {{ID.stderr:N}}
 *
 * where ID is a tool call id and N a line number (from 1), trimmed. A reference to a result that
 * does not exist renders as "(no output)".
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/model.h"
#include "agent/providers.h"
#include "common/buf.h"
#include "common/log.h"

#define TRANSCRIPT_MAX (4u << 20)
#define TEMPLATE_OUT_MAX (256u << 10)

struct recording {
    char *prompt;
    json_t *turns; /* array of response objects */
};

struct replay_model {
    struct eph_model base;
    struct recording *recs;
    size_t nrecs;
};

static json_t *load_jsonl(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    json_t *turns = json_array();
    char *line = NULL;
    size_t cap = 0, total = 0;
    ssize_t n;
    unsigned lineno = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        total += (size_t)n;
        if (total > TRANSCRIPT_MAX) {
            snprintf(err, errlen, "'%s' is too large", path);
            goto fail;
        }
        if (n == 1 && line[0] == '\n')
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)n, 0, &je);
        if (!o || !json_is_object(o)) {
            snprintf(err, errlen, "'%s' line %u: %s", path, lineno, o ? "not an object" : je.text);
            json_decref(o);
            goto fail;
        }
        json_array_append_new(turns, o);
    }
    free(line);
    fclose(f);
    return turns;
fail:
    free(line);
    fclose(f);
    json_decref(turns);
    return NULL;
}

static int replay_open(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                       size_t errlen)
{
    const char *dir = cfg->transcripts ? cfg->transcripts : "examples";
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "replay model '%s': cannot open transcripts folder '%s': %s", cfg->id,
                 dir, strerror(errno));
        return -ENOENT;
    }
    struct replay_model *m = calloc(1, sizeof(*m));
    if (!m) {
        closedir(d);
        return -ENOMEM;
    }
    m->base.ops = &eph_model_replay_ops;
    m->base.cfg = cfg;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char req_path[4096], tr_path[4096];
        snprintf(req_path, sizeof(req_path), "%s/%s/request.json", dir, de->d_name);
        snprintf(tr_path, sizeof(tr_path), "%s/%s/transcript.jsonl", dir, de->d_name);
        json_t *req = json_load_file(req_path, 0, NULL);
        if (!req)
            continue; /* not an example folder */
        const char *prompt = json_string_value(json_object_get(req, "prompt"));
        json_t *turns = prompt ? load_jsonl(tr_path, err, errlen) : NULL;
        if (!turns) {
            if (!prompt)
                snprintf(err, errlen, "'%s' has no prompt", req_path);
            json_decref(req);
            rc = -EINVAL;
            break;
        }
        struct recording *p = realloc(m->recs, (m->nrecs + 1) * sizeof(*p));
        if (!p) {
            json_decref(req);
            json_decref(turns);
            rc = -ENOMEM;
            break;
        }
        m->recs = p;
        m->recs[m->nrecs].prompt = strdup(prompt);
        m->recs[m->nrecs].turns = turns;
        m->nrecs++;
        json_decref(req);
    }
    closedir(d);
    if (rc) {
        eph_model_replay_ops.free(&m->base);
        return rc;
    }
    EPH_INFO("model", "replay model '%s': %zu recordings in '%s'", cfg->id, m->nrecs, dir);
    *out = &m->base;
    return 0;
}

static void replay_free(struct eph_model *base)
{
    struct replay_model *m = (struct replay_model *)base;
    if (!m)
        return;
    for (size_t i = 0; i < m->nrecs; i++) {
        free(m->recs[i].prompt);
        json_decref(m->recs[i].turns);
    }
    free(m->recs);
    free(m);
}

/* The parsed result of the tool call with this id in the conversation, or NULL (borrowed from
 * results, which owns the parsed objects). */
static json_t *find_result(json_t *messages, json_t *results, const char *id)
{
    json_t *hit = json_object_get(results, id);
    if (hit)
        return hit;
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        if (strcmp(json_string_value(json_object_get(msg, "role")) ?: "", "tool") != 0)
            continue;
        const char *tid = json_string_value(json_object_get(msg, "tool_call_id"));
        if (!tid || strcmp(tid, id) != 0)
            continue;
        const char *content = json_string_value(json_object_get(msg, "content"));
        json_t *o = content ? json_loads(content, 0, NULL) : NULL;
        if (!o)
            o = json_object();
        json_object_set_new(results, id, o);
        return o;
    }
    return NULL;
}

/* Line n (from 1) of s, trimmed, into b. */
static int append_line(struct eph_buf *b, const char *s, long n)
{
    const char *p = s;
    for (long i = 1; i < n && p; i++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p)
        return eph_buf_appends(b, "(no output)");
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\r' || p[len - 1] == '\t'))
        len--;
    while (len && (*p == ' ' || *p == '\t'))
        p++, len--;
    return eph_buf_append(b, p, len);
}

static int render_ref(struct eph_buf *b, json_t *messages, json_t *results, const char *ref,
                      size_t len)
{
    char spec[256];
    if (len >= sizeof(spec))
        return eph_buf_appends(b, "(no output)");
    memcpy(spec, ref, len);
    spec[len] = '\0';
    char *dot = strrchr(spec, '.');
    if (!dot)
        return eph_buf_appends(b, "(no output)");
    *dot = '\0';
    char *field = dot + 1;
    long line = 0;
    char *colon = strchr(field, ':');
    if (colon) {
        *colon = '\0';
        line = strtol(colon + 1, NULL, 10);
    }
    json_t *res = find_result(messages, results, spec);
    json_t *v = res ? json_object_get(res, field) : NULL;
    if (json_is_integer(v))
        return eph_buf_appendf(b, "%lld", (long long)json_integer_value(v));
    const char *s = json_string_value(v);
    if (!s)
        return eph_buf_appends(b, "(no output)");
    if (line > 0)
        return append_line(b, s, line);
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        n--;
    return eph_buf_append(b, s, n);
}

static char *render(const char *tmpl, json_t *messages)
{
    struct eph_buf b;
    eph_buf_init(&b, TEMPLATE_OUT_MAX);
    json_t *results = json_object();
    const char *p = tmpl;
    int rc = 0;
    while (!rc && *p) {
        const char *open = strstr(p, "{{");
        const char *close = open ? strstr(open + 2, "}}") : NULL;
        if (!open || !close) {
            rc = eph_buf_appends(&b, p);
            break;
        }
        rc = eph_buf_append(&b, p, (size_t)(open - p));
        if (!rc)
            rc = render_ref(&b, messages, results, open + 2, (size_t)(close - open - 2));
        p = close + 2;
    }
    json_decref(results);
    if (rc) {
        eph_buf_release(&b);
        return NULL;
    }
    return eph_buf_steal(&b);
}

static int replay_call(struct eph_model *base, const struct eph_model_request *req,
                       struct eph_model_response *resp, char *err, size_t errlen)
{
    struct replay_model *m = (struct replay_model *)base;
    memset(resp, 0, sizeof(*resp));
    resp->replayed = true;
    resp->attempts = 1;
    if (req->cancel && atomic_load(req->cancel))
        return -ECANCELED;
    const struct recording *rec = NULL;
    for (size_t i = 0; i < m->nrecs && req->prompt; i++)
        if (strcmp(m->recs[i].prompt, req->prompt) == 0)
            rec = &m->recs[i];
    if (!rec) {
        snprintf(err, errlen, "no recorded transcript matches this prompt (replay model '%s')",
                 base->cfg->id);
        return -ENOENT;
    }
    size_t turn = 0, i;
    json_t *msg;
    json_array_foreach(req->messages, i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && strcmp(role, "assistant") == 0)
            turn++;
    }
    json_t *rt = json_array_get(rec->turns, turn);
    if (!rt) {
        snprintf(err, errlen, "the recording has no model turn %zu", turn + 1);
        return -EPROTO;
    }
    /* A recording bills nobody, but the run is charged its recorded usage, as if sent. */
    resp->sent = true;
    resp->usage_final = true;
    json_t *usage = json_object_get(rt, "usage");
    resp->input_tokens = eph_model_json_tokens(json_object_get(usage, "input_tokens"));
    resp->cached_input_tokens =
        eph_model_json_tokens(json_object_get(usage, "cached_input_tokens"));
    resp->output_tokens = eph_model_json_tokens(json_object_get(usage, "output_tokens"));
    const char *fr = json_string_value(json_object_get(rt, "finish_reason"));
    json_t *calls = json_object_get(rt, "tool_calls");
    resp->finish_reason = strdup(fr ? fr : (json_array_size(calls) ? "tool_calls" : "stop"));
    json_t *call;
    unsigned n = eph_model_count_calls(req->messages);
    json_array_foreach(calls, i, call)
    {
        json_t *args = json_object_get(call, "arguments");
        char *raw = json_is_string(args) ? strdup(json_string_value(args))
                                         : json_dumps(args ? args : json_object(), JSON_COMPACT);
        int rc = eph_model_add_call(resp, json_string_value(json_object_get(call, "id")),
                                    json_string_value(json_object_get(call, "name")), raw, ++n);
        free(raw);
        if (rc) {
            snprintf(err, errlen, "cannot replay tool call %zu", i + 1);
            return rc;
        }
    }
    const char *content = json_string_value(json_object_get(rt, "content"));
    if (content) {
        resp->content = render(content, req->messages);
        if (!resp->content) {
            snprintf(err, errlen, "the recorded answer is too large");
            return -EMSGSIZE;
        }
    }
    return 0;
}

const struct eph_model_ops eph_model_replay_ops = {
    .name = "replay",
    .open = replay_open,
    .call = replay_call,
    .free = replay_free,
};
