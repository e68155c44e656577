/*
 * outputs.c - collecting a run's outputs from its sandbox (outputs.h).
 */
#include "run/outputs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "common/glob.h"
#include "sandbox/sandbox.h"

static const struct {
    const char *ext, *type;
} types[] = {
    {"txt", "text/plain; charset=utf-8"},
    {"md", "text/markdown; charset=utf-8"},
    {"csv", "text/csv; charset=utf-8"},
    {"tsv", "text/tab-separated-values; charset=utf-8"},
    {"log", "text/plain; charset=utf-8"},
    {"json", "application/json"},
    {"jsonl", "application/jsonl"},
    {"yaml", "text/plain; charset=utf-8"},
    {"yml", "text/plain; charset=utf-8"},
    {"diff", "text/plain; charset=utf-8"},
    {"patch", "text/plain; charset=utf-8"},
    {"py", "text/plain; charset=utf-8"},
    {"sh", "text/plain; charset=utf-8"},
    {"c", "text/plain; charset=utf-8"},
    {"h", "text/plain; charset=utf-8"},
    {"js", "text/plain; charset=utf-8"},
    {"ts", "text/plain; charset=utf-8"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"pdf", "application/pdf"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"tar", "application/x-tar"},
};

const char *eph_outputs_content_type(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    if (dot && dot != base)
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            if (strcasecmp(dot + 1, types[i].ext) == 0)
                return types[i].type;
    /* HTML, SVG and everything unknown: bytes to save, never a page to render. */
    return "application/octet-stream";
}

bool eph_outputs_inline_type(const char *t)
{
    return t && (strncmp(t, "text/", 5) == 0 || strcmp(t, "image/png") == 0 ||
                 strcmp(t, "image/jpeg") == 0 || strcmp(t, "image/gif") == 0 ||
                 strcmp(t, "image/webp") == 0);
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct eph_sandbox_file *)a)->path,
                  ((const struct eph_sandbox_file *)b)->path);
}

static void skip(struct eph_outputs_result *res, const struct eph_sandbox_file *f,
                 const char *reason)
{
    res->skipped_total++;
    if (res->nskipped >= EPH_OUTPUTS_SKIPPED_MAX)
        return;
    struct eph_outputs_skip *k = &res->skipped[res->nskipped];
    k->path = strdup(f->path);
    if (!k->path)
        return;
    k->size = f->size;
    k->reason = reason;
    res->nskipped++;
}

/* Reads one listed file (at most room bytes). 1: skipped; 0: added; negative: the channel is
 * gone (stop). */
static int take_file(struct eph_sandbox *sb, const struct eph_sandbox_file *f, uint64_t room,
                     struct eph_outputs_result *res)
{
    struct eph_buf b;
    eph_buf_init(&b, 0);
    int rc = sb->ops->read_file(sb, f->path, (size_t)room, &b);
    if (rc == -EMSGSIZE || rc == -ELOOP || rc == -ENOENT || rc == -EINVAL || rc == -ENOTDIR ||
        rc == -EACCES || rc == -EPERM) {
        /* Grown past the room left, or swapped for a link or removed since the listing. */
        skip(res, f, rc == -EMSGSIZE ? "max_bytes" : rc == -EACCES ? "read_error" : "changed");
        eph_buf_release(&b);
        return 1;
    }
    if (rc) {
        eph_buf_release(&b);
        return rc;
    }
    struct eph_output o = {.path = f->path, .size = b.len};
    snprintf(o.type, sizeof(o.type), "file");
    /* OpenSSL's SHA-256 uses the CPU's SHA instructions where it has them: 50 MiB hash in a
     * few tens of milliseconds rather than the few hundred of a portable implementation. */
    unsigned char h[EVP_MAX_MD_SIZE];
    unsigned int hlen = 0;
    if (!EVP_Digest(b.data ? b.data : "", b.len, h, &hlen, EVP_sha256(), NULL) || hlen != 32) {
        eph_buf_release(&b);
        return -ENOMEM;
    }
    sodium_bin2hex(o.sha256, sizeof(o.sha256), h, hlen);
    o.content_type = (char *)eph_outputs_content_type(f->path);
    o.content = (unsigned char *)b.data;
    o.len = b.len;
    rc = eph_outputs_add(&res->got, &o, true);
    eph_buf_release(&b);
    if (rc)
        return rc;
    res->bytes += o.len;
    return 0;
}

