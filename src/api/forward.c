/*
 * forward.c - a sandbox's calls sent on to the node that serves it.
 *
 * A sandbox lives on the node that made it: its process, its guest connection and its commands
 * are there. On a shared store any node answers for any sandbox; a call that needs the sandbox
 * itself (commands, files) and reaches another node is sent on over HTTP to the serving node's
 * URL (the store's nodes table, written by each node at start-up), with the caller's own
 * credentials, and the answer is passed back as it comes (docs/SANDBOXES.md). The serving node
 * authenticates the call again. A forwarded call carries Ephemeral-Forwarded and is never
 * forwarded again, so two nodes that disagree about an owner cannot make a loop.
 *
 * One thread per forwarded call runs its transfer. The client's connection is suspended until
 * the answer's head arrives, and again whenever the body has nothing to give; the thread resumes
 * it. The body passes through a buffer of FWD_BUFFER bytes: the transfer waits while it is full,
 * so a slow client slows the serving node down rather than growing this one. A client that
 * leaves, or a server that stops, ends the transfer (gone).
 *
 * Locks: the forwarder's lock guards its list and count and is taken before a call's lock,
 * never after. A connection is resumed only under the call's lock and only when the call has
 * marked it suspended, so every resume follows its suspend.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <microhttpd.h>

#include "common/log.h"
#include "api/api.h"

/* Bytes of an answer held here at once; more waits at the serving node. */
#define FWD_BUFFER (256u * 1024u)
/* Calls forwarded at once by this node; more are refused 503. */
#define FWD_MAX 256
#define FWD_CONNECT_SECONDS 5
/* The longest header line of an answer kept (longer ones are not among those passed back). */
#define FWD_HEADER_MAX 512

/* The request headers sent on; the rest (cookies, proxies' own) are not. */
static const char *const sent_headers[] = {
    "Authorization", "Content-Type", "Accept", "Prefer", "Last-Event-ID", "Idempotency-Key",
};

/* The answer's headers passed back (Retry-After and Request-Id are this node's own). */
static const char *const passed_headers[] = {
    "Content-Type",           "Content-Disposition", "Content-Security-Policy",
    "X-Content-Type-Options", "Cache-Control",       "X-Accel-Buffering",
};
#define NPASSED (sizeof(passed_headers) / sizeof(passed_headers[0]))

struct eph_api_forwarder {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* signalled when a call's thread ends */
    struct eph_api_forward *head;
    unsigned n;
    bool stopping;
};

struct eph_api_forward {
    struct eph_api_forwarder *owner;
    struct eph_api_forward *prev, *next; /* in owner's list while its thread runs */
    struct MHD_Connection *conn;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* room in the buffer, or gone */
    unsigned refs;       /* the request, the thread, the response */
    bool suspended;      /* the connection waits for this call to resume it */
    bool head_done;      /* status and headers known (or the transfer failed before) */
    bool done;           /* the transfer ended */
    bool gone;           /* nobody reads any more: the transfer ends */
    CURLcode result;
    long status;
    char *passed[NPASSED];
    unsigned retry_after;
    bool length_known;
    uint64_t length; /* when the answer said */
    char *data;      /* the body not yet read: data[off, len) */
    size_t len, off;
    /* The request, owned by the thread. */
    CURL *curl;
    struct curl_slist *headers;
    char *url;
    char *body; /* the request's, taken from it: the transfer may outlive the request */
    size_t body_len;
    bool url_failed;
    char node[64];
    char request_id[24];
};

int eph_api_forwarder_new(struct eph_api_forwarder **out)
{
    struct eph_api_forwarder *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    *out = f;
    return 0;
}

/* Under fw->lock. */
static void resume_locked(struct eph_api_forward *fw)
{
    if (fw->suspended) {
        fw->suspended = false;
        MHD_resume_connection(fw->conn);
    }
}

static void end_transfer(struct eph_api_forward *fw)
{
    pthread_mutex_lock(&fw->lock);
    fw->gone = true;
    pthread_cond_broadcast(&fw->cond);
    resume_locked(fw);
    pthread_mutex_unlock(&fw->lock);
}

