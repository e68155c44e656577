/*
 * test_sandbox_gvisor.c - the gvisor backend's OCI spec: every guarantee the backend makes that
 * lives in config.json (read-only root, the init started as root with only the capabilities it
 * needs to make itself the keeper (src/guest/harden.h) under no_new_privs, rlimits, cgroup
 * limits, the tmpfs size, the mounts, the namespaces, the trampoline to the init), checked on the
 * JSON the backend writes, without runsc.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "sandbox/gvisor/gvisor.h"

static json_t *spec_for(const struct eph_sandbox_limits *l)
{
    struct eph_gvisor_plan p = {
        .root = "/images/root",
        .guest_dir = "/run/x/guest",
        .preload_file = "/run/x/ld.so.preload",
        .cgroup_path = "/ephemeral/run-1-gv0",
        .run_dir = "/tmp/ephemeral-run-abcdef",
        .scratch = "/tmp/ephemeral-run-abcdef/scratch",
        .home = "/tmp/ephemeral-run-abcdef/home",
        .limits = *l,
    };
    char *s = NULL;
    assert_int_equal(eph_gvisor_spec_json(&p, &s), 0);
    json_error_t err;
    json_t *j = json_loads(s, 0, &err);
    free(s);
    assert_non_null(j);
    return j;
}

static struct eph_sandbox_limits limits(void)
{
    struct eph_sandbox_limits l;
    eph_sandbox_limits_default(&l);
    l.memory_mib = 300;
    l.pids = 50;
    l.vcpus = 2;
    l.disk_mib = 64;
    l.nofile = 512;
    l.fsize_bytes = 1u << 20;
    return l;
}

static json_int_t rlimit(json_t *spec, const char *type)
{
    json_t *a = json_object_get(json_object_get(spec, "process"), "rlimits");
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "type")), type) == 0) {
            assert_int_equal(json_integer_value(json_object_get(v, "hard")),
                             json_integer_value(json_object_get(v, "soft")));
            return json_integer_value(json_object_get(v, "hard"));
        }
    }
    fail_msg("no rlimit %s", type);
    return -1;
}

static void test_process(void **state)
{
    struct eph_sandbox_limits l = limits();
    json_t *s = spec_for(&l);
    json_t *proc = json_object_get(s, "process");
    /* Root, so that the init can be the keeper; the commands are worker (the init's doing,
     * gvisor_doors proves it). */
    assert_int_equal(json_integer_value(json_object_get(json_object_get(proc, "user"), "uid")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(proc, "user"), "gid")), 0);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(proc, "user"), "additionalGids")), 0);
    assert_true(json_is_true(json_object_get(proc, "noNewPrivileges")));
    assert_true(json_is_false(json_object_get(proc, "terminal")));
    /* Exactly the four capabilities the trampoline and the init use before the init drops them
     * all; none inheritable or ambient. */
    const char *sets[] = {"bounding", "effective", "permitted", "inheritable", "ambient"};
    const char *keeper[] = {"CAP_CHOWN", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP"};
    for (size_t i = 0; i < 5; i++) {
        json_t *set = json_object_get(json_object_get(proc, "capabilities"), sets[i]);
        assert_true(json_is_array(set));
        assert_int_equal(json_array_size(set), i < 3 ? 4 : 0);
        for (size_t j = 0; j < json_array_size(set); j++)
            assert_string_equal(json_string_value(json_array_get(set, j)), keeper[j]);
    }
    assert_int_equal(rlimit(s, "RLIMIT_NOFILE"), 512);
    assert_int_equal(rlimit(s, "RLIMIT_NPROC"), 50);
    assert_int_equal(rlimit(s, "RLIMIT_FSIZE"), 1 << 20);
    assert_int_equal(rlimit(s, "RLIMIT_CORE"), 0);
    /* Only PATH: nothing of the server's environment. */
    assert_int_equal(json_array_size(json_object_get(proc, "env")), 1);
    /* The init is the first and only program: no shell of the image runs before it. */
    json_t *args = json_object_get(proc, "args");
    static const char *const want[] = {"/.ephemeral/init",
                                       "--keeper",
                                       "--make-dirs",
                                       "/tmp/ephemeral-run-abcdef",
                                       "/tmp/ephemeral-run-abcdef/scratch",
                                       "/tmp/ephemeral-run-abcdef/home"};
    assert_int_equal(json_array_size(args), 6);
    for (size_t i = 0; i < 6; i++)
        assert_string_equal(json_string_value(json_array_get(args, i)), want[i]);
    json_decref(s);
}