int eph_outputs_collect(struct eph_sandbox *sb, const json_t *patterns, unsigned max_files,
                        uint64_t max_bytes, struct eph_outputs_result *res)
{
    memset(res, 0, sizeof(*res));
    struct eph_sandbox_listing l = {0};
    int rc = eph_sandbox_list_files(sb, EPH_OUTPUTS_LIST_MAX, 64, &l);
    if (rc)
        return rc;
    res->listing_truncated = l.truncated;
    qsort(l.v, l.n, sizeof(l.v[0]), by_path);
    /* The patterns in the order given, each one's files by path: when the caps bite, an earlier
     * pattern's files win over a later one's. */
    bool *taken = calloc(l.n ? l.n : 1, sizeof(*taken));
    if (!taken)
        rc = -ENOMEM;
    size_t pi;
    const json_t *pat;
    json_array_foreach(patterns, pi, pat)
    {
        for (size_t i = 0; i < l.n && !rc; i++) {
            const struct eph_sandbox_file *f = &l.v[i];
            if (taken[i] || f->type == EPH_SANDBOX_DIR || !json_is_string(pat) ||
                !eph_glob_match(json_string_value(pat), f->path))
                continue;
            taken[i] = true;
            if (res->got.n >= max_files) {
                skip(res, f, "max_files");
                continue;
            }
            if (f->type == EPH_SANDBOX_SYMLINK) {
                /* Listed, never followed: its target is all there is. */
                struct eph_output o = {.path = f->path, .target = f->target};
                snprintf(o.type, sizeof(o.type), "symlink");
                rc = eph_outputs_add(&res->got, &o, false);
                continue;
            }
            if (f->size > max_bytes - res->bytes) {
                skip(res, f, "max_bytes");
                continue;
            }
            int t = take_file(sb, f, max_bytes - res->bytes, res);
            if (t < 0)
                rc = t;
        }
        if (rc)
            break;
    }
    free(taken);
    eph_sandbox_listing_release(&l);
    if (rc)
        eph_outputs_result_release(res);
    return rc;
}

void eph_outputs_result_release(struct eph_outputs_result *res)
{
    eph_outputs_release(&res->got);
    for (size_t i = 0; i < res->nskipped; i++)
        free(res->skipped[i].path);
    res->nskipped = 0;
    res->skipped_total = 0;
    res->bytes = 0;
}

json_t *eph_outputs_event(const struct eph_outputs_result *res, bool with_paths)
{
    json_t *d = json_pack("{s:I, s:I, s:I, s:b}", "count", (json_int_t)res->got.n, "bytes",
                          (json_int_t)res->bytes, "skipped_count", (json_int_t)res->skipped_total,
                          "listing_truncated", res->listing_truncated);
    if (!d || !with_paths)
        return d;
    json_t *files = json_array(), *skipped = json_array();
    for (size_t i = 0; files && i < res->got.n; i++) {
        const struct eph_output *o = &res->got.v[i];
        json_t *f = json_pack("{s:s, s:s, s:I}", "path", o->path, "type", o->type, "size",
                              (json_int_t)o->size);
        if (f && o->target)
            json_object_set_new(f, "target", json_string(o->target));
        if (f && o->content_type) {
            json_object_set_new(f, "sha256", json_string(o->sha256));
            json_object_set_new(f, "content_type", json_string(o->content_type));
        }
        json_array_append_new(files, f);
    }
    for (size_t i = 0; skipped && i < res->nskipped; i++)
        json_array_append_new(skipped, json_pack("{s:s, s:I, s:s}", "path", res->skipped[i].path,
                                                 "size", (json_int_t)res->skipped[i].size, "reason",
                                                 res->skipped[i].reason));
    json_object_set_new(d, "files", files);
    json_object_set_new(d, "skipped", skipped);
    return d;
}