void eph_api_forwarder_stop(struct eph_api_forwarder *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    for (struct eph_api_forward *fw = f->head; fw; fw = fw->next)
        end_transfer(fw);
    /* Each thread sees gone within a progress tick (at most a second) and leaves the list. */
    while (f->n)
        pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
}

void eph_api_forwarder_free(struct eph_api_forwarder *f)
{
    if (!f)
        return;
    eph_api_forwarder_stop(f);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static void forward_put(struct eph_api_forward *fw)
{
    if (!fw)
        return;
    pthread_mutex_lock(&fw->lock);
    bool last = --fw->refs == 0;
    pthread_mutex_unlock(&fw->lock);
    if (!last)
        return;
    for (size_t i = 0; i < NPASSED; i++)
        free(fw->passed[i]);
    free(fw->data);
    free(fw->url);
    free(fw->body);
    curl_slist_free_all(fw->headers);
    if (fw->curl)
        curl_easy_cleanup(fw->curl);
    pthread_cond_destroy(&fw->cond);
    pthread_mutex_destroy(&fw->lock);
    free(fw);
}

unsigned eph_api_forwarded_count(struct eph_api_forwarder *f)
{
    if (!f)
        return 0;
    pthread_mutex_lock(&f->lock);
    unsigned n = f->n;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* The request is gone (answered or its client left): the transfer need not go on for it. */
void eph_api_forward_release(struct eph_api_forward *fw)
{
    if (!fw)
        return;
    end_transfer(fw);
    forward_put(fw);
}

/* ---- the transfer, in the call's thread ---- */

static void head_known(struct eph_api_forward *fw)
{
    if (!fw->head_done) {
        fw->head_done = true;
        resume_locked(fw);
    }
}

static size_t on_header(char *line, size_t size, size_t n, void *ctx)
{
    struct eph_api_forward *fw = ctx;
    size_t len = size * n;
    if (len <= 2) { /* the blank line ending the head */
        pthread_mutex_lock(&fw->lock);
        curl_easy_getinfo(fw->curl, CURLINFO_RESPONSE_CODE, &fw->status);
        head_known(fw);
        pthread_mutex_unlock(&fw->lock);
        return len;
    }
    const char *colon = memchr(line, ':', len);
    if (!colon || len > FWD_HEADER_MAX)
        return len;
    size_t name_len = (size_t)(colon - line);
    const char *v = colon + 1;
    const char *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    char value[FWD_HEADER_MAX + 1];
    memcpy(value, v, (size_t)(end - v));
    value[end - v] = '\0';
    if (name_len == 14 && !strncasecmp(line, "Content-Length", 14)) {
        char *e;
        unsigned long long l = strtoull(value, &e, 10);
        if (*value && !*e) {
            fw->length = l;
            fw->length_known = true;
        }
    } else if (name_len == 11 && !strncasecmp(line, "Retry-After", 11)) {
        fw->retry_after = (unsigned)strtoul(value, NULL, 10);
    }
    for (size_t i = 0; i < NPASSED; i++)
        if (strlen(passed_headers[i]) == name_len &&
            !strncasecmp(line, passed_headers[i], name_len)) {
            free(fw->passed[i]);
            fw->passed[i] = strdup(value); /* NULL when out of memory: the header is not passed */
        }
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct eph_api_forward *fw = ctx;
    size_t len = size * n;
    pthread_mutex_lock(&fw->lock);
    head_known(fw);
    while (!fw->gone && fw->len - fw->off + len > FWD_BUFFER && fw->len > fw->off)
        pthread_cond_wait(&fw->cond, &fw->lock);
    if (fw->gone) {
        pthread_mutex_unlock(&fw->lock);
        return 0; /* curl ends the transfer */
    }
    if (fw->off == fw->len)
        fw->off = fw->len = 0;
    else if (fw->off) {
        memmove(fw->data, fw->data + fw->off, fw->len - fw->off);
        fw->len -= fw->off;
        fw->off = 0;
    }
    size_t want = fw->len + len > FWD_BUFFER ? fw->len + len : FWD_BUFFER;
    if (!fw->data && !(fw->data = malloc(want))) {
        pthread_mutex_unlock(&fw->lock);
        return 0;
    }
    if (want > FWD_BUFFER) { /* one write bigger than the buffer (curl's are at most 16 KiB) */
        char *bigger = realloc(fw->data, want);
        if (!bigger) {
            pthread_mutex_unlock(&fw->lock);
            return 0;
        }
        fw->data = bigger;
    }
    memcpy(fw->data + fw->len, data, len);
    fw->len += len;
    resume_locked(fw);
    pthread_mutex_unlock(&fw->lock);
    return len;
}

static int on_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    struct eph_api_forward *fw = ctx;
    pthread_mutex_lock(&fw->lock);
    bool gone = fw->gone;
    pthread_mutex_unlock(&fw->lock);
    return gone;
}

static void *forward_main(void *arg)
{
    struct eph_api_forward *fw = arg;
    eph_log_set_request(fw->request_id);
    CURLcode res = curl_easy_perform(fw->curl);
    if (res != CURLE_OK && res != CURLE_ABORTED_BY_CALLBACK && res != CURLE_WRITE_ERROR)
        EPH_WARN("api", "a call forwarded to node %s failed: %s", fw->node,
                 curl_easy_strerror(res));
    pthread_mutex_lock(&fw->lock);
    fw->result = res;
    fw->done = true;
    if (!fw->head_done && res == CURLE_OK) /* an answer without a body */
        curl_easy_getinfo(fw->curl, CURLINFO_RESPONSE_CODE, &fw->status);
    fw->head_done = true;
    resume_locked(fw);
    pthread_mutex_unlock(&fw->lock);
    eph_log_set_request(NULL);

    struct eph_api_forwarder *f = fw->owner;
    pthread_mutex_lock(&f->lock);
    if (fw->prev)
        fw->prev->next = fw->next;
    else
        f->head = fw->next;
    if (fw->next)
        fw->next->prev = fw->prev;
    f->n--;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    forward_put(fw);
    return NULL;
}

/* ---- the answer, in the server's threads ---- */

static ssize_t body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct eph_api_forward *fw = cls;
    pthread_mutex_lock(&fw->lock);
    ssize_t n;
    if (fw->off < fw->len) {
        size_t k = fw->len - fw->off < max ? fw->len - fw->off : max;
        memcpy(buf, fw->data + fw->off, k);
        fw->off += k;
        pthread_cond_broadcast(&fw->cond);
        n = (ssize_t)k;
    } else if (fw->done) {
        n = fw->result == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM
                                   : MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (fw->gone) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        /* Nothing yet: wait for the thread's next write (it resumes the connection). */
        fw->suspended = true;
        MHD_suspend_connection(fw->conn);
        n = 0;
    }
    pthread_mutex_unlock(&fw->lock);
    return n;
}

