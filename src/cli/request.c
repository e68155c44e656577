#include "cli/request.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/http.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/glob.h"
#include "common/id.h"
#include "common/money.h"
#include "common/text.h"

enum opt_id {
    OPT_PROMPT,
    OPT_SHELL,
    OPT_NO_SHELL,
    OPT_WEB,
    OPT_NO_WEB,
    OPT_WEB_ALLOW,
    OPT_TIMEOUT,
    OPT_BUDGET,
    OPT_MAX_COST,
    OPT_MODEL,
    OPT_IMAGE,
    OPT_FILE,
    OPT_CONNECTION,
    OPT_ZDR,
    OPT_REPLAY_OF,
    OPT_IDEMPOTENCY_KEY,
    OPT_DETACH,
    OPT_JSON,
    OPT_METADATA,
    OPT_OUTPUT,
    OPT_DOWNLOAD,
    OPT_IDLE_TIMEOUT,
};

/* Which command takes an option: `run`, `sandbox create`, or both. */
enum opt_scope { BOTH, RUN_ONLY, SANDBOX_ONLY };

static const struct {
    const char *name;
    bool has_arg;
    enum opt_id id;
    enum opt_scope scope;
} options[] = {
    {"--prompt", true, OPT_PROMPT, RUN_ONLY},
    {"--shell", false, OPT_SHELL, RUN_ONLY},
    {"--no-shell", false, OPT_NO_SHELL, RUN_ONLY},
    {"--web", false, OPT_WEB, BOTH},
    {"--no-web", false, OPT_NO_WEB, BOTH},
    {"--web-allow", true, OPT_WEB_ALLOW, BOTH},
    {"--timeout", true, OPT_TIMEOUT, BOTH},
    {"--budget", true, OPT_BUDGET, BOTH},
    {"--max-cost-micros", true, OPT_MAX_COST, BOTH},
    {"--model", true, OPT_MODEL, RUN_ONLY},
    {"--image", true, OPT_IMAGE, BOTH},
    {"--file", true, OPT_FILE, BOTH},
    {"--connection", true, OPT_CONNECTION, BOTH},
    {"--zdr", false, OPT_ZDR, BOTH},
    {"--replay-of", true, OPT_REPLAY_OF, RUN_ONLY},
    {"--idempotency-key", true, OPT_IDEMPOTENCY_KEY, BOTH},
    {"--detach", false, OPT_DETACH, RUN_ONLY},
    {"--json", false, OPT_JSON, BOTH},
    {"--metadata", true, OPT_METADATA, BOTH},
    {"--output", true, OPT_OUTPUT, RUN_ONLY},
    {"--download", true, OPT_DOWNLOAD, RUN_ONLY},
    {"--idle-timeout", true, OPT_IDLE_TIMEOUT, SANDBOX_ONLY},
};

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* A decimal integer in [min, max], nothing else: no sign, no spaces, no suffix. */
static bool parse_integer(const char *s, long long min, long long max, long long *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > EPH_CLI_IDEMPOTENCY_KEY_MAX)
        return false;
    for (; *k; k++)
        if (*k < 0x20 || *k > 0x7e)
            return false;
    return true;
}

/* --budget DOLLARS: a positive amount in dollars. */
static int parse_budget(struct eph_cli_run_opts *o, const char *v, char *err, size_t errlen)
{
    int64_t micros;
    const char *why;
    if (eph_money_parse_dollars_why(v, &micros, &why) == 0 && micros <= 0)
        why = "not more than zero";
    if (why)
        return fail(err, errlen, -EINVAL,
                    "--budget must be a positive amount in dollars like 0.04: '%.40s' is %s", v,
                    why);
    o->max_cost_micros = micros;
    return 0;
}

/* --metadata KEY=VALUE, by the API's rule (docs/API.md): keys of 1 to 64 bytes, values of at
 * most 512, each key once. */
