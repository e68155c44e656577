/*
 * replay.c - the embedded default model: recorded model turns, replayed (see replay.h).
 *
 * The `replay` provider's `transcripts` setting names a folder, or one file. A folder holds:
 *   - exported transcripts (`NAME.jsonl`, what GET /v1/runs/{id}/transcript returns), and
 *   - hand-written examples, one folder each (`NAME/request.json`, whose "prompt" may select the
 *     recording, and `NAME/transcript.jsonl`: one recorded model response per line,
 *
 *   {"content": "..." | null,
 *    "tool_calls": [{"id": "call_1", "name": "shell", "arguments": {...} | "raw string"}],
 *    "finish_reason": "tool_calls",
 *    "usage": {"input_tokens": 1536, "output_tokens": 166, "cached_input_tokens": 0}}
 *
 *   or an exported transcript under that name).
 * A run picks the recording named by its metadata "transcript", else the one whose prompt is the
 * run's; a model whose `transcripts` is one file answers every run from it. The folder is read
 * again at a run's first call when it changed, so recordings are added without a restart.
 *
 * The n-th model call of a run (n = the assistant turns already in the conversation, so a model
 * is stateless and shared by every run) gets the n-th turn. Tool calls still execute for real.
 * So that a hand-written answer reports what really happened rather than what happened when it
 * was written, its content may quote the results of earlier tool calls of the same run:
 *
 *   {{ID.stdout}}  {{ID.stderr}}  {{ID.exit_code}}  {{ID.stdout:N}}  {{ID.stderr:N}}
 *
 * where ID is a tool call id and N a line number (from 1), trimmed. A reference to a result that
 * does not exist renders as "(no output)". An exported transcript's answers are replayed verbatim.
 */
#include "agent/replay.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/providers.h"
#include "common/buf.h"
#include "common/log.h"

#define TEMPLATE_OUT_MAX (256u << 10)
/* Recordings in a folder at most. */
#define RECORDINGS_MAX 1024u

/* ---- the record ---- */

int eph_replay_record_init(struct eph_replay_record *rec, const char *name)
{
    memset(rec, 0, sizeof(*rec));
    rec->name = strdup(name ? name : "");
    rec->turns = json_array();
    rec->results = json_object();
    rec->exchanges = json_array();
    if (!rec->name || !rec->turns || !rec->results || !rec->exchanges) {
        eph_replay_record_release(rec);
        return -ENOMEM;
    }
    return 0;
}

void eph_replay_record_release(struct eph_replay_record *rec)
{
    free(rec->name);
    free(rec->prompt);
    json_decref(rec->turns);
    json_decref(rec->results);
    json_decref(rec->exchanges);
    memset(rec, 0, sizeof(*rec));
}

static bool opt_string(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return !v || json_is_string(v) || json_is_null(v);
}

/* A model turn's response as the transcript records it: the fields replay reads, typed. */
static bool response_ok(const json_t *resp, char *err, size_t errlen)
{
    if (!json_is_object(resp)) {
        snprintf(err, errlen, "a model_turn needs a 'response' object");
        return false;
    }
    if (!opt_string(resp, "text") || !opt_string(resp, "finish_reason")) {
        snprintf(err, errlen, "a model_turn's 'text' and 'finish_reason' must be strings");
        return false;
    }
    json_t *usage = json_object_get(resp, "usage");
    if (usage && !json_is_object(usage)) {
        snprintf(err, errlen, "a model_turn's 'usage' must be an object");
        return false;
    }
    json_t *calls = json_object_get(resp, "tool_calls");
    if (calls && !json_is_array(calls)) {
        snprintf(err, errlen, "a model_turn's 'tool_calls' must be an array");
        return false;
    }
    if (json_array_size(calls) > EPH_MODEL_MAX_CALLS) {
        snprintf(err, errlen, "a model_turn has more than %d tool calls", EPH_MODEL_MAX_CALLS);
        return false;
    }
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        if (!json_is_object(c) || !json_is_string(json_object_get(c, "name")) ||
            !opt_string(c, "id") || !opt_string(c, "arguments")) {
            snprintf(err, errlen,
                     "tool call %zu of a model_turn needs a 'name' and string 'id' and "
                     "'arguments'",
                     i + 1);
            return false;
        }
    }
    return true;
}

