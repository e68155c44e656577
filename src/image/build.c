/*
 * build.c - an image built in a process of its own. See image.h and docs/IMAGES.md.
 *
 * The server (or `ephemerald image create`) runs this program's `image build-recipe` or
 * `image import` with eph_image_run_build(): a new process (exec'd, so nothing of the server's
 * memory is in it), which enters new mount, PID, IPC and UTS namespaces, covers the server's
 * state (its database directory, its secret key) with empty tmpfs mounts, and builds into
 * DEST.tmp, renamed to DEST only when every step succeeded. Killing that process (the time
 * limit) kills the whole PID namespace with it: its first process dies with its parent.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/text.h"
#include "image/image.h"

#include <sodium.h>

int eph_image_dir(const char *digest, char *out, size_t len)
{
    if (!digest || strncmp(digest, "sha256:", 7) || strlen(digest) < 7 + 16)
        return -EINVAL;
    return eph_text_format(out, len, "%s/images/%.16s", eph_image_cache_root(), digest + 7);
}

/* ---- the child's side ---- */

/* s in single quotes for sh, each ' as '\''. */
static int quote(struct eph_buf *b, const char *s)
{
    int rc = eph_buf_appends(b, "'");
    for (; !rc && *s; s++)
        rc = *s == '\'' ? eph_buf_appends(b, "'\\''") : eph_buf_append(b, s, 1);
    return rc ? rc : eph_buf_appends(b, "'");
}

static json_t *load_recipe(const char *path)
{
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    if (!r)
        fprintf(stderr, "image-error: cannot read the recipe: %s\n", je.text);
    return r;
}

int eph_image_build_files(const char *recipe_file, const char *root)
{
    EPH_AUTOJSON json_t *r = load_recipe(recipe_file);
    if (!r)
        return 1;
    EPH_AUTOCLOSE int root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        fprintf(stderr, "image-error: cannot open '%s': %s\n", root, strerror(errno));
        return 1;
    }
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(r, "files"), i, f)
    {
        const char *path = json_string_value(json_object_get(f, "path"));
        const char *b64 = json_string_value(json_object_get(f, "content_base64"));
        char rel[1024], why[128];
        if (!path || !b64 || eph_image_path_clean(path, true, rel, sizeof(rel), why, sizeof(why))) {
            fprintf(stderr, "image-error: files[%zu] is not a file of a canonical recipe\n", i);
            return 1;
        }
        size_t cap = strlen(b64) / 4 * 3 + 3, size;
        EPH_AUTOFREE unsigned char *bin = malloc(cap);
        if (!bin || sodium_base642bin(bin, cap, b64, strlen(b64), NULL, &size, NULL,
                                      sodium_base64_VARIANT_ORIGINAL)) {
            fprintf(stderr, "image-error: files[%zu] has bad content\n", i);
            return 1;
        }
        int rc = eph_image_write_file(root_fd, rel, bin, size,
                                      (mode_t)json_integer_value(json_object_get(f, "mode")));
        if (rc) {
            fprintf(stderr, "image-error: cannot write %s: %s\n", path,
                    rc == -ELOOP ? "a directory on its path is a symbolic link" : strerror(-rc));
            return 1;
        }
        fprintf(stderr, "image: wrote %s (%zu bytes)\n", path, size);
    }
    return 0;
}

/* The hooks of a recipe, after the default image's own: its files, then npm, then run. Each
 * hook is one argument of mmdebstrap, appended to hooks (freed by the caller). */
struct hooks {
    char *arg[EPH_IMAGE_MAX_RUN + 8];
    size_t n;
};

static int hook_add(struct hooks *hk, struct eph_buf *b, int rc)
{
    if (!rc && hk->n < sizeof(hk->arg) / sizeof(hk->arg[0]) &&
        (hk->arg[hk->n] = strndup(b->data ? b->data : "", b->len)))
        hk->n++;
    else if (!rc)
        rc = -ENOMEM;
    eph_buf_release(b);
    eph_buf_init(b, 1u << 20);
    return rc;
}