static void body_free(void *cls)
{
    eph_api_forward_release(cls);
}

/* The answer's head is known: pass it on, the body streamed from the buffer. */
static int forward_resume(struct eph_api_req *req)
{
    struct eph_api_forward *fw = req->forward;
    pthread_mutex_lock(&fw->lock);
    /* No head: the node could not be reached, or did not answer before it failed. */
    bool failed = !fw->head_done || fw->status < 100;
    long status = fw->status;
    req->retry_after = fw->retry_after;
    pthread_mutex_unlock(&fw->lock);
    if (failed) {
        req->retry_after = 1;
        return eph_api_reply_error(req, 503, "api_error", "node_unavailable", NULL,
                                   "sandbox '%s' is served by node '%s', which cannot be reached "
                                   "now; try again",
                                   req->run_id, fw->node);
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(
        fw->length_known ? fw->length : MHD_SIZE_UNKNOWN, 16384, body_read, fw, body_free);
    if (!resp)
        return MHD_NO;
    pthread_mutex_lock(&fw->lock);
    fw->refs++; /* the response's, released by body_free */
    pthread_mutex_unlock(&fw->lock);
    for (size_t i = 0; i < NPASSED; i++)
        if (fw->passed[i])
            MHD_add_response_header(resp, passed_headers[i], fw->passed[i]);
    eph_api_add_common_headers(req, resp, (unsigned)status);
    int rc = MHD_queue_response(req->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = (unsigned)status;
    return rc;
}

static enum MHD_Result add_query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    struct eph_api_forward *fw = cls;
    char *k = curl_easy_escape(fw->curl, key, 0);
    char *v = value ? curl_easy_escape(fw->curl, value, 0) : NULL;
    char *url = NULL;
    if (k && (!value || v) &&
        asprintf(&url, "%s%s%s%s%s", fw->url, strchr(fw->url, '?') ? "&" : "?", k, v ? "=" : "",
                 v ? v : "") < 0)
        url = NULL;
    curl_free(k);
    curl_free(v);
    if (!url) {
        fw->url_failed = true;
        return MHD_NO;
    }
    free(fw->url);
    fw->url = url;
    return MHD_YES;
}

/* The transfer of req to base_url, not yet started; NULL when out of memory. */
static struct eph_api_forward *forward_new(struct eph_api_req *req, const char *base_url,
                                           const char *node)
{
    struct eph_api_forward *fw = calloc(1, sizeof(*fw));
    if (!fw)
        return NULL;
    pthread_mutex_init(&fw->lock, NULL);
    pthread_cond_init(&fw->cond, NULL);
    fw->refs = 1;
    fw->conn = req->conn;
    snprintf(fw->node, sizeof(fw->node), "%s", node);
    snprintf(fw->request_id, sizeof(fw->request_id), "%s", req->request_id);
    fw->curl = curl_easy_init();
    size_t blen = strlen(base_url);
    while (blen && base_url[blen - 1] == '/')
        blen--;
    if (!fw->curl || asprintf(&fw->url, "%.*s%s", (int)blen, base_url, req->path) < 0) {
        fw->url = NULL;
        forward_put(fw);
        return NULL;
    }
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, add_query_arg, fw);
    char line[FWD_HEADER_MAX + 64];
    bool ok = !fw->url_failed;
    for (size_t i = 0; ok && i < sizeof(sent_headers) / sizeof(sent_headers[0]); i++) {
        const char *v = eph_api_header(req, sent_headers[i]);
        if (!v || strlen(v) > FWD_HEADER_MAX)
            continue;
        snprintf(line, sizeof(line), "%s: %s", sent_headers[i], v);
        struct curl_slist *l = curl_slist_append(fw->headers, line);
        ok = l != NULL;
        fw->headers = l ? l : fw->headers;
    }
    /* Who sent it on (never sent on again), and no 100-continue round trip for a body. */
    snprintf(line, sizeof(line), "Ephemeral-Forwarded: %s", req->svc->node_id);
    const char *more[] = {line, "Expect:", "Accept-Encoding:"};
    for (size_t i = 0; ok && i < sizeof(more) / sizeof(more[0]); i++) {
        struct curl_slist *l = curl_slist_append(fw->headers, more[i]);
        ok = l != NULL;
        fw->headers = l ? l : fw->headers;
    }
    if (!ok) {
        forward_put(fw);
        return NULL;
    }
    CURL *c = fw->curl;
    curl_easy_setopt(c, CURLOPT_URL, fw->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never through a proxy of the environment */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)FWD_CONNECT_SECONDS);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, fw->headers);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, fw);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, fw);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, fw);
    if (!strcmp(req->method, "HEAD")) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (strcmp(req->method, "GET")) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
        fw->body_len = req->body.len;
        fw->body = req->body.len ? eph_buf_steal(&req->body) : NULL;
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)fw->body_len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, fw->body ? fw->body : "");
    }
    return fw;
}