int eph_replay_record_add(struct eph_replay_record *rec, const json_t *line, char *err,
                          size_t errlen)
{
    const char *kind = json_string_value(json_object_get(line, "kind"));
    if (!json_is_object(line) || !kind) {
        snprintf(err, errlen, "a transcript line must be an object with a 'kind'");
        return -EINVAL;
    }
    rec->exported = true;
    if (strcmp(kind, "run") == 0) {
        json_t *prompt = json_object_get(line, "prompt");
        if (prompt && !json_is_string(prompt)) {
            snprintf(err, errlen, "the run line's 'prompt' must be a string");
            return -EINVAL;
        }
        if (prompt && !rec->prompt && !(rec->prompt = strdup(json_string_value(prompt))))
            return -ENOMEM;
        return 0;
    }
    if (strcmp(kind, "model_turn") == 0) {
        json_t *resp = json_object_get(line, "response");
        if (!response_ok(resp, err, errlen))
            return -EINVAL;
        if (json_array_size(rec->turns) >= EPH_REPLAY_TURNS_MAX) {
            snprintf(err, errlen, "more than %u model turns", EPH_REPLAY_TURNS_MAX);
            return -E2BIG;
        }
        return json_array_append(rec->turns, resp) ? -ENOMEM : 0;
    }
    if (strcmp(kind, "tool_call") == 0) {
        json_t *call = json_object_get(line, "call");
        const char *id = json_string_value(json_object_get(call, "id"));
        json_t *result = json_object_get(line, "result");
        if (!id || (result && !json_is_string(result) && !json_is_null(result))) {
            snprintf(err, errlen,
                     "a tool_call needs a 'call' with a string 'id', and a string "
                     "'result'");
            return -EINVAL;
        }
        if (!json_is_string(result))
            return 0; /* the call never got a result (the run stopped during it) */
        return json_object_set(rec->results, id, result) ? -ENOMEM : 0;
    }
    if (strcmp(kind, "exchange") == 0)
        return json_array_append(rec->exchanges, (json_t *)line) ? -ENOMEM : 0;
    return 0; /* divergence, and kinds of later versions: nothing to replay */
}

int eph_replay_record_parse(struct eph_replay_record *rec, const char *text, size_t len, char *err,
                            size_t errlen)
{
    if (len > EPH_REPLAY_TEXT_MAX) {
        snprintf(err, errlen, "the transcript is larger than %u MiB", EPH_REPLAY_TEXT_MAX >> 20);
        return -EMSGSIZE;
    }
    size_t off = 0;
    unsigned lineno = 0;
    while (off < len) {
        const char *p = text + off;
        const char *nl = memchr(p, '\n', len - off);
        size_t n = nl ? (size_t)(nl - p) : len - off;
        off += n + (nl ? 1 : 0);
        lineno++;
        if (n > EPH_REPLAY_LINE_MAX) {
            snprintf(err, errlen, "line %u is longer than %u MiB", lineno,
                     EPH_REPLAY_LINE_MAX >> 20);
            return -EMSGSIZE;
        }
        size_t blank = 0;
        while (blank < n && (p[blank] == ' ' || p[blank] == '\t' || p[blank] == '\r'))
            blank++;
        if (blank == n)
            continue;
        json_error_t je;
        json_t *o = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
        if (!o) {
            snprintf(err, errlen, "line %u: not JSON: %s", lineno, je.text);
            return -EINVAL;
        }
        char why[160];
        int rc = eph_replay_record_add(rec, o, why, sizeof(why));
        json_decref(o);
        if (rc) {
            snprintf(err, errlen, "line %u: %s", lineno, rc == -ENOMEM ? "out of memory" : why);
            return rc;
        }
    }
    return 0;
}

/* ---- the models ---- */

struct recording {
    struct eph_replay_record rec;
};

struct replay_model {
    struct eph_model base;
    pthread_mutex_t lock; /* the recordings, re-read while other runs replay */
    struct recording *recs;
    size_t nrecs;
    bool single_file;     /* transcripts names one file: every run replays it */
    struct timespec seen; /* the folder's mtime when it was read */
    /* A replay_of run's own model: */
    bool own;
    struct eph_replay_hooks hooks;
    json_t *checked; /* call ids whose results were compared */
};

