#include "cli/http.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "common/error.h"

#define USER_AGENT "ephemeral-cli/1"

/* Writes the base URL without credentials into out: what every message shows. */
static void redact_url(const char *url, char *out, size_t outlen)
{
    CURLU *u = curl_url();
    char *clean = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK) {
        curl_url_set(u, CURLUPART_USER, NULL, 0);
        curl_url_set(u, CURLUPART_PASSWORD, NULL, 0);
        if (curl_url_get(u, CURLUPART_URL, &clean, 0) != CURLUE_OK)
            clean = NULL;
    }
    snprintf(out, outlen, "%s", clean ? clean : "EPHEMERAL_URL");
    /* curl_url_get adds a "/" path to a bare host; the base URL is shown as given. */
    size_t n = strlen(out);
    if (clean && n > 1 && out[n - 1] == '/' && url[strlen(url) - 1] != '/')
        out[n - 1] = '\0';
    curl_free(clean);
    curl_url_cleanup(u);
}

int eph_cli_http_init(struct eph_cli_http *h)
{
    memset(h, 0, sizeof(*h));
    const char *url = getenv("EPHEMERAL_URL");
    if (!url || !*url)
        url = EPH_CLI_DEFAULT_URL;
    if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0) {
        fputs("ephemeral: EPHEMERAL_URL must start with http:// or https://\n", stderr);
        return -EINVAL;
    }
    const char *key = getenv("EPHEMERAL_API_KEY");
    if (!key || !*key) {
        fputs("ephemeral: EPHEMERAL_API_KEY is not set\n", stderr);
        return -EINVAL;
    }
    /* Printable ASCII only: anything else would be a header injection, or not a key. The key
     * itself is never echoed, not even when it is wrong. */
    for (const char *p = key; *p; p++) {
        if (*p <= 0x20 || *p >= 0x7f) {
            fputs("ephemeral: EPHEMERAL_API_KEY holds characters no api key has\n", stderr);
            return -EINVAL;
        }
    }
    h->base = strdup(url);
    size_t alen = strlen("Authorization: Bearer ") + strlen(key) + 1;
    h->auth = malloc(alen);
    if (!h->base || !h->auth) {
        eph_cli_http_release(h);
        return -ENOMEM;
    }
    snprintf(h->auth, alen, "Authorization: Bearer %s", key);
    size_t n = strlen(h->base);
    while (n > 0 && h->base[n - 1] == '/')
        h->base[--n] = '\0';
    redact_url(h->base, h->shown_url, sizeof(h->shown_url));
    h->curl = curl_easy_init();
    if (!h->curl) {
        eph_cli_http_release(h);
        return -ENOMEM;
    }
    return 0;
}

void eph_cli_http_release(struct eph_cli_http *h)
{
    if (h->curl)
        curl_easy_cleanup(h->curl);
    if (h->auth) {
        explicit_bzero(h->auth, strlen(h->auth));
        free(h->auth);
    }
    free(h->base);
    h->curl = NULL;
    h->auth = NULL;
    h->base = NULL;
}

void eph_cli_response_init(struct eph_cli_response *r)
{
    memset(r, 0, sizeof(*r));
    eph_buf_init(&r->body, EPH_CLI_BODY_MAX);
}

void eph_cli_response_release(struct eph_cli_response *r)
{
    eph_buf_release(&r->body);
    json_decref(r->json);
    r->json = NULL;
    r->status = 0;
}

struct xfer {
    struct eph_cli_http *h;
    struct eph_cli_response *resp;
    const struct eph_cli_stream *st; /* NULL for a plain request */
    int mode;                        /* 0 undecided, 1 streaming, 2 buffering */
    int cb_rc;
    bool too_large;
};

/* Decides once, when the headers are complete, whether this answer is the stream asked for or an
 * error / a JSON fallback to read whole. */
