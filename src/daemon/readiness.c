/*
 * readiness.c - the store, the image and the backend, checked at start-up and for /healthz.
 *
 * The image check reads the file system only (a few stats, the guest agent's ELF header, the
 * cache's recipe marker), so /healthz runs it at every call: an image built while the server
 * runs makes it ready without a restart. The backend check boots a real sandbox; it runs at
 * start-up, and again from /healthz while the backend is unusable, at most every RETRY_MS.
 */
#include "daemon/readiness.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "daemon/commands.h"
#include "run/service.h"

#define RETRY_MS 5000
#define MESSAGE_MAX 512

enum part { PART_STORE, PART_IMAGE, PART_BACKEND, NPARTS };
static const char *const part_names[NPARTS] = {"store", "image", "backend"};

struct eph_readiness {
    pthread_mutex_t lock; /* everything below; the backend check runs under it, one at a time */
    bool ok[NPARTS];
    char message[NPARTS][MESSAGE_MAX];
    bool have_recipe;
    char recipe[17];
    bool no_backend; /* none could be chosen at start-up: only a restart can change that */
    uint64_t backend_checked_ms; /* monotonic; 0: to be tried at the next report */
};

static const char *const what_to_do = "run `make image` or `ephemerald image build`";

/* 1 when the ELF file at fd asks for a program interpreter (it is dynamically linked), 0 when
 * not, a negative errno when it is not a readable ELF executable. */
static int elf_is_dynamic(int fd)
{
    Elf64_Ehdr eh;
    ssize_t n = pread(fd, &eh, sizeof(eh), 0);
    if (n != (ssize_t)sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
        eh.e_phnum > 256)
        return -ENOEXEC;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) != (ssize_t)sizeof(ph))
            return -ENOEXEC;
        if (ph.p_type == PT_INTERP)
            return 1;
    }
    return 0;
}

static int check_guest_agent(const char *init_path, char *why, size_t whylen)
{
    struct stat st;
    if (!init_path || !*init_path || stat(init_path, &st) != 0) {
        snprintf(why, whylen,
                 "no guest agent (ephemeral-init) at %s: run `make`, or set "
                 "sandbox.init_path",
                 init_path ? init_path : "(none)");
        return -ENOENT;
    }
    if (!S_ISREG(st.st_mode) || !(st.st_mode & S_IXUSR)) {
        snprintf(why, whylen, "the guest agent at %s is not an executable file: run `make`",
                 init_path);
        return -ENOEXEC;
    }
    int fd = open(init_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = -errno;
        snprintf(why, whylen, "cannot read the guest agent at %s: %s", init_path, strerror(-e));
        return e;
    }
    int dynamic = elf_is_dynamic(fd);
    close(fd);
    if (dynamic) {
        snprintf(why, whylen,
                 "the guest agent at %s is %s: it runs alone inside the sandbox and "
                 "must be the static ephemeral-init that `make` builds",
                 init_path, dynamic > 0 ? "dynamically linked" : "not an ELF executable");
        return -ENOEXEC;
    }
    return 0;
}

/* The recipe key an image from the cache was built from (images/KEY/complete beside
 * images/KEY/rootfs, which image is or links to), or key[0] = '\0' for an image of another
 * origin. */
static void image_recipe(const char *image, char key[17])
{
    char target[PATH_MAX], marker[PATH_MAX + 16];
    key[0] = '\0';
    ssize_t n = readlink(image, target, sizeof(target) - 1);
    if (n > 0)
        target[n] = '\0';
    else
        snprintf(target, sizeof(target), "%s", image);
    char *slash = strrchr(target, '/');
    if (!slash || strcmp(slash + 1, "rootfs") != 0)
        return;
    if (target[0] != '/' && n > 0) {
        /* A relative link: relative to the link's directory. */
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", image);
        char *ds = strrchr(dir, '/');
        snprintf(marker, sizeof(marker), "%.*s/%.*s/complete", ds ? (int)(ds - dir) : 1,
                 ds ? dir : ".", (int)(slash - target), target);
    } else {
        snprintf(marker, sizeof(marker), "%.*s/complete", (int)(slash - target), target);
    }
    int fd = open(marker, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[17] = {0};
    ssize_t got = read(fd, buf, 16);
    close(fd);
    if (got != 16 || strspn(buf, "0123456789abcdef") != 16)
        return; /* not a key `image build` wrote */
    memcpy(key, buf, 16);
    key[16] = '\0';
}

int eph_readiness_check_image(const char *image, const char *init_path, const char *recipe,
                              char *why, size_t whylen)
{
    struct stat st;
    if (!image || !*image || stat(image, &st) != 0) {
        snprintf(why, whylen, "no sandbox image at %s: %s", image ? image : "(none)", what_to_do);
        return -ENOENT;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "the sandbox image at %s is not a directory: %s", image, what_to_do);
        return -ENOTDIR;
    }
    /* What every backend needs of the image: the worker's shell and the jail's mount points. */
    static const char *const needed[] = {"bin/sh", "proc", "dev", "tmp"};
    for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", image, needed[i]);
        if (stat(path, &st) != 0) {
            snprintf(why, whylen, "the sandbox image at %s has no /%s: %s", image, needed[i],
                     what_to_do);
            return -ENOENT;
        }
    }
    int rc = check_guest_agent(init_path, why, whylen);
    if (rc)
        return rc;
    char built[17];
    image_recipe(image, built);
    if (built[0] && recipe && strcmp(built, recipe) != 0) {
        snprintf(why, whylen,
                 "the sandbox image at %s was built from another recipe (%s; this host's is %s): "
                 "%s",
                 image, built, recipe, what_to_do);
        return -ESTALE;
    }
    return 0;
}