static void recs_free(struct recording *recs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        eph_replay_record_release(&recs[i].rec);
    free(recs);
}

/* A whole file, capped. */
static char *read_capped(const char *path, size_t cap, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct eph_buf b;
    eph_buf_init(&b, cap);
    char chunk[65536];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = eph_buf_append(&b, chunk, n);
    bool bad = ferror(f);
    fclose(f);
    if (rc || bad) {
        snprintf(err, errlen, "'%s' %s", path, rc == -EMSGSIZE ? "is too large" : "cannot be read");
        eph_buf_release(&b);
        return NULL;
    }
    *len = b.len;
    char *text = eph_buf_steal(&b);
    return text ? text : strdup("");
}

/* A hand-written transcript (one response per line) or an exported one (lines with a kind). */
static int load_recording(const char *path, const char *name, const char *prompt,
                          struct eph_replay_record *rec, char *err, size_t errlen)
{
    size_t len = 0;
    char *text = read_capped(path, EPH_REPLAY_TEXT_MAX, &len, err, errlen);
    if (!text)
        return -EINVAL;
    int rc = eph_replay_record_init(rec, name);
    if (rc) {
        free(text);
        return rc;
    }
    /* Which format: the first line that is not blank says (an exported one has a kind). */
    const char *p = text + strspn(text, " \t\r\n");
    const char *eol = strchr(p, '\n');
    json_error_t fe;
    json_t *first = json_loadb(p, eol ? (size_t)(eol - p) : strlen(p), 0, &fe);
    /* Not a guess at the format without memory: a recording read wrong would replay wrong. */
    bool lost = !first && json_error_code(&fe) == json_error_out_of_memory;
    bool exported = json_is_string(json_object_get(first, "kind"));
    json_decref(first);
    char why[200];
    if (lost) {
        rc = -ENOMEM;
    } else if (exported) {
        rc = eph_replay_record_parse(rec, text, len, why, sizeof(why));
    } else {
        /* Each line a response object. */
        size_t off = 0;
        unsigned lineno = 0;
        while (!rc && off < len) {
            const char *l = text + off;
            const char *nl = memchr(l, '\n', len - off);
            size_t n = nl ? (size_t)(nl - l) : len - off;
            off += n + (nl ? 1 : 0);
            lineno++;
            if (n == 0 || (n == 1 && l[0] == '\r'))
                continue;
            json_error_t je;
            json_t *o = json_loadb(l, n, 0, &je);
            if (!o && json_error_code(&je) == json_error_out_of_memory) {
                rc = -ENOMEM;
            } else if (!json_is_object(o)) {
                snprintf(why, sizeof(why), "line %u: %s", lineno, o ? "not an object" : je.text);
                rc = -EINVAL;
            } else if (json_array_size(rec->turns) >= EPH_REPLAY_TURNS_MAX) {
                snprintf(why, sizeof(why), "more than %u model turns", EPH_REPLAY_TURNS_MAX);
                rc = -E2BIG;
            } else if (json_array_append(rec->turns, o)) {
                rc = -ENOMEM;
            }
            json_decref(o);
        }
    }
    free(text);
    if (!rc && prompt && !rec->prompt && !(rec->prompt = strdup(prompt)))
        rc = -ENOMEM;
    if (rc) {
        if (rc != -ENOMEM)
            snprintf(err, errlen, "'%s': %s", path, why);
        eph_replay_record_release(rec);
    }
    return rc;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* One entry of the folder: an example folder or an exported NAME.jsonl. 0 (loaded), 1 (not a
 * recording: skipped), or an error. */
static int load_entry(const char *dir, const char *entry, struct eph_replay_record *rec, char *err,
                      size_t errlen)
{
    char path[4096], name[256];
    if (ends_with(entry, ".jsonl")) {
        snprintf(name, sizeof(name), "%.*s", (int)(strlen(entry) - 6), entry);
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, entry) >= sizeof(path))
            return 1;
        return load_recording(path, name, NULL, rec, err, errlen);
    }
    snprintf(name, sizeof(name), "%s", entry);
    char req_path[4096];
    if ((size_t)snprintf(req_path, sizeof(req_path), "%s/%s/request.json", dir, entry) >=
            sizeof(req_path) ||
        (size_t)snprintf(path, sizeof(path), "%s/%s/transcript.jsonl", dir, entry) >= sizeof(path))
        return 1;
    json_t *req = json_load_file(req_path, 0, NULL);
    if (!req)
        return 1; /* not an example folder */
    const char *prompt = json_string_value(json_object_get(req, "prompt"));
    int rc = load_recording(path, name, prompt, rec, err, errlen);
    json_decref(req);
    return rc;
}