static void decide(struct xfer *x)
{
    x->mode = 2;
    if (!x->st)
        return;
    long status = 0;
    char *ct = NULL;
    curl_easy_getinfo(x->h->curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(x->h->curl, CURLINFO_CONTENT_TYPE, &ct);
    size_t want = strlen(x->st->content_type);
    if (status == 200 && ct && strncasecmp(ct, x->st->content_type, want) == 0 &&
        (ct[want] == '\0' || ct[want] == ';' || ct[want] == ' ')) {
        x->mode = 1;
        x->resp->streamed = true;
    }
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct xfer *x = arg;
    size_t n = size * nmemb;
    if (x->mode == 0)
        decide(x); /* headers are complete by the first body byte */
    if (x->mode == 1) {
        int rc = x->st->on_chunk(x->st->arg, ptr, n);
        if (rc) {
            x->cb_rc = rc;
            return 0; /* makes curl stop with CURLE_WRITE_ERROR */
        }
        return n;
    }
    if (eph_buf_append(&x->resp->body, ptr, n)) {
        x->too_large = true;
        return 0;
    }
    return n;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct xfer *x = arg;
    size_t n = size * nmemb;
    static const char name[] = "idempotent-replayed:";
    if (n > sizeof(name) && strncasecmp(ptr, name, sizeof(name) - 1) == 0) {
        const char *v = ptr + sizeof(name) - 1;
        while (*v == ' ' || *v == '\t')
            v++;
        if (strncasecmp(v, "true", 4) == 0)
            x->resp->replayed = true;
    }
    return n;
}

/* libcurl's messages read "Failed to connect …: Couldn't connect to server"; ours are lowercase.
 * Lowers the first letter of each ": "-separated part, unless it starts an acronym ("SSL"). */
static void lower_parts(char *s)
{
    for (char *p = s; *p; p++) {
        bool start = p == s || (p >= s + 2 && p[-1] == ' ' && p[-2] == ':');
        if (start && isupper((unsigned char)p[0]) && !isupper((unsigned char)p[1]))
            p[0] = (char)tolower((unsigned char)p[0]);
    }
}

static int map_curl_error(struct eph_cli_http *h, CURLcode cc, const struct xfer *x)
{
    int rc;
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        rc = -ECONNREFUSED;
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        rc = -EHOSTUNREACH;
        break;
    case CURLE_OPERATION_TIMEDOUT:
        rc = -ETIMEDOUT;
        break;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        rc = -ECONNRESET;
        break;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        rc = -EINVAL;
        break;
    case CURLE_WRITE_ERROR:
        if (x->too_large) {
            snprintf(h->error, sizeof(h->error), "the answer from %s is too large (over %zu MiB)",
                     h->shown_url, EPH_CLI_BODY_MAX >> 20);
            return -EMSGSIZE;
        }
        rc = -EIO;
        break;
    default:
        rc = -EIO;
        break;
    }
    char detail[CURL_ERROR_SIZE];
    snprintf(detail, sizeof(detail), "%s",
             h->curl_error[0] ? h->curl_error : curl_easy_strerror(cc));
    lower_parts(detail);
    if (rc == -EINVAL)
        snprintf(h->error, sizeof(h->error), "bad EPHEMERAL_URL '%s': %s", h->shown_url, detail);
    else
        snprintf(h->error, sizeof(h->error), "cannot reach %s: %s", h->shown_url, detail);
    return rc;
}

/* Sets everything but the body handling, shared by plain and streamed requests. */
static int setup(struct eph_cli_http *h, const char *method, const char *path,
                 const char *const *extra, const char *content_type, struct curl_slist **hdrs)
{
    CURL *c = h->curl;
    curl_easy_reset(c);
    h->curl_error[0] = '\0';
    h->error[0] = '\0';
    size_t ulen = strlen(h->base) + strlen(path) + 1;
    char *url = malloc(ulen);
    if (!url)
        return -ENOMEM;
    snprintf(url, ulen, "%s%s", h->base, path);
    CURLcode cc = curl_easy_setopt(c, CURLOPT_URL, url);
    free(url); /* libcurl copies option strings */
    if (cc != CURLE_OK)
        return -ENOMEM;
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->curl_error);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, EPH_CLI_CONNECT_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_USERAGENT, USER_AGENT);
    /* No redirects: a redirect is not part of this API, and following one would carry the
     * request (and its key) somewhere the user did not name. */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
    /* The path as built: a sandbox's file path with ".." must reach the server (which refuses
     * it), not be resolved here into another file. */
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    bool upload = content_type && strcmp(content_type, "application/octet-stream") == 0;
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);

    struct curl_slist *l = NULL, *t;
