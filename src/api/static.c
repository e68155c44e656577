/*
 * static.c - serves the web UI built into the binary (static.h).
 *
 * Every page path ("/", "/runs", "/runs/<id>", "/sandboxes", "/sandboxes/<id>", "/keys") answers
 * the same shell, index.html; the script reads the location and draws the page. Assets live under
 * "/assets/". The answers carry a strict Content-Security-Policy: scripts, styles and connections
 * from this origin only, no inline script or style, no frames, no form posts, no plugins; so even a
 * result that slipped past the sanitiser could neither run a script nor send anything to another
 * origin. Files are validated with a strong ETag (their SHA-256) and "Cache-Control: no-cache": a
 * browser keeps them and asks again with If-None-Match, answered 304 without a body, so a new
 * binary is never mixed with an old cached script.
 */
#include "api/static.h"

#include <stdint.h>
#include <string.h>

#include <microhttpd.h>

#include "api/api.h"

static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "img-src 'self' blob:; connect-src 'self'; font-src 'self'; "
                          "manifest-src 'self'; base-uri 'none'; form-action 'none'; "
                          "frame-ancestors 'none'";

const struct eph_web_file *eph_api_static_find(const char *name)
{
    for (const struct eph_web_file *f = eph_web_files; f->name; f++)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

/* A run id or any other short token of [A-Za-z0-9_-]: the page says when it does not exist. */
static bool is_token(const char *s)
{
    size_t n = 0;
    for (; *s; s++, n++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return n >= 1 && n <= 64;
}

/* The asset's name (after "/assets/"): letters, digits, '-', '_' and dots not at the start. */
static bool is_asset_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || s[0] == '.')
        return false;
    for (; *s; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok)
            return false;
    }
    return true;
}

bool eph_api_static_match(const char *path)
{
    if (strcmp(path, "/") == 0 || strcmp(path, "/runs") == 0 || strcmp(path, "/keys") == 0 ||
        strcmp(path, "/sandboxes") == 0)
        return true;
    if (strncmp(path, "/runs/", 6) == 0)
        return is_token(path + 6);
    if (strncmp(path, "/sandboxes/", 11) == 0)
        return is_token(path + 11);
    if (strncmp(path, "/assets/", 8) == 0)
        return true; /* unknown names are answered 404 here, not by the API's router */
    return false;
}

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return "application/octet-stream";
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (strcmp(dot, ".json") == 0)
        return "application/json";
    return "application/octet-stream";
}

/* The headers every answer of the UI carries, the 404 included. */
static void add_security_headers(struct MHD_Response *resp)
{
    MHD_add_response_header(resp, "Content-Security-Policy", CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
    MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
    MHD_add_response_header(resp, "Permissions-Policy",
                            "camera=(), microphone=(), geolocation=(), payment=()");
}

static int answer(struct eph_api_req *req, unsigned status, const struct eph_web_file *f,
                  bool with_body)
{
    static const char not_found[] = "not found\n";
    const void *data = f ? (const void *)f->data : not_found;
    size_t len = f ? f->len : sizeof(not_found) - 1;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        with_body ? len : 0, (void *)(uintptr_t)data, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    add_security_headers(resp);
    if (f) {
        MHD_add_response_header(resp, "Content-Type", content_type(f->name));
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "ETag", f->etag);
    } else {
        MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
        MHD_add_response_header(resp, "Cache-Control", "no-store");
    }
    eph_api_add_common_headers(req, resp, status);
    int rc = MHD_queue_response(req->conn, status, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = status;
    return rc;
}

/* If-None-Match: a list of entity tags, or "*". */
static bool etag_matches(const char *header, const char *etag)
{
    if (!header)
        return false;
    if (strcmp(header, "*") == 0)
        return true;
    size_t n = strlen(etag);
    for (const char *p = strstr(header, etag); p; p = strstr(p + 1, etag)) {
        char after = p[n];
        if (after == '\0' || after == ',' || after == ' ')
            return true;
    }
    return false;
}

int eph_api_static_serve(struct eph_api_req *req)
{
    const char *name = "index.html";
    if (strncmp(req->path, "/assets/", 8) == 0) {
        name = req->path + 8;
        if (!is_asset_name(name) || strcmp(name, "index.html") == 0)
            return answer(req, 404, NULL, true);
    }
    const struct eph_web_file *f = eph_api_static_find(name);
    if (!f)
        return answer(req, 404, NULL, true);
    if (etag_matches(eph_api_header(req, "If-None-Match"), f->etag))
        return answer(req, 304, f, false);
    return answer(req, 200, f, true);
}
