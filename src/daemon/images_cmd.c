/*
 * images_cmd.c - `ephemerald image create|import|list|rm` (the operator's images, which every org
 * sees) and the build's own subcommands, which the server and these commands run as a process of
 * their own (src/image/build.c): `image build-recipe`, `image build-import`, `image build-files`.
 * docs/IMAGES.md.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "daemon/commands.h"
#include "daemon/image_vm.h"
#include "daemon/options.h"
#include "image/service.h"
#include "store/store.h"

#define USAGE                                                                                      \
    "usage: ephemerald image create NAME [--packages a,b] [--npm PKG]... [--file PATH=LOCAL]...\n" \
    "                               [--run CMD]... [SERVER FLAGS]\n"                               \
    "       ephemerald image import NAME ARCHIVE [SERVER FLAGS]\n"                                 \
    "       ephemerald image list [SERVER FLAGS]\n"                                                \
    "       ephemerald image rm NAME [SERVER FLAGS]\n"

const char *eph_self_exe(void)
{
    static char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0)
        return "ephemerald";
    path[n] = '\0';
    return path;
}

/* ---- the build's own subcommands (run by eph_image_run_build) ---- */

/* The microvm backend's disk and kernel beside the root (src/daemon/image_vm.c); only that
 * backend needs them, so their failure is a warning. */
static void vm_disk(const char *dest)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", dest);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    if (eph_image_vm_build(eph_image_cache_root(), dir, true) != 0)
        fprintf(stderr, "image: the microvm backend's disk was not built (see above); the "
                        "other backends are unaffected\n");
}