#define ADD(s)                                                                                     \
    do {                                                                                           \
        t = curl_slist_append(l, (s));                                                             \
        if (!t) {                                                                                  \
            curl_slist_free_all(l);                                                                \
            return -ENOMEM;                                                                        \
        }                                                                                          \
        l = t;                                                                                     \
    } while (0)
    ADD(h->auth);
    /* No 100-continue round trip for JSON bodies; an upload waits for it, so that a refusal
     * comes before megabytes are sent. */
    ADD(upload ? "Expect: 100-continue" : "Expect:");
    bool accept_given = false;
    for (size_t i = 0; extra && extra[i]; i++) {
        if (strncasecmp(extra[i], "Accept:", 7) == 0)
            accept_given = true;
        ADD(extra[i]);
    }
    if (!accept_given)
        ADD("Accept: application/json");
    if (content_type) {
        char ct[96];
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        ADD(ct);
    } else if (strcmp(method, "POST") == 0)
        ADD("Content-Type:"); /* an empty POST: drop curl's form content type */
#undef ADD
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, l);
    *hdrs = l;
    return 0;
}

static void parse_json(struct eph_cli_response *resp)
{
    if (resp->body.len == 0)
        return;
    json_error_t jerr;
    resp->json = json_loadb(resp->body.data, resp->body.len, 0, &jerr);
}

int eph_cli_http_do(struct eph_cli_http *h, const struct eph_cli_request *rq,
                    struct eph_cli_response *resp)
{
    struct curl_slist *hdrs = NULL;
    bool post = strcmp(rq->method, "POST") == 0;
    const char *ct = rq->upload ? "application/octet-stream" : rq->body ? "application/json" : NULL;
    int rc = setup(h, rq->method, rq->path, rq->headers, ct, &hdrs);
    if (rc)
        return rc;
    CURL *c = h->curl;
    eph_cli_response_release(resp);
    eph_buf_reset(&resp->body);
    resp->replayed = false;
    resp->streamed = false;
    struct xfer x = {.h = h, .resp = resp};
    if (rq->upload) {
        /* libcurl's default read function is fread() on this stream. */
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READDATA, rq->upload);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->upload_size);
    } else if (rq->body || post) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(rq->body ? rq->body_len : 0));
    }
    curl_easy_setopt(c, CURLOPT_TIMEOUT, rq->timeout_s ? rq->timeout_s : EPH_CLI_REQUEST_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    CURLcode cc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    if (cc != CURLE_OK)
        return map_curl_error(h, cc, &x);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    parse_json(resp);
    return 0;
}

int eph_cli_http_stream(struct eph_cli_http *h, const struct eph_cli_stream *st,
                        struct eph_cli_response *resp)
{
    struct curl_slist *hdrs = NULL;
    const char *method = st->method ? st->method : "GET";
    int rc = setup(h, method, st->path, st->headers, st->body ? "application/json" : NULL, &hdrs);
    if (rc)
        return rc;
    CURL *c = h->curl;
    eph_cli_response_release(resp);
    eph_buf_reset(&resp->body);
    resp->replayed = false;
    resp->streamed = false;
    struct xfer x = {.h = h, .resp = resp, .st = st};
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, st->body ? st->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(st->body ? st->body_len : 0));
    }
    /* A live stream has no total timeout; the server's keep-alives (every 15 s) keep it above
     * one byte per idle period, so silence this long means the connection is gone. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, st->idle_timeout_s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    CURLcode cc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    if (cc == CURLE_OK && x.mode == 0)
        decide(&x); /* an empty body: an empty stream (an empty file) is one too */
    if (x.cb_rc)
        return x.cb_rc;
    if (cc != CURLE_OK)
        return map_curl_error(h, cc, &x);
    if (!resp->streamed)
        parse_json(resp);
    return 0;
}

bool eph_cli_http_transient(int rc)
{
    return rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -ETIMEDOUT;
}

/* The API error codes of a sandbox's calls that have an exit status of their own (cli.h). */
static const struct {
    long status;
    const char *code;
    int exit;
} code_exits[] = {
    {404, "sandbox_not_found", EPH_CLI_EXIT_NO_SANDBOX},
    {409, "sandbox_ended", EPH_CLI_EXIT_SANDBOX_ENDED},
    {409, "sandbox_busy", EPH_CLI_EXIT_SANDBOX_BUSY},
    {400, "invalid_path", EPH_CLI_EXIT_BAD_PATH},
    {404, "file_not_found", EPH_CLI_EXIT_NO_FILE},
    {413, "file_too_large", EPH_CLI_EXIT_TOO_LARGE},
    {413, "body_too_large", EPH_CLI_EXIT_TOO_LARGE},
};