/* The recordings of a folder. strict: the first bad one is the error (at start-up, where the
 * operator sees it); otherwise a bad one is logged and skipped (a folder re-read while serving). */
static int load_dir(const char *dir, bool strict, struct recording **out, size_t *nout, char *err,
                    size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot open transcripts folder '%s': %s", dir, strerror(errno));
        return -ENOENT;
    }
    struct recording *recs = NULL;
    size_t n = 0;
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (n >= RECORDINGS_MAX) {
            EPH_WARN("model", "transcripts folder '%s': more than %u recordings; the rest ignored",
                     dir, RECORDINGS_MAX);
            break;
        }
        struct eph_replay_record rec;
        char why[512];
        int lrc = load_entry(dir, de->d_name, &rec, why, sizeof(why));
        if (lrc == 1)
            continue;
        if (lrc && (strict || lrc == -ENOMEM)) {
            snprintf(err, errlen, "%s", lrc == -ENOMEM ? "out of memory" : why);
            rc = lrc;
            break;
        }
        if (lrc) {
            EPH_WARN("model", "recording skipped: %s", why);
            continue;
        }
        struct recording *p = realloc(recs, (n + 1) * sizeof(*p));
        if (!p) {
            eph_replay_record_release(&rec);
            rc = -ENOMEM;
            break;
        }
        recs = p;
        recs[n++].rec = rec;
    }
    closedir(d);
    if (rc) {
        recs_free(recs, n);
        return rc;
    }
    *out = recs;
    *nout = n;
    return 0;
}

static const char *transcripts_path(const struct eph_model_config *cfg)
{
    return cfg->transcripts ? cfg->transcripts : "examples";
}