static int add_metadata(struct eph_cli_run_opts *o, const char *v, char *err, size_t errlen)
{
    const char *sep = strchr(v, '=');
    size_t klen = sep ? (size_t)(sep - v) : 0;
    if (!sep || klen == 0 || klen > 64 || strlen(sep + 1) > 512)
        return fail(err, errlen, -EINVAL,
                    "--metadata needs KEY=VALUE, a key of 1 to 64 bytes and a value of at most "
                    "512, not '%.100s'",
                    v);
    for (size_t m = 0; m < o->nmetadata; m++)
        if (strncmp(o->metadata[m], v, klen + 1) == 0)
            return fail(err, errlen, -EINVAL, "--metadata key '%.*s' is given twice", (int)klen, v);
    o->metadata[o->nmetadata++] = v;
    return 0;
}

/* One option of `ephemeral run` (its table entry id, name and value) into o. */
static int apply_option(struct eph_cli_run_opts *o, int id, const char *v, bool *budget_given,
                        bool *max_cost_given, char *err, size_t errlen)
{
    long long n;
    switch (id) {
    case OPT_PROMPT:
        if (!*v)
            return fail(err, errlen, -EINVAL, "--prompt must not be empty");
        o->prompt = v;
        break;
    case OPT_SHELL:
    case OPT_NO_SHELL:
        o->shell = id == OPT_SHELL;
        break;
    case OPT_WEB:
    case OPT_NO_WEB:
        o->web = id == OPT_WEB;
        break;
    case OPT_TIMEOUT:
    case OPT_IDLE_TIMEOUT: {
        int max = o->sandbox ? EPH_CLI_SANDBOX_TIMEOUT_MAX : EPH_CLI_TIMEOUT_MAX;
        if (!parse_integer(v, 1, max, &n))
            return fail(err, errlen, -EINVAL,
                        "--%s must be a whole number of seconds from 1 to %d, not '%.40s'",
                        id == OPT_TIMEOUT ? "timeout" : "idle-timeout", max, v);
        *(id == OPT_TIMEOUT ? &o->timeout_seconds : &o->idle_timeout_seconds) = (long)n;
        break;
    }
    case OPT_BUDGET:
        *budget_given = true;
        return parse_budget(o, v, err, errlen);
    case OPT_MAX_COST:
        if (!parse_integer(v, 1, INT64_MAX, &n))
            return fail(err, errlen, -EINVAL,
                        "--max-cost-micros must be a positive whole number, not '%.40s'", v);
        o->max_cost_micros = n;
        *max_cost_given = true;
        break;
    case OPT_MODEL:
        if (!*v)
            return fail(err, errlen, -EINVAL, "--model must not be empty");
        o->model = v;
        break;
    case OPT_IMAGE:
        if (!*v)
            return fail(err, errlen, -EINVAL, "--image must not be empty");
        o->image = v;
        break;
    case OPT_FILE:
        if (!*v || *v == ':')
            return fail(err, errlen, -EINVAL, "--file needs LOCAL[:PATH], not '%.200s'", v);
        o->files[o->nfiles++] = v;
        break;
    case OPT_OUTPUT: {
        /* The server's rule (docs/API.md, "Outputs"), so that a bad pattern is a usage error.
         */
        const char *why = eph_glob_pattern_error(v, strlen(v));
        if (why)
            return fail(err, errlen, -EINVAL, "--output '%.100s': %s", v, why);
        o->outputs[o->noutputs++] = v;
        break;
    }
    case OPT_DOWNLOAD:
        if (!*v)
            return fail(err, errlen, -EINVAL, "--download must not be empty");
        o->download = v;
        break;
    case OPT_CONNECTION:
        if (!*v)
            return fail(err, errlen, -EINVAL, "--connection must not be empty");
        o->connections[o->nconnections++] = v;
        break;
    case OPT_WEB_ALLOW:
        if (!*v)
            return fail(err, errlen, -EINVAL, "--web-allow needs a domain");
        o->web_allow[o->nweb_allow++] = v;
        break;
    case OPT_ZDR:
        o->zdr = true;
        break;
    case OPT_REPLAY_OF:
        if (!eph_id_is_run(v))
            return fail(err, errlen, -EINVAL,
                        "--replay-of needs a run id (run_ and 32 lowercase hex digits), not "
                        "'%.40s'",
                        v);
        o->replay_of = v;
        break;
    case OPT_IDEMPOTENCY_KEY:
        if (!key_ok(v))
            return fail(err, errlen, -EINVAL,
                        "--idempotency-key must be 1 to %d printable ascii characters",
                        EPH_CLI_IDEMPOTENCY_KEY_MAX);
        o->idempotency_key = v;
        break;
    case OPT_DETACH:
        o->detach = true;
        break;
    case OPT_JSON:
        o->json = true;
        break;
    case OPT_METADATA:
        return add_metadata(o, v, err, errlen);
    }
    return 0;
}

