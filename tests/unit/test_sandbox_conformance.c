/* One list of operations run against every sandbox backend: the fake of the unit tests
 * (tests/fake_sandbox.h) and the real ones. Exec with its exit code, signal and timeout, output
 * caps and totals, the scratch directory, files in and out (and their errors), an interrupt from
 * another thread during a command, and a destroy that leaves nothing behind (no process, no
 * cgroup, no bundle, no run directory). The fake always runs (as root); namespaces where it
 * probes fine with the image; gvisor where runsc works; microvm on a focused subset, under KVM
 * where a guest boots and otherwise under software emulation, allowed here as the microvm
 * black-box tests allow it (its sandboxes are restored from a saved machine: seconds, not a
 * boot each). A backend that cannot run here is skipped with the reason. */
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_sandbox.h"
#include "run/outputs.h"
#include "sandbox/backend.h"

struct bcase {
    const struct eph_sandbox_ops *ops;
    struct eph_sandbox_config cfg;
    char init[4096];
    char image[4096];
    struct eph_sandbox *sb;
};

/* 0 and a created sandbox, or 1 after skip() said why the backend cannot run here. */
static int bcase_open(struct bcase *c, const char *backend)
{
    char why[512];
    memset(c, 0, sizeof(*c));
    if (strcmp(backend, "fake") == 0) {
        c->ops = &eph_fake_sandbox_ops;
        if (eph_fake_sandbox_config(&c->cfg, c->init, sizeof(c->init), why, sizeof(why))) {
            print_message("skipped: %s\n", why);
            skip();
        }
    } else {
        const char *build = getenv("BUILD"), *top = getenv("TOP");
        snprintf(c->init, sizeof(c->init), "%s/ephemeral-init", build ? build : "build");
        snprintf(c->image, sizeof(c->image), "%s/var/images/default", top ? top : ".");
        c->cfg.backend = backend;
        c->cfg.image = c->image;
        c->cfg.init_path = c->init;
        c->cfg.owner_tag = "test";
        eph_sandbox_limits_default(&c->cfg.limits);
        c->ops = eph_sandbox_backend(backend);
        assert_non_null(c->ops);
        if (access(c->image, R_OK) != 0) {
            print_message("skipped: %s: no image at %s (make image)\n", backend, c->image);
            skip();
        }
        if (c->ops->probe(&c->cfg, why, sizeof(why)) != 0) {
            print_message("skipped: %s: %s\n", backend, why);
            skip();
        }
    }
    assert_int_equal(c->ops->create(&c->cfg, &c->sb), 0);
    assert_ptr_equal(c->sb->ops, c->ops);
    return 0;
}

static int run(struct bcase *c, const char *cmd, uint32_t cap, struct eph_exec_result *res)
{
    struct eph_exec_request req = {
        .command = cmd, .timeout_ms = 60000, .stdout_cap = cap, .stderr_cap = cap};
    eph_exec_result_init(res);
    return eph_sandbox_exec(c->sb, &req, res);
}

static void expect_text(const struct eph_buf *b, const char *want)
{
    assert_int_equal(b->len, strlen(want));
    assert_memory_equal(b->data, want, b->len);
}

static void op_exec_status(struct bcase *c)
{
    struct eph_exec_result res;
    assert_int_equal(run(c, "echo out; echo err >&2; exit 3", 4096, &res), 0);
    assert_int_equal(res.exit_code, 3);
    assert_int_equal(res.signal, 0);
    assert_false(res.timed_out);
    expect_text(&res.out, "out\n");
    expect_text(&res.err, "err\n");
    assert_int_equal(res.stdout_total, 4);
    assert_int_equal(res.stderr_total, 4);
    eph_exec_result_release(&res);

    assert_int_equal(run(c, "kill -KILL $$", 4096, &res), 0);
    assert_int_equal(res.signal, SIGKILL);
    assert_int_equal(res.exit_code, -1);
    eph_exec_result_release(&res);
}

