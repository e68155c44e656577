/*
 * service.c - images as the server and `ephemerald image` create them: the record in the store,
 * the build in a process of its own (build.c), at most max_concurrent builds at a time. See
 * image.h and docs/IMAGES.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/text.h"
#include "image/service.h"

struct build {
    struct eph_images *im;
    struct eph_image_rec rec;
    json_t *recipe; /* canonical, or NULL */
    char *archive;  /* or an archive to import */
    struct build *next;
};

struct eph_images {
    struct eph_store *st;
    struct eph_images_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a build started, ended, or a slot came free */
    unsigned running;       /* builds holding a slot */
    unsigned threads;       /* build threads alive */
    bool stopping;
    atomic_bool cancel; /* set by free: the builds under way are killed */
    char **building;    /* log paths of the builds under way */
    size_t nbuilding;
};

static int64_t complete_size(const char *dir, const char *digest);

static int mkdir_p(const char *path, mode_t mode)
{
    char tmp[4096];
    if (eph_text_format(tmp, sizeof(tmp), "%s", path))
        return -ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    return mkdir(tmp, mode) && errno != EEXIST ? -errno : 0;
}

int eph_images_new(struct eph_store *st, const struct eph_images_config *cfg,
                   struct eph_images **out)
{
    struct eph_images *im = calloc(1, sizeof(*im));
    if (!im)
        return -ENOMEM;
    im->st = st;
    im->cfg = *cfg;
    if (!im->cfg.max_concurrent)
        im->cfg.max_concurrent = 1;
    pthread_mutex_init(&im->lock, NULL);
    pthread_cond_init(&im->changed, NULL);
    *out = im;
    return 0;
}

void eph_images_free(struct eph_images *im)
{
    if (!im)
        return;
    pthread_mutex_lock(&im->lock);
    im->stopping = true;
    atomic_store(&im->cancel, true);
    pthread_cond_broadcast(&im->changed);
    /* Builds under way are killed and waiting ones give up: each is recorded as failed. */
    while (im->threads)
        pthread_cond_wait(&im->changed, &im->lock);
    pthread_mutex_unlock(&im->lock);
    free(im->building);
    pthread_cond_destroy(&im->changed);
    pthread_mutex_destroy(&im->lock);
    free(im);
}

static void set_building(struct eph_images *im, const char *log, bool on)
{
    pthread_mutex_lock(&im->lock);
    if (on) {
        char **p = realloc(im->building, (im->nbuilding + 1) * sizeof(char *));
        if (p) {
            im->building = p;
            p[im->nbuilding++] = (char *)log;
        }
    } else {
        for (size_t i = 0; i < im->nbuilding; i++)
            if (im->building[i] == log) {
                im->building[i] = im->building[--im->nbuilding];
                break;
            }
    }
    pthread_cond_broadcast(&im->changed);
    pthread_mutex_unlock(&im->lock);
}

int eph_images_default_digest(struct eph_images *im, char out[EPH_IMAGE_DIGEST_LEN + 1])
{
    EPH_AUTOJSON json_t *empty = NULL;
    char err[64];
    json_t *none = json_object();
    int rc = none ? eph_image_recipe_canonical(none, &empty, err, sizeof(err)) : -ENOMEM;
    json_decref(none);
    return rc ? rc : eph_image_recipe_digest(empty, im->cfg.base_key, out);
}

bool eph_images_in_cache(const char *digest)
{
    char dir[4096];
    return !eph_image_dir(digest, dir, sizeof(dir)) && complete_size(dir, digest) >= 0;
}

bool eph_images_building(struct eph_images *im, const char *log_path)
{
    bool on = false;
    pthread_mutex_lock(&im->lock);
    for (size_t i = 0; i < im->nbuilding && !on; i++)
        on = !strcmp(im->building[i], log_path);
    pthread_mutex_unlock(&im->lock);
    return on;
}

void eph_images_wait(struct eph_images *im, unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&im->lock);
    pthread_cond_timedwait(&im->changed, &im->lock, &ts);
    pthread_mutex_unlock(&im->lock);
}

/* The size a finished build recorded in its marker ("DIGEST SIZE"), or -1. */
static int64_t complete_size(const char *dir, const char *digest)
{
    char path[4096], line[160] = "";
    if (eph_text_format(path, sizeof(path), "%s/complete", dir))
        return -1;
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *ok = fgets(line, sizeof(line), f);
    fclose(f);
    char d[80];
    long long size;
    if (!ok || sscanf(line, "%79s %lld", d, &size) != 2 || strcmp(d, digest) || size < 0)
        return -1;
    return size;
}

