/* Readiness (src/daemon/readiness.c): each way a part can be unusable gives its message and makes
 * the report not ready; a fixed part makes it ready again. The store and the backend are stand-ins
 * (a ping and a create that fail on demand), so that no case depends on the host. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/commands.h"
#include "daemon/readiness.h"
#include "run/service.h"

static char dir[64];
static char image[128], init_ok[128];
static char recipe[17];

/* The store stand-in: ping fails while store_down is set, writes while store_full is. */
static bool store_down, store_full;
static int fake_ping(struct eph_store *s)
{
    return store_down ? -EIO : 0;
}
static int fake_writable(struct eph_store *s, char *why, size_t whylen)
{
    if (!store_full)
        return 0;
    snprintf(why, whylen, "commit: database or disk is full");
    return -ENOSPC;
}
static const struct eph_store_ops fake_store_ops = {.ping = fake_ping, .writable = fake_writable};
static struct eph_store fake_store = {.ops = &fake_store_ops};

/* The backend stand-in: create fails while backend_down is set; counts its sandboxes. */
static bool backend_down;
static int creates, destroys;
static struct eph_sandbox fake_sb;
static int fake_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out)
{
    if (backend_down)
        return -EPERM;
    creates++;
    *out = &fake_sb;
    return 0;
}
static int fake_exec(struct eph_sandbox *sb, const struct eph_exec_request *req,
                     struct eph_exec_result *res)
{
    res->exit_code = strcmp(req->command, "exit 0") == 0 ? 0 : 1;
    return 0;
}
static int fake_destroy(struct eph_sandbox *sb)
{
    destroys++;
    return 0;
}
static const struct eph_sandbox_ops fake_backend = {
    .name = "fake", .create = fake_create, .exec = fake_exec, .destroy = fake_destroy};

static void write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    FILE *f = fopen(path, "we");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

/* mkdir of a/b (b may be empty). */
static void mkdirf(const char *a, const char *b)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s%s%s", a, *b ? "/" : "", b);
    assert_int_equal(mkdir(p, 0755), 0);
}

/* A cache as `image build` leaves it: DIR/cache/images/KEY/{rootfs/,complete}, and DIR/image a
 * link to the rootfs; KEY is this host's recipe. The guest agent is a minimal static ELF header
 * (the checks read the header, they do not run it). */