static int cmp_line(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of b, sorted, joined again (b's text is cut in place). */
static void sort_lines(struct eph_buf *b, char *out, size_t cap)
{
    char *lines[256];
    size_t n = 0;
    for (char *save = NULL, *l = strtok_r(b->data, "\n", &save); l && n < 256;
         l = strtok_r(NULL, "\n", &save))
        lines[n++] = l;
    qsort(lines, n, sizeof(lines[0]), cmp_line);
    size_t w = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && w < cap; i++)
        w += (size_t)snprintf(out + w, cap - w, "%s\n", lines[i]);
}

/* A command that needs no shell runs without one (src/guest/argv.h), and nothing tells the two
 * apart: the same environment (PWD as the shell sets it; the shell hands its variables on in an
 * order of its own, so compared sorted), the same words, and a program that is not there, or not
 * runnable, reported by the shell as before. */
static void op_exec_direct(struct bcase *c)
{
    struct eph_exec_result direct, shell;
    assert_int_equal(run(c, "env", 4096, &direct), 0);
    assert_int_equal(run(c, "env;", 4096, &shell), 0); /* the ; needs the shell */
    assert_int_equal(direct.exit_code, 0);
    assert_non_null(direct.out.data);
    assert_non_null(shell.out.data);
    assert_non_null(strstr(direct.out.data, "PWD=/"));
    static char a[4096], b[4096];
    sort_lines(&direct.out, a, sizeof(a));
    sort_lines(&shell.out, b, sizeof(b));
    assert_string_equal(a, b);
    eph_exec_result_release(&direct);
    eph_exec_result_release(&shell);

    assert_int_equal(run(c, "  printenv   HOME  ", 4096, &direct), 0);
    assert_int_equal(run(c, "printenv \"HOME\"", 4096, &shell), 0);
    assert_int_equal(direct.exit_code, 0);
    expect_text(&direct.out, shell.out.data ? shell.out.data : "");
    eph_exec_result_release(&direct);
    eph_exec_result_release(&shell);

    assert_int_equal(run(c, "no-such-program-here x", 4096, &direct), 0);
    assert_int_equal(direct.exit_code, 127);
    assert_non_null(strstr(direct.err.data ? direct.err.data : "", "not found"));
    eph_exec_result_release(&direct);
    assert_int_equal(run(c, "printf 'x' > plain.txt; chmod 644 plain.txt", 4096, &shell), 0);
    eph_exec_result_release(&shell);
    assert_int_equal(run(c, "./plain.txt", 4096, &direct), 0);
    assert_int_equal(direct.exit_code, 126);
    assert_non_null(strstr(direct.err.data ? direct.err.data : "", "Permission denied"));
    eph_exec_result_release(&direct);
}

static void op_exec_caps(struct bcase *c)
{
    struct eph_exec_result res;
    assert_int_equal(run(c, "head -c 100000 /dev/zero; head -c 5000 /dev/zero >&2", 1000, &res), 0);
    assert_int_equal(res.exit_code, 0);
    assert_int_equal(res.out.len, 1000);
    assert_int_equal(res.err.len, 1000);
    assert_int_equal(res.stdout_total, 100000);
    assert_int_equal(res.stderr_total, 5000);
    eph_exec_result_release(&res);
}

static void op_exec_timeout(struct bcase *c)
{
    struct eph_exec_request req = {
        .command = "echo before; sleep 30", .timeout_ms = 300, .stdout_cap = 64, .stderr_cap = 64};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    assert_int_equal(eph_sandbox_exec(c->sb, &req, &res), 0);
    assert_true(res.timed_out);
    expect_text(&res.out, "before\n");
    eph_exec_result_release(&res);
}

static void op_scratch(struct bcase *c)
{
    const char *scratch = c->sb->ops->scratch_dir(c->sb);
    assert_true(strncmp(scratch, "/tmp/ephemeral-run-", 19) == 0);
    struct eph_exec_result res;
    assert_int_equal(run(c, "pwd", 4096, &res), 0);
    char want[256];
    snprintf(want, sizeof(want), "%s\n", scratch);
    expect_text(&res.out, want);
    eph_exec_result_release(&res);
}

static void op_files(struct bcase *c)
{
    static const char data[] = "line one\n\0binary\xff tail";
    struct eph_sandbox *sb = c->sb;
    assert_int_equal(sb->ops->write_file(sb, "conf.bin", data, sizeof(data), 0644), 0);
    struct eph_buf b;
    eph_buf_init(&b, 0);
    assert_int_equal(sb->ops->read_file(sb, "conf.bin", 4096, &b), 0);
    assert_int_equal(b.len, sizeof(data));
    assert_memory_equal(b.data, data, sizeof(data));
    /* Written where the commands run, byte for byte. */
    struct eph_exec_result res;
    assert_int_equal(run(c, "wc -c < conf.bin", 4096, &res), 0);
    char want[32];
    snprintf(want, sizeof(want), "%zu\n", sizeof(data));
    expect_text(&res.out, want);
    eph_exec_result_release(&res);
    /* A file larger than the cap, a missing one, a path that climbs out: errors, the channel in
     * step after each. */
    assert_int_equal(sb->ops->read_file(sb, "conf.bin", 4, &b), -EMSGSIZE);
    assert_int_equal(sb->ops->read_file(sb, "no-such-file", 4096, &b), -ENOENT);
    assert_int_equal(sb->ops->write_file(sb, "../escape", "x", 1, 0644), -EINVAL);
    /* A directory is not a file to read, and a link at the end of the path is not followed. */
    assert_int_equal(run(c, "mkdir adir && ln -s conf.bin alink", 4096, &res), 0);
    assert_int_equal(res.exit_code, 0);
    eph_exec_result_release(&res);
    assert_int_equal(sb->ops->read_file(sb, "adir", 4096, &b), -EINVAL);
    assert_int_equal(sb->ops->read_file(sb, "alink", 4096, &b), -ELOOP);
    /* Nor is a link in the middle of the path, read or written (gVisor follows a link to a
     * directory despite O_NOFOLLOW: the guest checks each directory it opens). */
    assert_int_equal(run(c, "printf in > adir/x && ln -s adir dirlink", 4096, &res), 0);
    assert_int_equal(res.exit_code, 0);
    eph_exec_result_release(&res);
    assert_int_equal(sb->ops->read_file(sb, "dirlink/x", 4096, &b), -ENOTDIR);
    assert_int_equal(sb->ops->write_file(sb, "dirlink/y", "y", 1, 0644), -ENOTDIR);
    assert_int_equal(run(c, "test ! -e adir/y", 4096, &res), 0);
    assert_int_equal(res.exit_code, 0);
    eph_exec_result_release(&res);
    /* A file made by a command comes back. */
    assert_int_equal(run(c, "printf made > made.txt", 4096, &res), 0);
    eph_exec_result_release(&res);
    assert_int_equal(sb->ops->read_file(sb, "made.txt", 4096, &b), 0);
    expect_text(&b, "made");
    eph_buf_release(&b);
}

static const struct eph_sandbox_file *listed(const struct eph_sandbox_listing *l, const char *path)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].path, path) == 0)
            return &l->v[i];
    return NULL;
}