/* The exit status an answer (rc 0, its status and error) or a transport error (rc < 0) means. */
static int exit_for(int rc, long status, const json_t *err)
{
    if (rc == -EMSGSIZE || rc == -EPROTO)
        return EPH_CLI_EXIT_SERVER;
    if (rc < 0)
        return EPH_CLI_EXIT_UNREACHABLE;
    const char *code = json_string_value(json_object_get(err, "code"));
    const char *param = json_string_value(json_object_get(err, "param"));
    for (size_t i = 0; code && i < sizeof(code_exits) / sizeof(code_exits[0]); i++)
        if (status == code_exits[i].status && strcmp(code, code_exits[i].code) == 0)
            return code_exits[i].exit;
    /* A sandbox's file path the server refused before the sandbox saw it ("..", "/etc/x"). */
    if (status == 400 && code && strcmp(code, "invalid_parameter") == 0 && param &&
        strcmp(param, "path") == 0)
        return EPH_CLI_EXIT_BAD_PATH;
    if (status >= 400 && status < 500)
        return EPH_CLI_EXIT_REFUSED;
    return EPH_CLI_EXIT_SERVER;
}

/* The API's error shape on stdout, for --json: a script reads one JSON document either way. */
static void print_json_error(const char *type, const char *code, const char *message)
{
    json_t *e =
        json_pack("{s:{s:s,s:s,s:s}}", "error", "type", type, "code", code, "message", message);
    char *s = e ? json_dumps(e, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    if (s)
        puts(s);
    free(s);
    json_decref(e);
}

void eph_cli_http_report(struct eph_cli_http *h, const struct eph_cli_response *resp, int rc)
{
    json_t *err = resp ? json_object_get(resp->json, "error") : NULL;
    h->exit_code = exit_for(rc, resp ? resp->status : 0, err);
    if (rc < 0) {
        const char *msg = h->error[0] ? h->error : eph_strerror(rc);
        fprintf(stderr, "ephemeral: %s\n", msg);
        if (h->json_errors)
            print_json_error("connection_error",
                             rc == -EMSGSIZE ? "answer_too_large" : "server_unreachable", msg);
        return;
    }
    const char *msg = json_string_value(json_object_get(err, "message"));
    fputs("ephemeral: ", stderr);
    if (msg && *msg) {
        /* The server's words, made safe for the terminal. */
        eph_cli_render_text(stderr, msg, false, 1000);
        fputc('\n', stderr);
    } else {
        fprintf(stderr, "%s answered http %ld\n", h->shown_url, resp->status);
    }
    if (resp->status == 401)
        fputs("ephemeral: check EPHEMERAL_API_KEY\n", stderr);
    if (h->json_errors) {
        if (json_is_object(err)) {
            char *s = json_dumps(resp->json, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            if (s)
                puts(s);
            free(s);
        } else {
            char m[320];
            snprintf(m, sizeof(m), "%s answered http %ld", h->shown_url, resp->status);
            print_json_error("api_error", "unexpected_answer", m);
        }
    }
}

void eph_cli_http_bad_answer(struct eph_cli_http *h, const char *what)
{
    h->exit_code = EPH_CLI_EXIT_SERVER;
    fprintf(stderr, "ephemeral: %s answered with something that is not %s\n", h->shown_url, what);
    if (h->json_errors) {
        char m[400];
        snprintf(m, sizeof(m), "%s answered with something that is not %s", h->shown_url, what);
        print_json_error("api_error", "unexpected_answer", m);
    }
}

int eph_cli_http_exit(const struct eph_cli_http *h)
{
    return h->exit_code ? h->exit_code : EPH_CLI_EXIT_SERVER;
}

static int escape(const char *s, bool keep_slash, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain =
            isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        size_t need = plain ? 1 : 3;
        if (o + need >= outlen)
            return -EMSGSIZE;
        if (plain) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (o >= outlen)
        return -EMSGSIZE;
    out[o] = '\0';
    return 0;
}

int eph_cli_http_escape(const char *s, char *out, size_t outlen)
{
    return escape(s, false, out, outlen);
}

int eph_cli_http_escape_path(const char *s, char *out, size_t outlen)
{
    return escape(s, true, out, outlen);
}