static struct replay_model *model_new(const struct eph_model_config *cfg)
{
    struct replay_model *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->base.ops = &eph_model_replay_ops;
    m->base.cfg = cfg;
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

static int replay_open(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                       size_t errlen)
{
    const char *path = transcripts_path(cfg);
    struct stat sb;
    if (stat(path, &sb)) {
        snprintf(err, errlen, "replay model '%s': cannot open transcripts '%s': %s", cfg->id, path,
                 strerror(errno));
        return -ENOENT;
    }
    struct replay_model *m = model_new(cfg);
    if (!m)
        return -ENOMEM;
    int rc;
    char why[768] = "";
    if (S_ISREG(sb.st_mode)) {
        m->single_file = true;
        m->recs = calloc(1, sizeof(*m->recs));
        rc = m->recs ? load_recording(path, cfg->id, NULL, &m->recs[0].rec, why, sizeof(why))
                     : -ENOMEM;
        if (!rc)
            m->nrecs = 1;
    } else {
        m->seen = sb.st_mtim;
        rc = load_dir(path, true, &m->recs, &m->nrecs, why, sizeof(why));
    }
    if (rc) {
        snprintf(err, errlen, "replay model '%s': %s", cfg->id,
                 rc == -ENOMEM ? "out of memory" : why);
        eph_model_replay_ops.free(&m->base);
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    EPH_INFO("model", "replay model '%s': %zu recordings in '%s'", cfg->id, m->nrecs, path);
    *out = &m->base;
    return 0;
}

int eph_replay_model_open(struct eph_replay_record *rec, const struct eph_model_config *cfg,
                          const struct eph_replay_hooks *hooks, struct eph_model **out)
{
    struct replay_model *m = model_new(cfg);
    struct recording *r = m ? calloc(1, sizeof(*r)) : NULL;
    json_t *checked = r ? json_object() : NULL;
    if (!checked) {
        free(r);
        if (m)
            eph_model_replay_ops.free(&m->base);
        eph_replay_record_release(rec);
        return -ENOMEM;
    }
    r->rec = *rec;
    memset(rec, 0, sizeof(*rec));
    m->recs = r;
    m->nrecs = 1;
    m->single_file = true;
    m->own = true;
    m->checked = checked;
    if (hooks)
        m->hooks = *hooks;
    *out = &m->base;
    return 0;
}

static void replay_free(struct eph_model *base)
{
    struct replay_model *m = (struct replay_model *)base;
    if (!m)
        return;
    recs_free(m->recs, m->nrecs);
    json_decref(m->checked);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* A run's first call: the folder is read again when it changed (new recordings without a
 * restart). Called with the lock held. */
static void rescan(struct replay_model *m)
{
    const char *dir = transcripts_path(m->base.cfg);
    struct stat sb;
    if (m->single_file || stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return;
    if (sb.st_mtim.tv_sec == m->seen.tv_sec && sb.st_mtim.tv_nsec == m->seen.tv_nsec)
        return;
    struct recording *recs;
    size_t n;
    char err[512];
    if (load_dir(dir, false, &recs, &n, err, sizeof(err))) {
        EPH_WARN("model", "replay model '%s': transcripts not read again: %s", m->base.cfg->id,
                 err);
        return;
    }
    recs_free(m->recs, m->nrecs);
    m->recs = recs;
    m->nrecs = n;
    m->seen = sb.st_mtim;
    EPH_INFO("model", "replay model '%s': %zu recordings in '%s' (read again)", m->base.cfg->id, n,
             dir);
}

static const struct eph_replay_record *
choose(struct replay_model *m, const struct eph_model_request *req, char *err, size_t errlen)
{
    if (m->single_file)
        return m->nrecs ? &m->recs[0].rec : NULL;
    if (req->recording) {
        for (size_t i = 0; i < m->nrecs; i++)
            if (strcmp(m->recs[i].rec.name, req->recording) == 0)
                return &m->recs[i].rec;
        snprintf(err, errlen, "no recording named '%.64s' (replay model '%s')", req->recording,
                 m->base.cfg->id);
        return NULL;
    }
    for (size_t i = 0; i < m->nrecs && req->prompt; i++)
        if (m->recs[i].rec.prompt && strcmp(m->recs[i].rec.prompt, req->prompt) == 0)
            return &m->recs[i].rec;
    snprintf(err, errlen, "no recorded transcript matches this prompt (replay model '%s')",
             m->base.cfg->id);
    return NULL;
}

/* A replay_of run: each tool result in the conversation not compared yet, against the original's
 * under the same call id. The turn of a result is the assistant message that asked for it. */
static void compare_results(struct replay_model *m, const struct eph_replay_record *rec,
                            json_t *messages)
{
    unsigned turn = 0;
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && strcmp(role, "assistant") == 0)
            turn++;
        if (!role || strcmp(role, "tool") != 0)
            continue;
        const char *id = json_string_value(json_object_get(msg, "tool_call_id"));
        if (!id || json_object_get(m->checked, id))
            continue;
        json_object_set_new(m->checked, id, json_true());
        const char *original = json_string_value(json_object_get(rec->results, id));
        const char *replayed = json_string_value(json_object_get(msg, "content"));
        if (!original || !replayed || strcmp(original, replayed) == 0)
            continue;
        struct eph_replay_divergence d = {
            .turn = turn,
            .call_id = id,
            .tool = json_string_value(json_object_get(msg, "name")) ?: "",
            .original = original,
            .replayed = replayed,
        };
        if (m->hooks.diverged)
            m->hooks.diverged(m->hooks.ctx, &d);
    }
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

static int answer(struct replay_model *m, const struct eph_replay_record *rec,
                  const struct eph_model_request *req, struct eph_model_response *resp, char *err,
                  size_t errlen)
{
    size_t turn = 0, i;
    json_t *msg;
    json_array_foreach(req->messages, i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && strcmp(role, "assistant") == 0)
            turn++;
    }
    if (m->own)
        compare_results(m, rec, req->messages);
    json_t *rt = json_array_get(rec->turns, turn);
    if (!rt) {
        snprintf(err, errlen, "the record has no model turn %zu: the replay went past it",
                 turn + 1);
        return m->own ? -ENODATA : -EPROTO;
    }
    resp->usage_final = true;
    if (!m->own) {
        /* A recording bills nobody, but the run is charged its recorded usage, as if sent. A
         * replay_of run is not: its model cost is 0. */
        resp->sent = true;
        json_t *usage = json_object_get(rt, "usage");
        resp->input_tokens = eph_model_json_tokens(json_object_get(usage, "input_tokens"));
        resp->cached_input_tokens =
            eph_model_json_tokens(json_object_get(usage, "cached_input_tokens"));
        resp->output_tokens = eph_model_json_tokens(json_object_get(usage, "output_tokens"));
    }
    const char *fr = json_string_value(json_object_get(rt, "finish_reason"));
    json_t *calls = json_object_get(rt, "tool_calls");
    resp->finish_reason = strdup(fr ? fr : (json_array_size(calls) ? "tool_calls" : "stop"));
    if (!resp->finish_reason)
        return -ENOMEM;
    json_t *call;
    unsigned n = eph_model_count_calls(req->messages);
    json_array_foreach(calls, i, call)
    {
        json_t *args = json_object_get(call, "arguments");
        /* No arguments at all are "{}" (eph_model_add_call). */
        char *raw = json_is_string(args) ? strdup(json_string_value(args))
                    : args               ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY)
                                         : NULL;
        int rc =
            raw || !args
                ? eph_model_add_call(resp, json_string_value(json_object_get(call, "id")),
                                     json_string_value(json_object_get(call, "name")), raw, ++n)
                : -ENOMEM;
        free(raw);
        if (rc) {
            snprintf(err, errlen, "cannot replay tool call %zu", i + 1);
            return rc;
        }
    }
    const char *content =
        json_string_value(json_object_get(rt, rec->exported ? "text" : "content"));
    if (content) {
        resp->content = rec->exported ? strdup(content) : render(content, req->messages);
        if (!resp->content) {
            snprintf(err, errlen, "the recorded answer is too large");
            return -EMSGSIZE;
        }
    }
    return 0;
}