/* list_files (after op_files): the scratch directory's tree, links listed as links and never
 * entered, the entry and depth caps honoured. */
static void op_list_files(struct bcase *c)
{
    struct eph_sandbox *sb = c->sb;
    struct eph_exec_result res;
    assert_int_equal(run(c,
                         "ln -s /etc/passwd pw && ln -s / rootlink && mkdir -p d1/d2/d3 && "
                         "printf abc > d1/d2/d3/deep.txt",
                         4096, &res),
                     0);
    assert_int_equal(res.exit_code, 0);
    eph_exec_result_release(&res);
    struct eph_sandbox_listing l = {0};
    assert_int_equal(eph_sandbox_list_files(sb, 1000, 8, &l), 0);
    assert_false(l.truncated);
    const struct eph_sandbox_file *f = listed(&l, "conf.bin");
    assert_non_null(f);
    assert_int_equal(f->type, EPH_SANDBOX_FILE);
    assert_int_equal(f->size, 23); /* op_files's data */
    f = listed(&l, "pw");
    assert_non_null(f);
    assert_int_equal(f->type, EPH_SANDBOX_SYMLINK);
    assert_string_equal(f->target, "/etc/passwd");
    f = listed(&l, "dirlink");
    assert_non_null(f);
    assert_int_equal(f->type, EPH_SANDBOX_SYMLINK);
    assert_null(listed(&l, "dirlink/x")); /* a link to a directory is not entered */
    assert_null(listed(&l, "rootlink/etc"));
    assert_int_equal(listed(&l, "adir")->type, EPH_SANDBOX_DIR);
    assert_non_null(listed(&l, "adir/x"));
    assert_int_equal(listed(&l, "d1/d2/d3/deep.txt")->size, 3);
    for (size_t i = 0; i < l.n; i++)
        assert_int_equal(l.v[i].path[0] == '/', 0);
    /* Depth 2: d1 and d1/d2 are listed, nothing under d1/d2; the listing says it left out some. */
    assert_int_equal(eph_sandbox_list_files(sb, 1000, 2, &l), 0);
    assert_true(l.truncated);
    assert_non_null(listed(&l, "d1/d2"));
    assert_null(listed(&l, "d1/d2/d3"));
    /* Three entries at most. */
    assert_int_equal(eph_sandbox_list_files(sb, 3, 8, &l), 0);
    assert_int_equal(l.n, 3);
    assert_true(l.truncated);
    eph_sandbox_listing_release(&l);
    /* The channel is in step after all that. */
    assert_int_equal(run(c, "true", 4096, &res), 0);
    eph_exec_result_release(&res);
}