static int recipe_hooks(const struct eph_image_build_job *job, json_t *r, struct hooks *hk)
{
    struct eph_buf b;
    eph_buf_init(&b, 1u << 20);
    int rc = 0;
    if (json_array_size(json_object_get(r, "files"))) {
        rc = eph_buf_appends(&b, "--customize-hook=");
        if (!rc)
            rc = quote(&b, job->self_exe);
        if (!rc)
            rc = eph_buf_appends(&b, " image build-files ");
        if (!rc)
            rc = quote(&b, job->recipe_file);
        if (!rc)
            rc = eph_buf_appends(&b, " \"$1\"");
        rc = hook_add(hk, &b, rc);
    }
    json_t *npm = json_object_get(r, "npm");
    json_t *run = json_object_get(r, "run");
    bool net = json_array_size(npm) || json_array_size(run);
    /* npm and the run commands may fetch: the host's resolver, for them only. */
    if (!rc && net)
        rc = hook_add(hk, &b,
                      eph_buf_appends(&b, "--customize-hook=cp /etc/resolv.conf "
                                          "\"$1/etc/resolv.conf\""));
    if (!rc && json_array_size(npm)) {
        rc = eph_buf_appends(&b, "--customize-hook=chroot \"$1\" npm install --global --no-fund "
                                 "--no-audit --no-update-notifier");
        size_t i;
        json_t *p;
        json_array_foreach(npm, i, p)
        {
            if (!rc)
                rc = eph_buf_appends(&b, " ");
            if (!rc)
                rc = quote(&b, json_string_value(p));
        }
        if (!rc)
            rc = eph_buf_appends(&b,
                                 " || { echo \"image-error: npm install failed\" >&2; exit 1; }");
        rc = hook_add(hk, &b, rc);
    }
    size_t i;
    json_t *c;
    json_array_foreach(run, i, c)
    {
        if (rc)
            break;
        rc = eph_buf_appends(&b, "--customize-hook=chroot \"$1\" /bin/sh -c ");
        if (!rc)
            rc = quote(&b, json_string_value(c));
        if (!rc)
            rc = eph_buf_appendf(&b,
                                 " || { s=$?; echo \"image-error: run[%zu] failed with exit "
                                 "status $s\" >&2; exit 1; }",
                                 i);
        rc = hook_add(hk, &b, rc);
    }
    if (!rc && net)
        rc = hook_add(hk, &b, eph_buf_appends(&b, "--customize-hook=rm -f \"$1/etc/resolv.conf\""));
    eph_buf_release(&b);
    return rc;
}

static int build_recipe(const struct eph_image_build_job *job, const char *tmp)
{
    EPH_AUTOJSON json_t *r = load_recipe(job->recipe_file);
    if (!r)
        return 1;
    struct eph_buf include;
    eph_buf_init(&include, 1u << 16);
    struct hooks hk = {.n = 0};
    int rc = eph_buf_appendf(&include, "--include=%s", job->base_packages);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(r, "packages"), i, p)
    {
        if (!rc)
            rc = eph_buf_appendf(&include, ",%s", json_string_value(p));
    }
    if (!rc && json_array_size(json_object_get(r, "npm")))
        rc = eph_buf_appends(&include, ",npm");
    if (!rc)
        rc = recipe_hooks(job, r, &hk);
    char *argv[256];
    size_t a = 0;
    argv[a++] = "mmdebstrap";
    for (size_t k = 0; job->base_opts[k] && a < 100; k++)
        argv[a++] = (char *)job->base_opts[k];
    argv[a++] = include.data;
    for (size_t k = 0; k < hk.n; k++)
        argv[a++] = hk.arg[k];
    argv[a++] = (char *)job->codename;
    argv[a++] = (char *)tmp;
    for (size_t k = 0; k < job->nsources && a < 250; k++)
        argv[a++] = job->sources[k];
    argv[a] = NULL;
    if (rc) {
        fprintf(stderr, "image-error: the recipe is too large to build\n");
        rc = 1;
    } else {
        fprintf(stderr, "image: mmdebstrap %s (Debian %s)\n", include.data + 10, job->codename);
        rc = eph_image_run(argv) ? 1 : 0;
        if (rc)
            fprintf(stderr, "image-error: mmdebstrap failed (the reason is above)\n");
    }
    for (size_t k = 0; k < hk.n; k++)
        free(hk.arg[k]);
    eph_buf_release(&include);
    return rc;
}