/* The names of the recordings, for a message: "a, b, c" (the first ten, then "…"). */
static void recording_names(const struct replay_model *m, char *out, size_t outlen)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < m->nrecs && o + 1 < outlen; i++) {
        int n = i < 10 ? snprintf(out + o, outlen - o, "%s%s", i ? ", " : "", m->recs[i].rec.name)
                       : snprintf(out + o, outlen - o, ", …");
        if (n < 0 || (size_t)n >= outlen - o || i >= 10)
            break;
        o += (size_t)n;
    }
}

static int replay_answers(struct eph_model *base, const char *prompt, const char *recording,
                          char *err, size_t errlen)
{
    struct replay_model *m = (struct replay_model *)base;
    struct eph_model_request req = {.prompt = prompt, .recording = recording};
    char why[256];
    pthread_mutex_lock(&m->lock);
    rescan(m);
    int rc = choose(m, &req, why, sizeof(why)) ? 0 : -ENOENT;
    if (rc) {
        char names[512];
        recording_names(m, names, sizeof(names));
        if (recording)
            snprintf(err, errlen,
                     "the replay model '%s' has no recording named '%.64s'; it has: %s "
                     "(docs/MODELS.md says how to use a real model)",
                     m->base.cfg->id, recording, names[0] ? names : "none");
        else
            snprintf(err, errlen,
                     "the replay model '%s' has no recording of this prompt: it answers only the "
                     "prompts of its recordings (%s), word for word; docs/MODELS.md says how to "
                     "use a real model",
                     m->base.cfg->id, names[0] ? names : "none");
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
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
    pthread_mutex_lock(&m->lock);
    if (eph_model_count_calls(req->messages) == 0 && json_array_size(req->messages) <= 2)
        rescan(m);
    const struct eph_replay_record *rec = choose(m, req, err, errlen);
    int rc = rec ? answer(m, rec, req, resp, err, errlen) : -ENOENT;
    pthread_mutex_unlock(&m->lock);
    return rc;
}

const struct eph_model_ops eph_model_replay_ops = {
    .name = "replay",
    .open = replay_open,
    .call = replay_call,
    .free = replay_free,
    .answers = replay_answers,
};