int eph_readiness_check_backend(const struct eph_sandbox_ops *ops,
                                const struct eph_sandbox_config *cfg, char *why, size_t whylen)
{
    struct eph_sandbox *sb = NULL;
    int rc = ops->create(cfg, &sb);
    if (rc) {
        snprintf(why, whylen, "the %s backend cannot create a sandbox: %s (see the log above)",
                 ops->name, eph_strerror(rc));
        return rc;
    }
    struct eph_exec_request req = {
        .command = "exit 0", .timeout_ms = 30000, .stdout_cap = 256, .stderr_cap = 256};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    rc = ops->exec(sb, &req, &res);
    if (rc)
        snprintf(why, whylen, "a %s sandbox cannot run a command: %s", ops->name, eph_strerror(rc));
    else if (res.signal || res.exit_code != 0) {
        /* The sandbox's stderr is hostile: its first line, printable ASCII only, capped. */
        char first[121];
        size_t n = 0;
        for (size_t i = 0; i < res.err.len && n < sizeof(first) - 1; i++) {
            unsigned char c = (unsigned char)res.err.data[i];
            if (c == '\n')
                break;
            first[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
        }
        first[n] = '\0';
        snprintf(why, whylen, "a %s sandbox cannot run a command: `exit 0` ended with %s %d%s%s",
                 ops->name, res.signal ? "signal" : "status",
                 res.signal ? res.signal : res.exit_code, n ? ": " : "", first);
        rc = -EIO;
    }
    eph_exec_result_release(&res);
    int drc = ops->destroy(sb);
    if (!rc && drc) {
        snprintf(why, whylen, "a %s sandbox cannot be destroyed cleanly: %s", ops->name,
                 eph_strerror(drc));
        rc = drc;
    }
    return rc;
}

int eph_readiness_new(struct eph_readiness **out)
{
    struct eph_readiness *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    pthread_mutex_init(&r->lock, NULL);
    char why[256];
    int rc = eph_image_recipe_hash(r->recipe, why, sizeof(why));
    r->have_recipe = rc == 0;
    if (rc)
        EPH_WARN("ready", "the image's recipe cannot be compared: %s", why);
    *out = r;
    return 0;
}

void eph_readiness_free(struct eph_readiness *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void eph_readiness_no_backend(struct eph_readiness *r, const char *why)
{
    pthread_mutex_lock(&r->lock);
    r->no_backend = true;
    r->ok[PART_BACKEND] = false;
    snprintf(r->message[PART_BACKEND], MESSAGE_MAX, "no usable sandbox backend: %s", why);
    pthread_mutex_unlock(&r->lock);
}

/* Sets one part's state; logs a change (a part that becomes unusable, or usable again). */
static void set_part(struct eph_readiness *r, enum part p, bool ok, const char *why)
{
    if (ok != r->ok[p] || (!ok && strcmp(why, r->message[p]) != 0)) {
        if (ok)
            EPH_INFO("ready", "%s: usable", part_names[p]);
        else
            EPH_ERROR("ready", "%s: %s", part_names[p], why);
    }
    r->ok[p] = ok;
    snprintf(r->message[p], MESSAGE_MAX, "%s", ok ? "" : why);
}

/* The store answers, and takes writes: a store that reads but cannot write (a full disk, a
 * read-only file system or server) runs nothing to its end. */
static void check_store(struct eph_readiness *r, struct eph_service *svc)
{
    struct eph_store *st = svc->store;
    int rc = st->ops->ping(st);
    char why[MESSAGE_MAX], detail[MESSAGE_MAX - 64] = "";
    snprintf(why, sizeof(why), "the store does not answer: %s", eph_strerror(rc));
    if (!rc && st->ops->writable && (rc = st->ops->writable(st, detail, sizeof(detail))))
        snprintf(why, sizeof(why), "the store cannot write: %s; %s", eph_strerror(rc),
                 detail[0] ? detail : "no detail");
    set_part(r, PART_STORE, rc == 0, why);
}

static void check_image(struct eph_readiness *r, struct eph_service *svc)
{
    char why[MESSAGE_MAX] = "";
    int rc = eph_readiness_check_image(svc->sandbox_cfg.image, svc->sandbox_cfg.init_path,
                                       r->have_recipe ? r->recipe : NULL, why, sizeof(why));
    set_part(r, PART_IMAGE, rc == 0, why);
}

/* Under r->lock. */
static void check_backend(struct eph_readiness *r, struct eph_service *svc)
{
    if (r->no_backend)
        return;
    char why[MESSAGE_MAX] = "";
    if (!r->ok[PART_IMAGE]) {
        snprintf(why, sizeof(why), "the %s backend was not tried: the image is unusable",
                 svc->sandbox_ops->name);
        set_part(r, PART_BACKEND, false, why);
        r->backend_checked_ms = 0; /* tried at once when the image is back */
        return;
    }
    r->backend_checked_ms = eph_clock_mono_ns() / 1000000u | 1;
    int rc = eph_readiness_check_backend(svc->sandbox_ops, &svc->sandbox_cfg, why, sizeof(why));
    set_part(r, PART_BACKEND, rc == 0, why);
}

bool eph_readiness_check(struct eph_readiness *r, struct eph_service *svc)
{
    pthread_mutex_lock(&r->lock);
    /* Everything starts usable, so that the first check logs each part that is not. */
    for (int p = 0; p < NPARTS; p++)
        if (p != PART_BACKEND || !r->no_backend)
            r->ok[p] = true;
    check_store(r, svc);
    check_image(r, svc);
    check_backend(r, svc);
    bool ok = r->ok[PART_STORE] && r->ok[PART_IMAGE] && r->ok[PART_BACKEND];
    pthread_mutex_unlock(&r->lock);
    return ok;
}

/* The image again, and an unusable backend again when its retry time has come. Under r->lock. */
static void recheck_sandbox(struct eph_readiness *r, struct eph_service *svc)
{
    check_image(r, svc);
    uint64_t now_ms = eph_clock_mono_ns() / 1000000u;
    if (!r->ok[PART_BACKEND] && !r->no_backend &&
        (!r->ok[PART_IMAGE] || r->backend_checked_ms == 0 ||
         now_ms - r->backend_checked_ms >= RETRY_MS))
        check_backend(r, svc);
}

bool eph_readiness_can_run(struct eph_readiness *r, struct eph_service *svc, char *why,
                           size_t whylen)
{
    pthread_mutex_lock(&r->lock);
    if (!r->ok[PART_IMAGE] || !r->ok[PART_BACKEND])
        recheck_sandbox(r, svc);
    bool ok = r->ok[PART_IMAGE] && r->ok[PART_BACKEND];
    if (!ok && why && whylen)
        snprintf(why, whylen, "%s", r->message[r->ok[PART_IMAGE] ? PART_BACKEND : PART_IMAGE]);
    pthread_mutex_unlock(&r->lock);
    return ok;
}

json_t *eph_readiness_report(struct eph_readiness *r, struct eph_service *svc, bool *ready)
{
    pthread_mutex_lock(&r->lock);
    check_store(r, svc);
    recheck_sandbox(r, svc);
    bool shutting = atomic_load(&svc->shutting_down);
    bool ok = r->ok[PART_STORE] && r->ok[PART_IMAGE] && r->ok[PART_BACKEND] && !shutting;
    json_t *body =
        json_pack("{s:s, s:b}", "status", ok ? "ok" : "unavailable", "shutting_down", shutting);
    for (int p = 0; body && p < NPARTS; p++) {
        json_t *part = json_pack("{s:b}", "ok", r->ok[p]);
        if (part && !r->ok[p])
            json_object_set_new(part, "message", json_string(r->message[p]));
        if (part && p == PART_IMAGE)
            json_object_set_new(part, "path", json_string(svc->sandbox_cfg.image));
        if (part && p == PART_BACKEND && svc->sandbox_ops)
            json_object_set_new(part, "name", json_string(svc->sandbox_ops->name));
        if (!part || json_object_set_new(body, part_names[p], part)) {
            json_decref(body);
            body = NULL;
        }
    }
    pthread_mutex_unlock(&r->lock);
    *ready = ok;
    return body;
}

const struct eph_readiness_ops eph_readiness_ops = {
    .can_run = eph_readiness_can_run,
    .report = eph_readiness_report,
};