int eph_api_forward(struct eph_api_req *req, const char *base_url, const char *node)
{
    struct eph_api_forwarder *f = req->forwarder;
    if (!f)
        return eph_api_reply_error(req, 409, "invalid_request_error", "sandbox_elsewhere", NULL,
                                   "sandbox '%s' is served by node '%s': send its calls there",
                                   req->run_id, node);
    struct eph_api_forward *fw = forward_new(req, base_url, node);
    if (!fw)
        return MHD_NO;
    fw->owner = f;
    pthread_mutex_lock(&f->lock);
    bool refused = f->stopping || f->n >= FWD_MAX;
    if (!refused) {
        fw->refs = 2; /* the request's and the thread's */
        fw->next = f->head;
        if (f->head)
            f->head->prev = fw;
        f->head = fw;
        f->n++;
        /* The call's lock is held until the connection is suspended: the thread cannot resume
         * it before. */
        pthread_mutex_lock(&fw->lock);
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &a, forward_main, fw);
        pthread_attr_destroy(&a);
        if (!rc) {
            fw->suspended = true;
            MHD_suspend_connection(req->conn);
        }
        pthread_mutex_unlock(&fw->lock);
        if (rc) {
            f->head = fw->next;
            if (fw->next)
                fw->next->prev = NULL;
            f->n--;
            fw->refs = 1;
            refused = true;
        }
    }
    pthread_mutex_unlock(&f->lock);
    if (refused) {
        forward_put(fw);
        return eph_api_reply_error(req, 503, "api_error", "node_unavailable", NULL,
                                   "too many calls are being sent on to other nodes; try again");
    }
    EPH_DEBUG("api", "sandbox %s: call sent on to node %s", req->run_id, node);
    req->forward = fw;
    req->parked = true;
    req->resume = forward_resume;
    return MHD_YES;
}