static int parse(int argc, char **argv, bool sandbox, struct eph_cli_run_opts *o, char *err,
                 size_t errlen)
{
    memset(o, 0, sizeof(*o));
    o->sandbox = sandbox;
    o->shell = -1;
    o->web = -1;
    o->timeout_seconds = -1;
    o->idle_timeout_seconds = -1;
    o->max_cost_micros = -1;
    /* Never more entries than arguments, so argc bounds both lists. */
    o->files = calloc((size_t)argc + 1, sizeof(*o->files));
    o->connections = calloc((size_t)argc + 1, sizeof(*o->connections));
    o->web_allow = calloc((size_t)argc + 1, sizeof(*o->web_allow));
    o->metadata = calloc((size_t)argc + 1, sizeof(*o->metadata));
    o->outputs = calloc((size_t)argc + 1, sizeof(*o->outputs));
    if (!o->files || !o->connections || !o->web_allow || !o->metadata || !o->outputs)
        return fail(err, errlen, -ENOMEM, "out of memory");
    bool budget_given = false, max_cost_given = false, positional_only = false;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (positional_only || a[0] != '-' || strcmp(a, "-") == 0) {
            if (o->request_path)
                return fail(err, errlen, -EINVAL, "unexpected argument '%.200s'", a);
            o->request_path = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            positional_only = true;
            continue;
        }
        /* "--name=value" or "--name value". */
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        size_t k;
        size_t nopts = sizeof(options) / sizeof(options[0]);
        for (k = 0; k < nopts; k++)
            if (strlen(options[k].name) == nlen && strncmp(options[k].name, a, nlen) == 0)
                break;
        if (k == nopts)
            return fail(err, errlen, -EINVAL, "unknown option '%.*s'",
                        (int)(nlen > 100 ? 100 : nlen), a);
        const char *name = options[k].name;
        if (options[k].scope == (sandbox ? RUN_ONLY : SANDBOX_ONLY))
            return fail(err, errlen, -EINVAL, "%s is an option of `ephemeral %s`%s", name,
                        sandbox ? "run" : "sandbox create",
                        options[k].id == OPT_SHELL || options[k].id == OPT_NO_SHELL
                            ? ": a sandbox always has a shell"
                            : "");
        const char *v = NULL;
        if (options[k].has_arg) {
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc)
                v = argv[++i];
            else
                return fail(err, errlen, -EINVAL, "option '%s' needs a value", name);
        } else if (eq) {
            return fail(err, errlen, -EINVAL, "option '%s' takes no value", name);
        }
        int rc = apply_option(o, options[k].id, v, &budget_given, &max_cost_given, err, errlen);
        if (rc)
            return rc;
    }
    if (budget_given && max_cost_given)
        return fail(err, errlen, -EINVAL, "give --budget or --max-cost-micros, not both");
    if (o->nfiles > EPH_CLI_FILES_MAX)
        return fail(err, errlen, -EINVAL, "at most %d files per run", EPH_CLI_FILES_MAX);
    if (o->nmetadata > EPH_CLI_METADATA_MAX)
        return fail(err, errlen, -EINVAL, "at most %d --metadata pairs per run",
                    EPH_CLI_METADATA_MAX);
    if (o->download && o->detach)
        return fail(err, errlen, -EINVAL, "--download waits for the run: not with --detach");
    if (o->noutputs > EPH_CLI_OUTPUTS_MAX)
        return fail(err, errlen, -EINVAL, "at most %d --output patterns per run",
                    EPH_CLI_OUTPUTS_MAX);
    return 0;
}