static bool under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

/* The server's state, out of the build's sight: each path covered by an empty tmpfs. */
static int hide_paths(const struct eph_image_build_job *job)
{
    for (size_t i = 0; i < job->nhide; i++) {
        char real[PATH_MAX];
        if (!realpath(job->hide[i], real))
            continue; /* nothing there to hide */
        struct stat sb;
        if (stat(real, &sb) || under(job->dest, real) || under(real, "/proc"))
            continue;
        if (!S_ISDIR(sb.st_mode)) {
            /* A file: covered by /dev/null, read-only. */
            if (mount("/dev/null", real, NULL, MS_BIND, NULL) ||
                mount(NULL, real, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL)) {
                fprintf(stderr, "image-error: cannot hide '%s': %s\n", real, strerror(errno));
                return -1;
            }
        } else if (mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                         "size=4k,mode=0700")) {
            fprintf(stderr, "image-error: cannot hide '%s': %s\n", real, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int build_steps(const struct eph_image_build_job *job)
{
    char tmp[PATH_MAX], parent[PATH_MAX];
    if (eph_text_format(tmp, sizeof(tmp), "%s.tmp", job->dest) ||
        eph_text_format(parent, sizeof(parent), "%s", job->dest)) {
        fprintf(stderr, "image-error: the image path is too long\n");
        return 1;
    }
    char *slash = strrchr(parent, '/');
    if (!slash) {
        fprintf(stderr, "image-error: the image path must be absolute\n");
        return 1;
    }
    *slash = '\0';
    EPH_AUTOCLOSE int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) {
        fprintf(stderr, "image-error: cannot open '%s': %s\n", parent, strerror(errno));
        return 1;
    }
    /* A half-made image of an interrupted build is removed first. */
    if (eph_image_remove_at(pfd, strrchr(tmp, '/') + 1)) {
        fprintf(stderr, "image-error: cannot remove the old '%s'\n", tmp);
        return 1;
    }
    int rc;
    if (job->archive) {
        if (mkdir(tmp, 0755)) {
            fprintf(stderr, "image-error: cannot create '%s': %s\n", tmp, strerror(errno));
            return 1;
        }
        EPH_AUTOCLOSE int root = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct eph_image_import_stats st = {0};
        char digest[EPH_IMAGE_DIGEST_LEN + 1], why[1024];
        rc = root < 0 ? -errno
                      : eph_image_import_archive(root, job->archive, job->limits.max_bytes, &st,
                                                 digest, why, sizeof(why));
        if (rc) {
            fprintf(stderr, "image-error: %s\n", root < 0 ? strerror(errno) : why);
            return 1;
        }
        fprintf(stderr,
                "image: %u layers, %u entries, %llu bytes; %u whiteouts applied, %u device "
                "nodes or FIFOs left out, %u set-id bits dropped\n",
                st.layers, st.entries, (unsigned long long)st.bytes, st.whiteouts, st.skipped_dev,
                st.setid_strip);
    } else if ((rc = build_recipe(job, tmp))) {
        return rc;
    }
    EPH_AUTOCLOSE int root = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char why[512];
    if (root < 0 || eph_image_finish_root(root, why, sizeof(why))) {
        fprintf(stderr, "image-error: %s\n", root < 0 ? strerror(errno) : why);
        return 1;
    }
    uint64_t bytes = 0;
    if (eph_image_tree_size(root, &bytes)) {
        fprintf(stderr, "image-error: cannot measure the image\n");
        return 1;
    }
    if (bytes > job->limits.max_bytes) {
        fprintf(
            stderr, "image-error: the image is %llu MiB, more than images.max_size_mib (%llu)\n",
            (unsigned long long)(bytes >> 20), (unsigned long long)(job->limits.max_bytes >> 20));
        return 1;
    }
    if (rename(tmp, job->dest)) {
        fprintf(stderr, "image-error: cannot move the image into place: %s\n", strerror(errno));
        return 1;
    }
    if (job->after)
        job->after(job->dest);
    printf("%llu\n", (unsigned long long)bytes);
    fflush(stdout);
    fprintf(stderr, "image: built %s (%llu bytes)\n", job->dest, (unsigned long long)bytes);
    return 0;
}

int eph_image_build_child(const struct eph_image_build_job *job)
{
    if (geteuid() != 0) {
        fprintf(stderr, "image-error: an image build must run as root\n");
        return 1;
    }
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS)) {
        fprintf(stderr, "image-error: cannot enter the build's namespaces: %s\n", strerror(errno));
        return 1;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
        fprintf(stderr, "image-error: cannot make the build's mounts private: %s\n",
                strerror(errno));
        return 1;
    }
    fflush(NULL);
    /* The build is PID 1 of a PID namespace of its own. Only the child enters it (a clone, not an
     * unshare here): once its PID 1 is gone a namespace takes no new process, and this process
     * must still be able to make one after the build (a leak checker's at exit, say). This
     * process is single-threaded, so a bare clone is a fork. */
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid < 0) {
        fprintf(stderr, "image-error: cannot start the build's PID namespace: %s\n",
                strerror(errno));
        return 1;
    }
    if (pid == 0) {
        /* PID 1 of the build: it dies with its parent, and everything in the namespace with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (sethostname("ephemeral-build", 15))
            fprintf(stderr, "image: cannot name the build host: %s\n", strerror(errno));
        /* A mount namespace of its own, so that the build's /proc (of its PID namespace) and its
         * hidden paths stay out of the waiting parent's view: the parent still reads its own
         * /proc (a leak checker reading /proc/self at exit depends on it). */
        if (unshare(CLONE_NEWNS)) {
            fprintf(stderr, "image-error: cannot enter the build's mount namespace: %s\n",
                    strerror(errno));
            _exit(1);
        }
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
            fprintf(stderr, "image: cannot mount the build's /proc: %s\n", strerror(errno));
        if (hide_paths(job))
            _exit(1);
        struct rlimit fs = {job->limits.max_bytes, job->limits.max_bytes};
        if (job->limits.max_bytes && setrlimit(RLIMIT_FSIZE, &fs))
            _exit(1);
        int rc = build_steps(job);
        if (rc) {
            /* Nothing half-made is left: the temporary root goes (the log stays). */
            char tmp[PATH_MAX];
            if (!eph_text_format(tmp, sizeof(tmp), "%s.tmp", job->dest)) {
                char *argv[] = {"rm", "-rf", "--one-file-system", tmp, NULL};
                if (eph_image_run(argv))
                    fprintf(stderr, "image: cannot remove %s\n", tmp);
            }
        }
        _exit(rc);
    }
    int status;
    if (EPH_RETRY_EINTR(waitpid(pid, &status, 0)) < 0)
        return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* ---- the parent's side ---- */