static int build_sub(int argc, char **argv, bool import)
{
    struct eph_image_build_job job = {0};
    const char *hide[16];
    size_t nhide = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--recipe"))
            job.recipe_file = argv[i + 1];
        else if (!strcmp(argv[i], "--archive"))
            job.archive = argv[i + 1];
        else if (!strcmp(argv[i], "--dest"))
            job.dest = argv[i + 1];
        else if (!strcmp(argv[i], "--max-bytes"))
            job.limits.max_bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--hide") && nhide < 16)
            hide[nhide++] = argv[i + 1];
        else {
            fprintf(stderr, "image-error: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!job.dest || (import ? !job.archive : !job.recipe_file) || !job.limits.max_bytes) {
        fprintf(stderr, "image-error: the build needs --dest, --max-bytes and %s\n",
                import ? "--archive" : "--recipe");
        return 2;
    }
    struct eph_image_base base;
    char why[256];
    if (!import && eph_image_base_recipe(&base, why, sizeof(why))) {
        fprintf(stderr, "image-error: %s\n", why);
        return 1;
    }
    job.hide = hide;
    job.nhide = nhide;
    job.self_exe = eph_self_exe();
    if (!import) {
        job.codename = base.codename;
        job.sources = base.sources;
        job.nsources = base.nsources;
        job.base_opts = base.opts;
        job.base_packages = base.packages;
    }
    job.after = vm_disk;
    int rc = eph_image_build_child(&job);
    if (!import)
        eph_image_base_release(&base);
    return rc;
}

/* ---- the operator's commands ---- */

static int open_all(int argc, char **argv, int first, const char *const *extra, const char **vals,
                    struct eph_config *cfg, struct eph_store **st)
{
    memset(cfg, 0, sizeof(*cfg));
    if (eph_options_load(cfg, argc, argv, first, extra, vals))
        return 2;
    char err[512];
    eph_options_ensure_db_dir(cfg->db);
    if (eph_store_open(cfg->db, st, err, sizeof(err))) {
        fprintf(stderr, "ephemerald: %s\n", err);
        eph_config_release(cfg);
        return 1;
    }
    return 0;
}

/* The server's state the builds must not see: the database's files and the secret key (each
 * covered by an empty file in the build's mount namespace). */
#define MAX_HIDDEN 4
static size_t hidden_paths(const struct eph_config *cfg, char paths[MAX_HIDDEN][PATH_MAX],
                           const char **out)
{
    size_t n = 0;
    static const char *const db_suffixes[] = {"", "-wal", "-shm"};
    for (size_t i = 0; !eph_store_target_is_postgres(cfg->db) && i < 3; i++) {
        snprintf(paths[n], PATH_MAX, "%s%s", cfg->db, db_suffixes[i]);
        out[n] = paths[n];
        n++;
    }
    if (cfg->secret_key_file) {
        snprintf(paths[n], PATH_MAX, "%s", cfg->secret_key_file);
        out[n] = paths[n];
        n++;
    }
    return n;
}

int eph_images_for_config(const struct eph_config *cfg, struct eph_store *st,
                          struct eph_images **out, char *why, size_t whylen)
{
    static char paths[MAX_HIDDEN][PATH_MAX];
    static const char *hide[MAX_HIDDEN];
    static struct eph_image_base base;
    static char key[17];
    if (!key[0]) {
        if (eph_image_base_recipe(&base, why, whylen))
            return -ENOENT;
        snprintf(key, sizeof(key), "%s", base.key);
        eph_image_base_release(&base);
    }
    struct eph_images_config ic = {
        .self_exe = eph_self_exe(),
        .base_key = key,
        .timeout_seconds = cfg->images.build_timeout_seconds,
        .max_bytes = (uint64_t)cfg->images.max_size_mib << 20,
        .max_concurrent = cfg->images.max_concurrent_builds,
        .hide = hide,
        .nhide = hidden_paths(cfg, paths, hide),
    };
    return eph_images_new(st, &ic, out);
}

static int print_image(const struct eph_image_rec *r)
{
    printf("%-24s %-9s %-8s %10.1f MiB  %s%s%s\n", r->name, r->status,
           r->org_id[0] ? "org" : "operator", (double)r->size_bytes / 1048576.0, r->digest,
           r->error ? "  " : "", r->error ? r->error : "");
    return 0;
}

/* Reads a local file into a recipe file entry {path, content_base64}. */
static int file_entry(const char *spec, json_t *files)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) {
        fprintf(stderr, "ephemerald: --file takes PATH=LOCAL (PATH absolute, in the image)\n");
        return -EINVAL;
    }
    FILE *f = fopen(eq + 1, "re");
    if (!f) {
        fprintf(stderr, "ephemerald: cannot read '%s': %s\n", eq + 1, strerror(errno));
        return -errno;
    }
    struct eph_buf b;
    eph_buf_init(&b, EPH_IMAGE_MAX_FILE_BYTES + 1);
    char chunk[65536];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = eph_buf_append(&b, chunk, n);
    fclose(f);
    if (rc) {
        fprintf(stderr, "ephemerald: '%s' is larger than %u bytes\n", eq + 1,
                EPH_IMAGE_MAX_FILE_BYTES);
        eph_buf_release(&b);
        return rc;
    }
    /* Through JSON's own escaping, so that any bytes survive: content as a string when it is
     * UTF-8, else the caller's base64 is not needed since jansson refuses invalid UTF-8. */
    json_t *content = json_stringn(b.data ? b.data : "", b.len);
    eph_buf_release(&b);
    if (!content) {
        fprintf(stderr, "ephemerald: '%s' is not UTF-8 text (use the API's content_base64)\n",
                eq + 1);
        return -EINVAL;
    }
    json_t *e = json_pack("{s:s%, s:o}", "path", spec, (size_t)(eq - spec), "content", content);
    return e && !json_array_append_new(files, e) ? 0 : -ENOMEM;
}