/* A run's outputs (run/outputs.h) over list_files and read_file: the caps, symlinks listed with
 * their target and no content, skipped files named with the reason. */
static void op_outputs(struct bcase *c)
{
    struct eph_sandbox *sb = c->sb;
    struct eph_exec_result res;
    assert_int_equal(run(c,
                         "mkdir many && i=0; while [ $i -le 100 ]; do printf x > many/f$(printf "
                         "%03d $i); i=$((i+1)); done",
                         4096, &res),
                     0);
    assert_int_equal(res.exit_code, 0);
    eph_exec_result_release(&res);
    struct eph_outputs_result out;
    json_t *many = json_pack("[s]", "many/*");
    assert_int_equal(eph_outputs_collect(sb, many, 100, 1u << 20, &out), 0);
    assert_int_equal(out.got.n, 100);
    assert_int_equal(out.skipped_total, 1);
    assert_string_equal(out.skipped[0].path, "many/f100");
    assert_string_equal(out.skipped[0].reason, "max_files");
    assert_int_equal(out.bytes, 100);
    eph_outputs_result_release(&out);
    json_decref(many);

    /* In the patterns' order. */
    json_t *two = json_pack("[s, s, s]", "conf.bin", "**/deep.txt", "pw");
    assert_int_equal(eph_outputs_collect(sb, two, 100, 1u << 20, &out), 0);
    assert_int_equal(out.got.n, 3);
    const struct eph_output *f = &out.got.v[0];
    assert_string_equal(f->path, "conf.bin");
    assert_string_equal(f->type, "file");
    assert_int_equal(f->len, 23);
    assert_string_equal(f->content_type, "application/octet-stream");
    assert_int_equal(strlen(f->sha256), 64);
    assert_string_equal(out.got.v[1].path, "d1/d2/d3/deep.txt");
    assert_memory_equal(out.got.v[1].content, "abc", 3);
    assert_string_equal(out.got.v[1].content_type, "text/plain; charset=utf-8");
    f = &out.got.v[2];
    assert_string_equal(f->path, "pw");
    assert_string_equal(f->type, "symlink");
    assert_string_equal(f->target, "/etc/passwd");
    assert_null(f->content); /* never followed */
    eph_outputs_result_release(&out);
    /* 10 bytes in all: conf.bin (23) is skipped, deep.txt (3) fits. */
    assert_int_equal(eph_outputs_collect(sb, two, 100, 10, &out), 0);
    assert_int_equal(out.got.n, 2);
    assert_int_equal(out.skipped_total, 1);
    assert_string_equal(out.skipped[0].path, "conf.bin");
    assert_string_equal(out.skipped[0].reason, "max_bytes");
    eph_outputs_result_release(&out);
    json_decref(two);
}