int eph_cli_run_parse(int argc, char **argv, struct eph_cli_run_opts *o, char *err, size_t errlen)
{
    return parse(argc, argv, false, o, err, errlen);
}

int eph_cli_sandbox_parse(int argc, char **argv, struct eph_cli_run_opts *o, char *err,
                          size_t errlen)
{
    return parse(argc, argv, true, o, err, errlen);
}

void eph_cli_run_opts_release(struct eph_cli_run_opts *o)
{
    free(o->files);
    free(o->connections);
    free(o->web_allow);
    free(o->metadata);
    free(o->outputs);
    o->outputs = NULL;
    o->files = NULL;
    o->connections = NULL;
    o->web_allow = NULL;
    o->metadata = NULL;
}

bool eph_cli_file_path_ok(const char *path)
{
    /* The server's rule (common/text.c), so that what the client sends is never refused. */
    return path && eph_text_file_path_error(path, strlen(path)) == NULL;
}

/* Reads all of f into b (capped); -EMSGSIZE past the cap, -EIO on a read error. */
static int read_stream(FILE *f, struct eph_buf *b)
{
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        int rc = eph_buf_append(b, chunk, n);
        if (rc)
            return rc;
    }
    return ferror(f) ? -EIO : 0;
}

int eph_cli_open_regular(const char *path, FILE **out, off_t *size)
{
    EPH_AUTOCLOSE int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    FILE *f = fdopen(fd, "rb");
    if (!f)
        return -errno;
    eph_steal_fd(&fd); /* the stream owns it now */
    *out = f;
    *size = st.st_size;
    return 0;
}

static int read_request(const char *path, FILE *stdin_f, json_t **out, char *err, size_t errlen)
{
    struct eph_buf b;
    eph_buf_init(&b, EPH_CLI_BODY_MAX);
    int rc;
    const char *shown = strcmp(path, "-") == 0 ? "standard input" : path;
    if (strcmp(path, "-") == 0) {
        rc = read_stream(stdin_f, &b);
    } else {
        FILE *f;
        off_t size;
        rc = eph_cli_open_regular(path, &f, &size);
        if (rc) {
            eph_buf_release(&b);
            return fail(err, errlen, rc, "cannot read '%.200s': %s", path,
                        rc == -EINVAL ? "not a regular file" : strerror(-rc));
        }
        rc = read_stream(f, &b);
        fclose(f);
    }
    if (rc) {
        eph_buf_release(&b);
        if (rc == -EMSGSIZE)
            return fail(err, errlen, rc, "request '%.200s' is too large (over %zu MiB)", shown,
                        EPH_CLI_BODY_MAX >> 20);
        return fail(err, errlen, rc, "cannot read '%.200s': %s", shown, strerror(-rc));
    }
    json_error_t jerr;
    /* Duplicate keys are refused: which "shell" would the server believe? */
    json_t *j = json_loadb(b.data ? b.data : "", b.len, JSON_REJECT_DUPLICATES, &jerr);
    eph_buf_release(&b);
    if (!j)
        return fail(err, errlen, -EINVAL, "'%.200s' is not valid json: line %d: %s", shown,
                    jerr.line, jerr.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return fail(err, errlen, -EINVAL, "'%.200s' must hold a json object", shown);
    }
    *out = j;
    return 0;
}