static void test_root_mounts_namespaces(void **state)
{
    struct eph_sandbox_limits l = limits();
    json_t *s = spec_for(&l);
    json_t *root = json_object_get(s, "root");
    assert_string_equal(json_string_value(json_object_get(root, "path")), "/images/root");
    assert_true(json_is_true(json_object_get(root, "readonly")));
    assert_string_equal(json_string_value(json_object_get(s, "hostname")), "sandbox");
    json_t *mounts = json_object_get(s, "mounts");
    int seen = 0;
    size_t i;
    json_t *m;
    json_array_foreach(mounts, i, m)
    {
        const char *dst = json_string_value(json_object_get(m, "destination"));
        char opts[256] = "";
        size_t j;
        json_t *o;
        json_array_foreach(json_object_get(m, "options"), j, o)
        {
            strcat(opts, json_string_value(o));
            strcat(opts, ",");
        }
        if (strcmp(dst, "/tmp") == 0) {
            assert_string_equal(json_string_value(json_object_get(m, "type")), "tmpfs");
            assert_non_null(strstr(opts, "size=64m,"));
            seen |= 1;
        } else if (strcmp(dst, "/.ephemeral") == 0) {
            assert_string_equal(json_string_value(json_object_get(m, "source")), "/run/x/guest");
            assert_non_null(strstr(opts, "ro,"));
            seen |= 2;
        } else if (strcmp(dst, "/etc/ld.so.preload") == 0) {
            assert_non_null(strstr(opts, "ro,"));
            assert_non_null(strstr(opts, "noexec,"));
            seen |= 4;
        } else if (strcmp(dst, "/proc") == 0) {
            seen |= 8;
        } else {
            fail_msg("unexpected mount %s", dst);
        }
    }
    assert_int_equal(seen, 15);
    json_t *ns = json_object_get(json_object_get(s, "linux"), "namespaces");
    const char *want[] = {"pid", "network", "ipc", "uts", "mount"};
    for (size_t k = 0; k < 5; k++) {
        bool found = false;
        json_array_foreach(ns, i, m)
        {
            found |= strcmp(json_string_value(json_object_get(m, "type")), want[k]) == 0;
        }
        assert_true(found);
    }
    json_decref(s);
}

static void test_resources(void **state)
{
    struct eph_sandbox_limits l = limits();
    json_t *s = spec_for(&l);
    json_t *lx = json_object_get(s, "linux");
    assert_string_equal(json_string_value(json_object_get(lx, "cgroupsPath")),
                        "/ephemeral/run-1-gv0");
    json_t *r = json_object_get(lx, "resources");
    json_int_t mem = ((json_int_t)300 + EPH_GVISOR_SENTRY_MIB) << 20;
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "memory"), "limit")),
                     mem);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "memory"), "swap")),
                     mem);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "pids"), "limit")),
                     50 * EPH_GVISOR_HOST_TASKS_PER_PROC + EPH_GVISOR_HOST_TASKS_BASE);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "cpu"), "quota")),
                     200000);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "cpu"), "period")),
                     100000);
    json_decref(s);
}

static void test_too_long(void **state)
{
    char longp[1200];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = '\0';
    struct eph_gvisor_plan p = {.root = "/r",
                                .guest_dir = "/g",
                                .cgroup_path = "/c",
                                .run_dir = longp,
                                .scratch = longp,
                                .home = longp};
    eph_sandbox_limits_default(&p.limits);
    char *s = NULL;
    assert_int_equal(eph_gvisor_spec_json(&p, &s), -ENAMETOOLONG);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_process),
        cmocka_unit_test(test_root_mounts_namespaces),
        cmocka_unit_test(test_resources),
        cmocka_unit_test(test_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