/* ---- where this node is reached ---- */

/* A node_url given in the configuration: http or https, a host, perhaps a port, nothing else. */
static int check_node_url(const char *configured, char *out, size_t len, char *err, size_t errlen)
{
    CURLU *u = curl_url();
    if (!u)
        return -ENOMEM;
    char *scheme = NULL, *user = NULL, *password = NULL, *query = NULL, *fragment = NULL,
         *path = NULL, *host = NULL;
    int rc = 0;
    if (curl_url_set(u, CURLUPART_URL, configured, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        snprintf(err, errlen, "node_url '%s' is not a URL", configured);
        rc = -EINVAL;
    } else if (strcasecmp(scheme, "http") && strcasecmp(scheme, "https")) {
        snprintf(err, errlen, "node_url must be http:// or https://");
        rc = -EINVAL;
    } else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
               curl_url_get(u, CURLUPART_PASSWORD, &password, 0) == CURLUE_OK) {
        snprintf(err, errlen, "node_url must not hold a user name or password");
        rc = -EINVAL;
    } else if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK ||
               curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0) == CURLUE_OK ||
               (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK && strcmp(path, "/"))) {
        snprintf(err, errlen, "node_url is the API's root: no path, query or fragment");
        rc = -EINVAL;
    } else {
        size_t n = strlen(configured);
        while (n && configured[n - 1] == '/')
            n--;
        if (n >= len) {
            snprintf(err, errlen, "node_url is too long");
            rc = -EINVAL;
        } else {
            memcpy(out, configured, n);
            out[n] = '\0';
        }
    }
    curl_free(scheme);
    curl_free(user);
    curl_free(password);
    curl_free(query);
    curl_free(fragment);
    curl_free(path);
    curl_free(host);
    curl_url_cleanup(u);
    return rc;
}

int eph_api_node_url(const char *configured, const char *listen, uint16_t port,
                     const char *host_name, char *out, size_t len, char *err, size_t errlen)
{
    if (configured && *configured)
        return check_node_url(configured, out, len, err, errlen);
    /* The listening address, but a wildcard one names no host another node could reach. */
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    if (!colon) {
        snprintf(err, errlen, "listen '%s' names no address", listen ? listen : "");
        return -EINVAL;
    }
    int hl = (int)(colon - listen);
    const char *host = listen;
    if ((hl == 7 && !strncmp(listen, "0.0.0.0", 7)) || (hl == 4 && !strncmp(listen, "[::]", 4)) ||
        hl == 0) {
        host = host_name;
        hl = (int)strlen(host_name);
    }
    if (snprintf(out, len, "http://%.*s:%u", hl, host, (unsigned)port) >= (int)len) {
        snprintf(err, errlen, "this node's URL is too long");
        return -EINVAL;
    }
    return 0;
}