static void fail_rec(struct eph_image_rec *r, const char *why)
{
    snprintf(r->status, sizeof(r->status), "failed");
    free(r->error);
    r->error = strdup(why);
}

/* Builds (or finds in the cache) the image of b, and records the outcome in b->rec. */
static void build_now(struct eph_images *im, struct build *b)
{
    struct eph_image_rec *r = &b->rec;
    char dir[4096], path[4200], dest[4200], maxb[32], timeout_why[512] = "";
    if (eph_image_dir(r->digest, dir, sizeof(dir)) || mkdir_p(dir, 0700)) {
        fail_rec(r, "cannot make the image's directory in the cache");
        return;
    }
    (void)chmod(eph_image_cache_root(), 0700);
    /* One build of a digest at a time, across processes: the second finds the first's image. */
    snprintf(path, sizeof(path), "%s/.lock", dir);
    EPH_AUTOCLOSE int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0 || EPH_RETRY_EINTR(flock(lock, LOCK_EX))) {
        fail_rec(r, "cannot lock the image's directory in the cache");
        return;
    }
    int64_t size = complete_size(dir, r->digest);
    if (size >= 0) {
        snprintf(r->status, sizeof(r->status), "ready");
        r->size_bytes = size;
        return;
    }
    snprintf(dest, sizeof(dest), "%s/rootfs", dir);
    char *argv[64];
    size_t a = 0;
    argv[a++] = (char *)im->cfg.self_exe;
    argv[a++] = "image";
    argv[a++] = b->archive ? "build-import" : "build-recipe";
    if (b->archive) {
        argv[a++] = "--archive";
        argv[a++] = b->archive;
    } else {
        snprintf(path, sizeof(path), "%s/recipe.json", dir);
        if (json_dump_file(b->recipe, path, JSON_COMPACT | JSON_SORT_KEYS)) {
            fail_rec(r, "cannot write the recipe into the cache");
            return;
        }
        argv[a++] = "--recipe";
        argv[a++] = path;
    }
    argv[a++] = "--dest";
    argv[a++] = dest;
    snprintf(maxb, sizeof(maxb), "%llu", (unsigned long long)im->cfg.max_bytes);
    argv[a++] = "--max-bytes";
    argv[a++] = maxb;
    for (size_t i = 0; i < im->cfg.nhide && a < 60; i++) {
        argv[a++] = "--hide";
        argv[a++] = (char *)im->cfg.hide[i];
    }
    argv[a] = NULL;
    EPH_AUTOCLOSE int log =
        open(r->log_path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (log < 0) {
        fail_rec(r, "cannot open the build's log");
        return;
    }
    set_building(im, r->log_path, true);
    uint64_t bytes = 0;
    int rc = eph_image_run_build(argv, log, im->cfg.timeout_seconds, &im->cancel, &bytes,
                                 timeout_why, sizeof(timeout_why));
    if (rc) {
        /* A build that was killed could not remove its temporary root: it goes here. */
        char tmp[4300];
        snprintf(tmp, sizeof(tmp), "%s.tmp", dest);
        char *rm[] = {"rm", "-rf", "--one-file-system", tmp, NULL};
        if (eph_image_run(rm))
            EPH_WARN("image", "cannot remove %s", tmp);
        fail_rec(r, timeout_why);
        return;
    }
    snprintf(path, sizeof(path), "%s/complete", dir);
    FILE *f = fopen(path, "we");
    if (!f || fprintf(f, "%s %llu\n", r->digest, (unsigned long long)bytes) < 0 || fclose(f)) {
        fail_rec(r, "cannot mark the image complete");
        return;
    }
    snprintf(r->status, sizeof(r->status), "ready");
    r->size_bytes = (int64_t)bytes;
}

static void finish(struct eph_images *im, struct build *b)
{
    int rc = im->st->ops->image_update(im->st, &b->rec);
    if (rc)
        EPH_ERROR("image", "cannot record image %s as %s: %s", b->rec.name, b->rec.status,
                  strerror(-rc));
    else
        EPH_INFO("image", "image %s %s%s%s", b->rec.name, b->rec.status, b->rec.error ? ": " : "",
                 b->rec.error ? b->rec.error : "");
}

static void build_free(struct build *b)
{
    eph_image_rec_release(&b->rec);
    json_decref(b->recipe);
    free(b->archive);
    free(b);
}