/* One --file: {"path": PATH, "content_base64": …}. *total counts the bytes read so far. */
static int read_file_arg(const char *arg, size_t *total, json_t **out, char *err, size_t errlen)
{
    char local[PATH_MAX];
    const char *colon = strchr(arg, ':');
    size_t llen = colon ? (size_t)(colon - arg) : strlen(arg);
    if (llen >= sizeof(local))
        return fail(err, errlen, -EINVAL, "--file path too long");
    memcpy(local, arg, llen);
    local[llen] = '\0';
    const char *path;
    if (colon) {
        path = colon + 1;
    } else {
        const char *slash = strrchr(local, '/');
        path = slash ? slash + 1 : local;
    }
    const char *why = eph_text_file_path_error(path, strlen(path));
    if (why)
        return fail(err, errlen, -EINVAL,
                    "--file '%.200s': %s (give LOCAL:PATH with a relative PATH naming a file)", arg,
                    why);
    FILE *f;
    off_t size;
    int rc = eph_cli_open_regular(local, &f, &size);
    if (rc)
        return fail(err, errlen, rc, "cannot read '%.200s': %s", local,
                    rc == -EINVAL ? "not a regular file" : strerror(-rc));
    struct eph_buf b;
    /* The cap is what the run may still take, so a big file fails before it is all in memory. */
    eph_buf_init(&b, EPH_CLI_FILES_BYTES_MAX - *total);
    rc = (size_t)size > EPH_CLI_FILES_BYTES_MAX - *total ? -EMSGSIZE : read_stream(f, &b);
    fclose(f);
    if (rc) {
        eph_buf_release(&b);
        if (rc == -EMSGSIZE)
            return fail(err, errlen, rc, "files are too large: over %zu MiB in all",
                        EPH_CLI_FILES_BYTES_MAX >> 20);
        return fail(err, errlen, rc, "cannot read '%.200s': %s", local, strerror(-rc));
    }
    *total += b.len;
    size_t elen = sodium_base64_ENCODED_LEN(b.len, sodium_base64_VARIANT_ORIGINAL);
    char *enc = malloc(elen);
    if (!enc) {
        eph_buf_release(&b);
        return fail(err, errlen, -ENOMEM, "out of memory");
    }
    sodium_bin2base64(enc, elen, (const unsigned char *)(b.data ? b.data : ""), b.len,
                      sodium_base64_VARIANT_ORIGINAL);
    eph_buf_release(&b);
    json_t *o = json_pack("{s:s, s:s}", "path", path, "content_base64", enc);
    free(enc);
    if (!o)
        return fail(err, errlen, -EINVAL, "--file '%.200s': the path is not valid utf-8", arg);
    *out = o;
    return 0;
}

