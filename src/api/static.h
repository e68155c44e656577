/*
 * static.h - the web UI (web/): its files are built into ephemerald, so that a server finds them
 * without any configuration, and served at "/" with a strict Content-Security-Policy.
 */
#ifndef EPH_API_STATIC_H
#define EPH_API_STATIC_H

#include <stdbool.h>
#include <stddef.h>

struct eph_api_req;

/* One embedded file. The table, eph_web_files, is generated at build time from web/ and the
 * Debian packages' libraries (scripts/embed-web.sh); it ends with an entry whose name is NULL. */
struct eph_web_file {
    const char *name; /* "index.html", "app.js", "marked.min.js", ... */
    const unsigned char *data;
    size_t len;
    const char *etag; /* a strong validator: the file's SHA-256, shortened, quoted */
};
extern const struct eph_web_file eph_web_files[];

/* True when path is one of the UI's: "/", "/runs", "/runs/<id>", "/keys", "/assets/<name>". */
bool eph_api_static_match(const char *path);
/* Answers a GET or HEAD of such a path (404 when an asset is unknown). */
int eph_api_static_serve(struct eph_api_req *req);
/* The file embedded under name, or NULL. */
const struct eph_web_file *eph_api_static_find(const char *name);

#endif