static int cmd_create(int argc, char **argv, bool import)
{
    if (argc < 3 || argv[2][0] == '-' || (import && (argc < 4 || argv[3][0] == '-'))) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *name = argv[2];
    const char *archive = import ? argv[3] : NULL;
    EPH_AUTOJSON json_t *recipe =
        json_pack("{s:[], s:[], s:[], s:[]}", "packages", "npm", "files", "run");
    /* The recipe's repeatable flags come out of argv; the rest are the server flags. */
    int first = import ? 4 : 3, n = first;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        bool takes = !import && (!strcmp(a, "--packages") || !strcmp(a, "--npm") ||
                                 !strcmp(a, "--file") || !strcmp(a, "--run"));
        if (!takes) {
            argv[n++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ephemerald: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--packages")) {
            char buf[8192];
            snprintf(buf, sizeof(buf), "%s", v);
            for (char *save = NULL, *p = strtok_r(buf, ",", &save); p;
                 p = strtok_r(NULL, ",", &save))
                json_array_append_new(json_object_get(recipe, "packages"), json_string(p));
        } else if (!strcmp(a, "--npm")) {
            json_array_append_new(json_object_get(recipe, "npm"), json_string(v));
        } else if (!strcmp(a, "--run")) {
            json_array_append_new(json_object_get(recipe, "run"), json_string(v));
        } else if (file_entry(v, json_object_get(recipe, "files"))) {
            return 2;
        }
    }
    EPH_AUTOJSON json_t *canonical = NULL;
    char err[512];
    if (!import && eph_image_recipe_canonical(recipe, &canonical, err, sizeof(err))) {
        fprintf(stderr, "ephemerald: %s\n", err);
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr,
                "ephemerald image %s: must run as root (the build makes a root file "
                "system in namespaces of its own)\n",
                import ? "import" : "create");
        return 1;
    }
    struct eph_config cfg;
    struct eph_store *st = NULL;
    int rc = open_all(n, argv, first, NULL, NULL, &cfg, &st);
    if (rc)
        return rc;
    struct eph_images *im = NULL;
    int status = 1;
    if (eph_images_for_config(&cfg, st, &im, err, sizeof(err))) {
        fprintf(stderr, "ephemerald: %s\n", err);
        goto out;
    }
    fprintf(stderr, "image: %s %s, about a minute\n", import ? "importing" : "building", name);
    struct eph_image_rec r;
    rc = eph_images_create(im, "", name, canonical, archive, true, &r, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "ephemerald: %s\n", err);
        status = rc == -EINVAL || rc == -EEXIST ? 2 : 1;
        goto out;
    }
    print_image(&r);
    if (strcmp(r.status, "ready"))
        fprintf(stderr, "ephemerald: the image was not built: %s (log: %s)\n",
                r.error ? r.error : "unknown", r.log_path ? r.log_path : "none");
    status = strcmp(r.status, "ready") ? 1 : 0;
    eph_image_rec_release(&r);
out:
    eph_images_free(im);
    st->ops->close(st);
    eph_config_release(&cfg);
    return status;
}

static int print_cb(const struct eph_image_rec *r, void *ctx)
{
    (void)ctx;
    return print_image(r);
}

static int cmd_list(int argc, char **argv)
{
    struct eph_config cfg;
    struct eph_store *st = NULL;
    int rc = open_all(argc, argv, 2, NULL, NULL, &cfg, &st);
    if (rc)
        return rc;
    /* The operator sees the operator's images (org ""). */
    rc = st->ops->image_list(st, "", print_cb, NULL);
    if (rc)
        fprintf(stderr, "ephemerald: cannot list the images: %s\n", strerror(-rc));
    st->ops->close(st);
    eph_config_release(&cfg);
    return rc ? 1 : 0;
}

static int cmd_rm(int argc, char **argv)
{
    if (argc < 3 || argv[2][0] == '-') {
        fputs(USAGE, stderr);
        return 2;
    }
    struct eph_config cfg;
    struct eph_store *st = NULL;
    int rc = open_all(argc, argv, 3, NULL, NULL, &cfg, &st);
    if (rc)
        return rc;
    rc = st->ops->image_delete(st, "", argv[2]);
    if (rc == -EBUSY)
        fprintf(stderr, "ephemerald: image '%s' is in use by a run that has not finished\n",
                argv[2]);
    else if (rc == -ENOENT)
        fprintf(stderr, "ephemerald: no operator image named '%s'\n", argv[2]);
    else if (rc)
        fprintf(stderr, "ephemerald: cannot remove '%s': %s\n", argv[2], strerror(-rc));
    st->ops->close(st);
    eph_config_release(&cfg);
    return rc ? 1 : 0;
}

int eph_cmd_images(int argc, char **argv)
{
    const char *verb = argc > 1 ? argv[1] : "";
    if (!strcmp(verb, "build-recipe") || !strcmp(verb, "build-import"))
        return build_sub(argc, argv, !strcmp(verb, "build-import"));
    if (!strcmp(verb, "build-files"))
        return argc == 4 ? eph_image_build_files(argv[2], argv[3]) : 2;
    if (!strcmp(verb, "create") || !strcmp(verb, "import"))
        return cmd_create(argc, argv, !strcmp(verb, "import"));
    if (!strcmp(verb, "list"))
        return cmd_list(argc, argv);
    if (!strcmp(verb, "rm"))
        return cmd_rm(argc, argv);
    fputs(USAGE, stderr);
    return 2;
}