/* ---- interrupt from another thread while a command runs ---- */

struct intr {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool started;
    struct eph_sandbox *sb;
};

static void intr_on_output(void *arg, int stream, const void *data, size_t len)
{
    struct intr *x = arg;
    pthread_mutex_lock(&x->lock);
    x->started = true;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

static void *intr_thread(void *arg)
{
    struct intr *x = arg;
    pthread_mutex_lock(&x->lock);
    while (!x->started)
        pthread_cond_wait(&x->cond, &x->lock);
    pthread_mutex_unlock(&x->lock);
    x->sb->ops->interrupt(x->sb);
    return NULL;
}

static void op_interrupt(struct bcase *c)
{
    struct intr x = {
        .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .sb = c->sb};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, intr_thread, &x), 0);
    struct eph_exec_request req = {.command = "echo started; sleep 60",
                                   .timeout_ms = 120000,
                                   .stdout_cap = 64,
                                   .stderr_cap = 64,
                                   .on_output = intr_on_output,
                                   .on_output_arg = &x};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    int rc = eph_sandbox_exec(c->sb, &req, &res);
    if (!x.started) { /* the command never printed: let the thread end */
        intr_on_output(&x, 1, "", 0);
    }
    pthread_join(t, NULL);
    eph_exec_result_release(&res);
    assert_int_equal(rc, -ECANCELED);
    /* Everything after is refused the same way. */
    assert_int_equal(run(c, "true", 64, &res), -ECANCELED);
    eph_exec_result_release(&res);
    struct eph_buf b;
    eph_buf_init(&b, 0);
    assert_int_equal(c->sb->ops->read_file(c->sb, "conf.bin", 64, &b), -ECANCELED);
    eph_buf_release(&b);
}

/* ---- destroy leaves nothing ---- */

static void assert_no_path(const char *pattern)
{
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == 0)
        fail_msg("left behind: %s", g.gl_pathv[0]);
    globfree(&g);
}

static void op_destroy(struct bcase *c)
{
    struct eph_guest_sandbox *g = (struct eph_guest_sandbox *)c->sb;
    char name[64], run_dir[64], pattern[256];
    pid_t pid = g->pid;
    bool fake = c->ops == &eph_fake_sandbox_ops;
    snprintf(name, sizeof(name), "%s", g->name);
    snprintf(run_dir, sizeof(run_dir), "%s", g->run_dir);
    assert_true(pid > 0);
    assert_int_equal(kill(pid, 0), 0);
    assert_int_equal(eph_sandbox_destroy(c->sb), 0);
    c->sb = NULL;
    /* The process is reaped (not a zombie: kill() would succeed on one). */
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(errno, ESRCH);
    snprintf(pattern, sizeof(pattern), "/sys/fs/cgroup/*/ephemeral/%s", name);
    assert_no_path(pattern);
    snprintf(pattern, sizeof(pattern), "/sys/fs/cgroup/ephemeral/%s", name);
    assert_no_path(pattern);
    snprintf(pattern, sizeof(pattern), "/run/ephemeral/gvisor/%s", name);
    assert_no_path(pattern);
    if (fake) { /* the fake's run directory is on the host */
        struct stat st;
        assert_int_equal(stat(run_dir, &st), -1);
    }
}