/* A JSON array of the strings, or NULL when one is not UTF-8 (or out of memory). */
static json_t *strings_array(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *s = json_string(v[i]);
        if (!s || json_array_append_new(a, s)) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static int set(json_t *body, const char *key, json_t *value, char *err, size_t errlen)
{
    if (!value || json_object_set_new(body, key, value))
        return fail(err, errlen, -EINVAL, "'%s' is not valid utf-8", key);
    return 0;
}

int eph_cli_run_body(const struct eph_cli_run_opts *o, FILE *stdin_f, json_t **out, char *err,
                     size_t errlen)
{
    json_t *body = NULL;
    int rc = 0;
    if (o->request_path) {
        rc = read_request(o->request_path, stdin_f, &body, err, errlen);
        if (rc)
            return rc;
    } else {
        body = json_object();
        if (!body)
            return fail(err, errlen, -ENOMEM, "out of memory");
    }
    if (o->prompt)
        rc = set(body, "prompt", json_string(o->prompt), err, errlen);
    if (!rc && o->shell >= 0)
        rc = set(body, "shell", json_boolean(o->shell), err, errlen);
    if (!rc && o->nweb_allow && o->web != 0)
        rc = set(body, "web",
                 json_pack("{s:o}", "allow", strings_array(o->web_allow, o->nweb_allow)), err,
                 errlen);
    else if (!rc && o->web >= 0)
        rc = set(body, "web", json_boolean(o->web), err, errlen);
    if (!rc && o->timeout_seconds > 0)
        rc = set(body, "timeout_seconds", json_integer(o->timeout_seconds), err, errlen);
    if (!rc && o->idle_timeout_seconds > 0)
        rc = set(body, "idle_timeout_seconds", json_integer(o->idle_timeout_seconds), err, errlen);
    if (!rc && o->max_cost_micros > 0)
        rc = set(body, "max_cost_micros", json_integer(o->max_cost_micros), err, errlen);
    if (!rc && o->model)
        rc = set(body, "model", json_string(o->model), err, errlen);
    if (!rc && o->image)
        rc = set(body, "image", json_string(o->image), err, errlen);
    if (!rc && o->zdr)
        rc = set(body, "zero_data_retention", json_true(), err, errlen);
    if (!rc && o->replay_of)
        rc = set(body, "replay_of", json_string(o->replay_of), err, errlen);
    if (!rc && o->nconnections)
        rc = set(body, "connections", strings_array(o->connections, o->nconnections), err, errlen);
    if (!rc && o->noutputs)
        rc = set(body, "outputs", strings_array(o->outputs, o->noutputs), err, errlen);
    if (!rc && o->nmetadata) {
        /* --metadata is merged into the file's metadata, a flag winning over the file's value. */
        json_t *md = json_object_get(body, "metadata");
        if (!md) {
            rc = set(body, "metadata", json_object(), err, errlen);
            md = json_object_get(body, "metadata");
        }
        if (!rc && !json_is_object(md))
            rc = fail(err, errlen, -EINVAL, "the request's metadata is not an object");
        for (size_t i = 0; !rc && i < o->nmetadata; i++) {
            const char *sep = strchr(o->metadata[i], '=');
            char key[65];
            size_t klen = (size_t)(sep - o->metadata[i]);
            memcpy(key, o->metadata[i], klen);
            key[klen] = '\0';
            if (json_object_set_new(md, key, json_string(sep + 1)))
                rc = fail(err, errlen, -EINVAL, "--metadata '%.100s' is not valid utf-8",
                          o->metadata[i]);
        }
    }
    if (!rc && o->nfiles) {
        json_t *a = json_array();
        if (!a)
            rc = fail(err, errlen, -ENOMEM, "out of memory");
        size_t total = 0;
        for (size_t i = 0; !rc && i < o->nfiles; i++) {
            json_t *f = NULL;
            rc = read_file_arg(o->files[i], &total, &f, err, errlen);
            if (!rc && json_array_append_new(a, f))
                rc = fail(err, errlen, -ENOMEM, "out of memory");
        }
        /* The server's rule for the set: no path twice, none both a file and a directory. */
        const char *paths[EPH_CLI_FILES_MAX];
        size_t n = rc ? 0 : json_array_size(a), first, second;
        for (size_t i = 0; i < n && i < EPH_CLI_FILES_MAX; i++)
            paths[i] = json_string_value(json_object_get(json_array_get(a, i), "path"));
        const char *why = n && n <= EPH_CLI_FILES_MAX
                              ? eph_text_file_paths_conflict(paths, n, &first, &second)
                              : NULL;
        if (why)
            rc = fail(err, errlen, -EINVAL, "--file: '%.200s' and '%.200s': %s", paths[first],
                      paths[second], why);
        if (rc)
            json_decref(a);
        else
            rc = set(body, "files", a, err, errlen);
    }
    if (!rc) {
        /* A replay's prompt is the original's. */
        const char *prompt = json_string_value(json_object_get(body, "prompt"));
        if ((!prompt || !*prompt) && !json_object_get(body, "replay_of") && !o->sandbox)
            rc = fail(err, errlen, -EINVAL,
                      "a prompt is required: give --prompt TEXT or a request file with one");
        else if (!json_object_get(body, "max_cost_micros"))
            rc = fail(err, errlen, -EINVAL,
                      "a budget is required: give --budget DOLLARS, --max-cost-micros N or "
                      "max_cost_micros in the request file");
    }
    if (rc) {
        json_decref(body);
        return rc;
    }
    *out = body;
    return 0;
}

int eph_cli_idempotency_key(char out[37])
{
    unsigned char r[16];
    int rc = eph_random_bytes(r, sizeof(r));
    if (rc)
        return rc;
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4 */
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0],
             r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
             r[14], r[15]);
    return 0;
}