/* The last line of the log that says why ("image-error: ..." of ours, or apt's "E: ..."). */
static void log_reason(int log_fd, char *why, size_t whylen)
{
    struct stat sb;
    if (fstat(log_fd, &sb))
        return;
    off_t start = sb.st_size > 65536 ? sb.st_size - 65536 : 0;
    EPH_AUTOFREE char *buf = malloc(65537);
    if (!buf)
        return;
    ssize_t n = pread(log_fd, buf, 65536, start);
    if (n <= 0)
        return;
    buf[n] = '\0';
    /* Ours first (a run command that failed, a limit), else apt's first error (the later ones
     * follow from it), else our generic line. */
    const char *ours = NULL, *generic = NULL, *apt = NULL;
    for (char *l = buf; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl)
            *nl = '\0';
        if (!strncmp(l, "image-error: ", 13)) {
            if (strstr(l, "mmdebstrap failed"))
                generic = l + 13;
            else if (!ours)
                ours = l + 13;
        } else if (!strncmp(l, "E: ", 3) && !apt) {
            apt = l;
        }
        l = nl ? nl + 1 : NULL;
    }
    const char *best = ours ? ours : apt ? apt : generic;
    if (best)
        snprintf(why, whylen, "%s", best);
}

int eph_image_run_build(char *const argv[], int log_fd, unsigned timeout_seconds,
                        const atomic_bool *cancel, uint64_t *size_bytes, char *why, size_t whylen)
{
    int out[2];
    if (pipe2(out, O_CLOEXEC))
        return -errno;
    /* The build gets none of the server's environment (provider keys, database passwords): a
     * recipe's commands could read it. Only what the build itself needs. */
    char cache_env[PATH_MAX + 32];
    snprintf(cache_env, sizeof(cache_env), "EPHEMERAL_CACHE_DIR=%s", eph_image_cache_root());
    char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LANG=C.UTF-8", "HOME=/root", cache_env, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(out[0]);
        close(out[1]);
        return e;
    }
    if (pid == 0) {
        /* The child runs only async-signal-safe calls until exec (the parent may have threads). */
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0 || dup2(out[1], 1) < 0 || dup2(log_fd, 2) < 0)
            _exit(126);
        /* Nothing else the server holds open (the database, sockets) reaches the build. */
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
            _exit(126);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    close(out[1]);
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    uint64_t deadline = (uint64_t)timeout_seconds * 1000u;
    char size_line[64] = "";
    size_t got = 0;
    bool timed_out = false, cancelled = false;
    struct pollfd p[2] = {{.fd = out[0], .events = POLLIN}, {.fd = pfd, .events = POLLIN}};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t spent = (uint64_t)(now.tv_sec - t0.tv_sec) * 1000u +
                         (uint64_t)((now.tv_nsec - t0.tv_nsec) / 1000000);
        if (timeout_seconds && spent >= deadline) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        if (cancel && atomic_load(cancel)) {
            cancelled = true;
            kill(pid, SIGKILL);
            break;
        }
        int wait_ms = timeout_seconds ? (int)(deadline - spent) : -1;
        /* A cancel is seen within half a second. */
        if (cancel && (wait_ms < 0 || wait_ms > 500))
            wait_ms = 500;
        int n = poll(p, pfd >= 0 ? 2 : 1, wait_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (p[0].revents) {
            char buf[256];
            ssize_t r = read(out[0], buf, sizeof(buf));
            if (r <= 0) {
                p[0].fd = -1;
                if (pfd < 0)
                    break;
            } else {
                for (ssize_t i = 0; i < r && got + 1 < sizeof(size_line); i++)
                    size_line[got++] = buf[i];
                size_line[got] = '\0';
            }
        }
        if (pfd >= 0 && p[1].revents)
            break;
    }
    close(out[0]);
    if (pfd >= 0)
        close(pfd);
    int status = 0;
    EPH_RETRY_EINTR(waitpid(pid, &status, 0));
    if (cancelled) {
        snprintf(why, whylen, "the server stopped during the build");
        dprintf(log_fd, "image-error: %s\n", why);
        return -ECANCELED;
    }
    if (timed_out) {
        snprintf(why, whylen, "the build took longer than images.build_timeout_seconds (%u s)",
                 timeout_seconds);
        dprintf(log_fd, "image-error: %s\n", why);
        return -ETIMEDOUT;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, whylen, "the build failed (exit status %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        log_reason(log_fd, why, whylen);
        return -EIO;
    }
    *size_bytes = strtoull(size_line, NULL, 10);
    return 0;
}