static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/eph-ready-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char why[256];
    assert_int_equal(eph_image_recipe_hash(recipe, why, sizeof(why)), 0);
    char root[PATH_MAX], p[PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/cache", dir);
    mkdirf(p, "");
    snprintf(p, sizeof(p), "%s/cache/images", dir);
    mkdirf(p, "");
    mkdirf(p, recipe);
    snprintf(root, sizeof(root), "%s/cache/images/%s/rootfs", dir, recipe);
    assert_int_equal(mkdir(root, 0755), 0);
    static const char *const sub[] = {"bin", "proc", "dev", "tmp"};
    for (size_t i = 0; i < 4; i++)
        mkdirf(root, sub[i]);
    snprintf(p, sizeof(p), "%s/bin/sh", root);
    write_file(p, "#!/bin/false\n", 13, 0755);
    snprintf(p, sizeof(p), "%s/cache/images/%s/complete", dir, recipe);
    char line[18];
    snprintf(line, sizeof(line), "%s\n", recipe);
    write_file(p, line, 17, 0644);
    snprintf(image, sizeof(image), "%s/image", dir);
    assert_int_equal(symlink(root, image), 0);

    /* A static ELF executable: an ELF header with no program header asking for an
     * interpreter. */
    unsigned char elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    elf[16] = 2;    /* ET_EXEC */
    elf[18] = 0x3e; /* x86-64 */
    elf[20] = 1;
    elf[54] = 56; /* e_phentsize */
    snprintf(init_ok, sizeof(init_ok), "%s/ephemeral-init", dir);
    write_file(init_ok, elf, sizeof(elf), 0755);
    *state = NULL;
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void test_image_usable(void **state)
{
    char why[512] = "";
    assert_int_equal(eph_readiness_check_image(image, init_ok, recipe, why, sizeof(why)), 0);
    assert_string_equal(why, "");
}

static void test_missing_image(void **state)
{
    char why[512], missing[160];
    snprintf(missing, sizeof(missing), "%s/no-such-image", dir);
    assert_int_equal(eph_readiness_check_image(missing, init_ok, recipe, why, sizeof(why)),
                     -ENOENT);
    char want[512];
    snprintf(want, sizeof(want),
             "no sandbox image at %s: run `make image` or `ephemerald image build`", missing);
    assert_string_equal(why, want);
}

static void test_image_without_shell(void **state)
{
    char why[512], p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/bin/sh", image);
    char aside[PATH_MAX + 8];
    snprintf(aside, sizeof(aside), "%s.aside", p);
    assert_int_equal(rename(p, aside), 0);
    assert_int_equal(eph_readiness_check_image(image, init_ok, recipe, why, sizeof(why)), -ENOENT);
    assert_non_null(strstr(why, "has no /bin/sh: run `make image`"));
    assert_int_equal(rename(aside, p), 0);
}

static void test_missing_guest_agent(void **state)
{
    char why[512], agent[160], want[512];
    snprintf(agent, sizeof(agent), "%s/no-init", dir);
    assert_int_equal(eph_readiness_check_image(image, agent, recipe, why, sizeof(why)), -ENOENT);
    snprintf(want, sizeof(want),
             "no guest agent (ephemeral-init) at %s: run `make`, or set sandbox.init_path", agent);
    assert_string_equal(why, want);
}

static void test_dynamic_guest_agent(void **state)
{
    /* This test program is dynamically linked: it cannot run alone inside a sandbox. */
    char why[512], self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    assert_int_equal(eph_readiness_check_image(image, self, recipe, why, sizeof(why)), -ENOEXEC);
    assert_non_null(strstr(why, "is dynamically linked"));
    /* Not an ELF file at all. */
    char script[160];
    snprintf(script, sizeof(script), "%s/script", dir);
    write_file(script, "#!/bin/sh\n", 10, 0755);
    assert_int_equal(eph_readiness_check_image(image, script, recipe, why, sizeof(why)), -ENOEXEC);
    assert_non_null(strstr(why, "is not an ELF executable"));
    /* Not executable. */
    chmod(init_ok, 0644);
    assert_int_equal(eph_readiness_check_image(image, init_ok, recipe, why, sizeof(why)), -ENOEXEC);
    assert_non_null(strstr(why, "is not an executable file"));
    chmod(init_ok, 0755);
}

static void test_recipe_mismatch(void **state)
{
    char why[512], want[512];
    const char *other = "0123456789abcdef";
    assert_string_not_equal(recipe, other);
    assert_int_equal(eph_readiness_check_image(image, init_ok, other, why, sizeof(why)), -ESTALE);
    snprintf(want, sizeof(want),
             "the sandbox image at %s was built from another recipe (%s; this host's is %s): "
             "run `make image` or `ephemerald image build`",
             image, recipe, other);
    assert_string_equal(why, want);
    /* A directory that is not from the cache has no recipe: it is not compared. */
    char root[PATH_MAX];
    ssize_t n = readlink(image, root, sizeof(root) - 1);
    assert_true(n > 0);
    root[n] = '\0';
    char plain[160];
    snprintf(plain, sizeof(plain), "%s/plain", dir);
    assert_int_equal(symlink(root, plain), 0);
    char marker[PATH_MAX + 16];
    snprintf(marker, sizeof(marker), "%s/cache/images/%s/complete", dir, recipe);
    char moved[PATH_MAX + 16];
    assert_true(snprintf(moved, sizeof(moved), "%s.moved", marker) < (int)sizeof(moved));
    assert_int_equal(rename(marker, moved), 0);
    assert_int_equal(eph_readiness_check_image(plain, init_ok, other, why, sizeof(why)), 0);
    assert_int_equal(rename(moved, marker), 0);
}

/* The report: every part's state, ready only when all are usable. */
static json_t *report(struct eph_service *svc, bool *ready)
{
    json_t *r = eph_readiness_report(svc->readiness, svc, ready);
    assert_non_null(r);
    return r;
}

static const char *part_message(json_t *r, const char *part)
{
    json_t *m = json_object_get(json_object_get(r, part), "message");
    return m ? json_string_value(m) : "";
}

static void test_report_parts(void **state)
{
    struct eph_config cfg = {0};
    struct eph_service svc = {.cfg = &cfg, .store = &fake_store, .sandbox_ops = &fake_backend};
    svc.sandbox_cfg.image = image;
    svc.sandbox_cfg.init_path = init_ok;
    atomic_init(&svc.shutting_down, false);
    assert_int_equal(eph_readiness_new(&svc.readiness), 0);
    store_down = backend_down = false;
    creates = destroys = 0;

    /* All usable: ready, and the backend check made and destroyed a real (stand-in) sandbox. */
    assert_true(eph_readiness_check(svc.readiness, &svc));
    assert_int_equal(creates, 1);
    assert_int_equal(destroys, 1);
    bool ready = false;
    json_t *r = report(&svc, &ready);
    assert_true(ready);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    assert_true(json_is_true(json_object_get(json_object_get(r, "store"), "ok")));
    assert_true(json_is_true(json_object_get(json_object_get(r, "image"), "ok")));
    assert_true(json_is_true(json_object_get(json_object_get(r, "backend"), "ok")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "backend"), "name")),
                        "fake");
    json_decref(r);

    /* The store stops answering: not ready, the store says why; back when it answers. */
    store_down = true;
    r = report(&svc, &ready);
    assert_false(ready);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "unavailable");
    assert_false(json_is_true(json_object_get(json_object_get(r, "store"), "ok")));
    assert_non_null(strstr(part_message(r, "store"), "the store does not answer"));
    assert_true(json_is_true(json_object_get(json_object_get(r, "image"), "ok")));
    json_decref(r);
    store_down = false;
    r = report(&svc, &ready);
    assert_true(ready);
    json_decref(r);

    /* It answers but cannot write: not ready, saying what failed; back when it can. */
    store_full = true;
    r = report(&svc, &ready);
    assert_false(ready);
    assert_string_equal(part_message(r, "store"),
                        "the store cannot write: No space left on device; commit: database or "
                        "disk is full");
    json_decref(r);
    store_full = false;
    r = report(&svc, &ready);
    assert_true(ready);
    json_decref(r);

    /* The image goes away: not ready, with what to do; the backend is not tried. */
    char moved[160];
    snprintf(moved, sizeof(moved), "%s/image.moved", dir);
    assert_int_equal(rename(image, moved), 0);
    assert_false(eph_readiness_check(svc.readiness, &svc));
    r = report(&svc, &ready);
    assert_false(ready);
    char want[512];
    snprintf(want, sizeof(want),
             "no sandbox image at %s: run `make image` or `ephemerald image build`", image);
    assert_string_equal(part_message(r, "image"), want);
    assert_string_equal(part_message(r, "backend"),
                        "the fake backend was not tried: the image is unusable");
    json_decref(r);
    /* Built again while the server runs: ready without a restart (the backend is tried again at
     * once, since it was not tried while the image was missing). */
    assert_int_equal(rename(moved, image), 0);
    int before = creates;
    r = report(&svc, &ready);
    assert_true(ready);
    assert_int_equal(creates, before + 1);
    json_decref(r);

    /* The backend cannot create a sandbox: not ready, the backend says why. */
    backend_down = true;
    assert_false(eph_readiness_check(svc.readiness, &svc));
    r = report(&svc, &ready);
    assert_false(ready);
    assert_string_equal(part_message(r, "backend"),
                        "the fake backend cannot create a sandbox: Operation not permitted (see "
                        "the log above)");
    json_decref(r);

    /* Shutting down: not ready even with every part usable. */
    backend_down = false;
    assert_true(eph_readiness_check(svc.readiness, &svc));
    atomic_store(&svc.shutting_down, true);
    r = report(&svc, &ready);
    assert_false(ready);
    assert_true(json_is_true(json_object_get(r, "shutting_down")));
    json_decref(r);
    eph_readiness_free(svc.readiness);
}