static void conform(const char *backend, bool full)
{
    struct bcase c;
    if (bcase_open(&c, backend))
        return;
    op_scratch(&c);
    op_exec_status(&c);
    op_exec_caps(&c);
    op_exec_direct(&c);
    if (full)
        op_exec_timeout(&c);
    op_files(&c);
    op_list_files(&c);
    op_outputs(&c);
    if (full)
        op_interrupt(&c);
    op_destroy(&c);
}

static void test_fake(void **state)
{
    conform("fake", true);
}

static void test_namespaces(void **state)
{
    conform("namespaces", true);
}

static void test_gvisor(void **state)
{
    conform("gvisor", true);
}

static void test_microvm(void **state)
{
    setenv("EPHEMERAL_MICROVM_ALLOW_TCG", "1", 0);
    conform("microvm", false);
}

/* The failed create, where no other process makes run directories: a mount namespace of its own
 * with an empty /tmp. 0 when the create failed and /tmp is empty again, 1 when something is left
 * (printed), 2 when the create did not fail, 3 when no such namespace can be made here. */
static int boot_fails_alone(const struct eph_sandbox_config *cfg)
{
    pid_t pid = fork();
    if (pid < 0)
        return 3;
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
            mount("eph-test", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
            _exit(3);
        struct eph_sandbox *sb = NULL;
        if (eph_fake_sandbox_ops.create(cfg, &sb) >= 0 || sb)
            _exit(2);
        glob_t left;
        int g = glob("/tmp/*", 0, NULL, &left);
        if (g == 0) {
            for (size_t i = 0; i < left.gl_pathc; i++)
                fprintf(stderr, "left behind: %s\n", left.gl_pathv[i]);
            _exit(1);
        }
        _exit(g == GLOB_NOMATCH ? 0 : 1);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 3;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* A fake that cannot boot (no init) fails cleanly: an error, nothing left on the host. */
static void test_fake_boot_fails(void **state)
{
    struct eph_sandbox_config cfg;
    char init[4096], why[256];
    if (eph_fake_sandbox_config(&cfg, init, sizeof(init), why, sizeof(why))) {
        print_message("skipped: %s\n", why);
        skip();
    }
    cfg.init_path = "/nonexistent/ephemeral-init";
    int alone = boot_fails_alone(&cfg);
    assert_int_not_equal(alone, 1); /* its run directory outlived the failure */
    assert_int_not_equal(alone, 2); /* it booted without an init */
    if (alone == 0)
        return;
    /* Without a namespace of its own (not root): the host's /tmp, before and after. Another
     * process making a sandbox at the same time would show here as left behind. */
    glob_t before, after;
    assert_true(glob("/tmp/ephemeral-run-*", 0, NULL, &before) != GLOB_ABORTED);
    struct eph_sandbox *sb = NULL;
    int rc = eph_fake_sandbox_ops.create(&cfg, &sb);
    assert_true(rc < 0);
    assert_null(sb);
    /* Its run directory was made on the host before the boot failed: it is gone again. */
    if (glob("/tmp/ephemeral-run-*", 0, NULL, &after) == 0)
        for (size_t i = 0; i < after.gl_pathc; i++) {
            bool known = false;
            for (size_t j = 0; j < before.gl_pathc && !known; j++)
                known = strcmp(after.gl_pathv[i], before.gl_pathv[j]) == 0;
            if (!known)
                fail_msg("left behind: %s", after.gl_pathv[i]);
        }
    globfree(&before);
    globfree(&after);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake),       cmocka_unit_test(test_fake_boot_fails),
        cmocka_unit_test(test_namespaces), cmocka_unit_test(test_gvisor),
        cmocka_unit_test(test_microvm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