static void *build_thread(void *arg)
{
    struct build *b = arg;
    struct eph_images *im = b->im;
    pthread_mutex_lock(&im->lock);
    while (!im->stopping && im->running >= im->cfg.max_concurrent)
        pthread_cond_wait(&im->changed, &im->lock);
    bool go = !im->stopping;
    if (go)
        im->running++;
    pthread_mutex_unlock(&im->lock);
    if (go)
        build_now(im, b);
    else
        fail_rec(&b->rec, "the server stopped before the build could start");
    finish(im, b);
    /* Only now: a log reader that sees the build over finds the image's final state. */
    set_building(im, b->rec.log_path, false);
    pthread_mutex_lock(&im->lock);
    if (go)
        im->running--;
    im->threads--;
    pthread_cond_broadcast(&im->changed);
    pthread_mutex_unlock(&im->lock);
    build_free(b);
    return NULL;
}

int eph_images_create(struct eph_images *im, const char *org_id, const char *name,
                      const json_t *canonical, const char *archive, bool wait,
                      struct eph_image_rec *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!eph_image_name_valid(name) || !strcmp(name, "default")) {
        snprintf(err, errlen, "%s",
                 !strcmp(name ? name : "", "default")
                     ? "'default' is the default image's name and cannot be defined"
                     : "an image name is 1 to 63 of a-z, 0-9 and '-', starting with a letter or "
                       "digit");
        return -EINVAL;
    }
    struct build *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    b->im = im;
    struct eph_image_rec *r = &b->rec;
    snprintf(r->org_id, sizeof(r->org_id), "%s", org_id ? org_id : "");
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->status, sizeof(r->status), "building");
    r->created_at_ms = eph_clock_real_ms();
    int rc;
    if (archive) {
        rc = eph_image_archive_digest(archive, r->digest);
        if (rc) {
            snprintf(err, errlen, "cannot read '%s': %s", archive, strerror(-rc));
            build_free(b);
            return -EINVAL;
        }
        r->recipe = json_pack("{s:s}", "archive", r->digest);
        b->archive = strdup(archive);
    } else {
        rc = eph_image_recipe_digest(canonical, im->cfg.base_key, r->digest);
        r->recipe = json_deep_copy(canonical);
        b->recipe = json_incref((json_t *)canonical);
    }
    char dir[4096];
    if (rc || !r->recipe || (archive && !b->archive) ||
        eph_image_dir(r->digest, dir, sizeof(dir))) {
        build_free(b);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char log[4200];
    snprintf(log, sizeof(log), "%s/build.log", dir);
    r->log_path = strdup(log);
    /* Built before: ready at once. */
    int64_t size = complete_size(dir, r->digest);
    if (size >= 0) {
        snprintf(r->status, sizeof(r->status), "ready");
        r->size_bytes = size;
    }
    rc = im->st->ops->image_insert(im->st, r);
    if (rc) {
        if (rc == -EEXIST)
            snprintf(err, errlen, "an image named '%s' exists: delete it first", name);
        else
            snprintf(err, errlen, "the store refused the image: %s", strerror(-rc));
        build_free(b);
        return rc;
    }
    out->recipe = NULL;
    if (!strcmp(r->status, "ready")) {
        rc = im->st->ops->image_get(im->st, r->org_id, name, out);
        build_free(b);
        return rc;
    }
    if (wait) {
        build_now(im, b);
        finish(im, b);
        set_building(im, b->rec.log_path, false);
        rc = im->st->ops->image_get(im->st, r->org_id, name, out);
        build_free(b);
        return rc;
    }
    rc = im->st->ops->image_get(im->st, r->org_id, name, out);
    pthread_mutex_lock(&im->lock);
    im->threads++;
    pthread_mutex_unlock(&im->lock);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, build_thread, b)) {
        pthread_mutex_lock(&im->lock);
        im->threads--;
        pthread_mutex_unlock(&im->lock);
        fail_rec(&b->rec, "cannot start the build");
        finish(im, b);
        build_free(b);
    }
    pthread_attr_destroy(&attr);
    return rc;
}

json_t *eph_image_json(const struct eph_image_rec *r)
{
    json_t *packages = json_object_get(r->recipe, "packages");
    packages = packages ? json_incref(packages) : json_array();
    char at[32];
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:o, s:s, s:s?, s:s}", "object", "image", "name",
                     r->name, "status", r->status, "digest", r->digest, "size_bytes",
                     (json_int_t)r->size_bytes, "packages", packages, "created_at",
                     eph_clock_format_iso8601(r->created_at_ms, at, sizeof(at)), "error", r->error,
                     "owner", r->org_id[0] ? "org" : "operator");
}