static void test_no_backend(void **state)
{
    /* No backend could be chosen (a server started not ready): the reason is reported. */
    struct eph_config cfg = {0};
    struct eph_service svc = {.cfg = &cfg, .store = &fake_store, .sandbox_ops = NULL};
    svc.sandbox_cfg.image = image;
    svc.sandbox_cfg.init_path = init_ok;
    atomic_init(&svc.shutting_down, false);
    assert_int_equal(eph_readiness_new(&svc.readiness), 0);
    eph_readiness_no_backend(svc.readiness, "runsc is not installed");
    assert_false(eph_readiness_check(svc.readiness, &svc));
    bool ready = true;
    json_t *r = report(&svc, &ready);
    assert_false(ready);
    assert_string_equal(part_message(r, "backend"),
                        "no usable sandbox backend: runsc is not installed");
    assert_true(json_is_true(json_object_get(json_object_get(r, "image"), "ok")));
    json_decref(r);
    eph_readiness_free(svc.readiness);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_usable),        cmocka_unit_test(test_missing_image),
        cmocka_unit_test(test_image_without_shell), cmocka_unit_test(test_missing_guest_agent),
        cmocka_unit_test(test_dynamic_guest_agent), cmocka_unit_test(test_recipe_mismatch),
        cmocka_unit_test(test_report_parts),        cmocka_unit_test(test_no_backend),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
