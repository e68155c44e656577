/* The warm pool (src/sandbox/pool.c): a sandbox is handed out at most once, even to many threads
 * at once; the pool refills after a take; a take falls back to a fresh create when the pool is
 * empty, disabled or built for another configuration; stop leaves nothing alive. A fake backend
 * counts every sandbox; the last test does the same with the real namespaces backend when it can
 * (root, the image and the init: otherwise it says why and passes). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/namespaces/namespaces.h"
#include "sandbox/pool.h"

/* The pool under test: one per test (setup/teardown). */
static struct eph_sandbox_pool *pool;
#include "sandbox/sandbox.h"

struct fake {
    struct eph_sandbox base;
    uint64_t id;
    atomic_int owners; /* set by whoever got it from take: must go 0 -> 1 once */
    pthread_t creator;
};

static atomic_int live;
static atomic_uint_fast64_t next_id;
static atomic_bool fail_creates;
static atomic_int creates_by_other_threads;
static pthread_t main_thread;

static int fake_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out);
static int fake_destroy(struct eph_sandbox *sb);

static const struct eph_sandbox_ops fake_ops = {
    .name = "fake",
    .create = fake_create,
    .destroy = fake_destroy,
};

static int fake_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out)
{
    if (atomic_load(&fail_creates))
        return -EIO;
    struct fake *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->base.ops = &fake_ops;
    f->id = atomic_fetch_add(&next_id, 1) + 1;
    f->creator = pthread_self();
    if (!pthread_equal(f->creator, main_thread))
        atomic_fetch_add(&creates_by_other_threads, 1);
    atomic_fetch_add(&live, 1);
    struct timespec t = {0, 200 * 1000}; /* a create takes a while */
    nanosleep(&t, NULL);
    *out = &f->base;
    return 0;
}

static int fake_destroy(struct eph_sandbox *sb)
{
    struct fake *f = (struct fake *)sb;
    assert_true(atomic_fetch_sub(&live, 1) > 0);
    f->base.ops = NULL; /* a second destroy would crash on the ops */
    free(f);
    return 0;
}

static struct eph_sandbox_config cfg_default(void)
{
    struct eph_sandbox_config c = {.backend = "fake", .image = "/img", .init_path = "/init"};
    eph_sandbox_limits_default(&c.limits);
    return c;
}

static int setup(void **state)
{
    assert_int_equal(eph_sandbox_pool_new(&pool), 0);
    main_thread = pthread_self();
    atomic_store(&fail_creates, false);
    atomic_store(&creates_by_other_threads, 0);
    return 0;
}

static int teardown(void **state)
{
    eph_sandbox_pool_stop(pool);
    assert_int_equal(atomic_load(&live), 0);
    eph_sandbox_pool_free(pool);
    pool = NULL;
    return 0;
}

static void test_disabled_creates_fresh(void **state)
{
    struct eph_sandbox_config c = cfg_default();
    assert_int_equal(eph_sandbox_pool_start(pool, &fake_ops, &c, 0), 0);
    struct eph_sandbox *sb = NULL;
    bool pooled = true;
    assert_int_equal(eph_sandbox_pool_take(pool, &fake_ops, &c, &sb, &pooled), 0);
    assert_non_null(sb);
    assert_false(pooled); /* a fresh one: compute is billed from its creation */
    assert_int_equal(atomic_load(&creates_by_other_threads), 0); /* made by this thread */
    struct eph_sandbox_pool_stats st;
    eph_sandbox_pool_stats(pool, &st);
    assert_int_equal(st.fallbacks, 1);
    assert_int_equal(st.taken, 0);
    eph_sandbox_destroy(sb);
    assert_int_equal(eph_sandbox_pool_start(pool, &fake_ops, &c, EPH_SANDBOX_POOL_MAX + 1),
                     -EINVAL);
}

static void test_fill_take_refill_stop(void **state)
{
    struct eph_sandbox_config c = cfg_default();
    assert_int_equal(eph_sandbox_pool_start(pool, &fake_ops, &c, 3), 0);
    assert_int_equal(eph_sandbox_pool_start(pool, &fake_ops, &c, 3), -EALREADY);
    assert_int_equal(eph_sandbox_pool_wait_full(pool, 5000), 0);
    assert_int_equal(atomic_load(&live), 3);
    assert_int_equal(atomic_load(&creates_by_other_threads), 3); /* the pool's own thread */

    struct eph_sandbox *a = NULL, *b = NULL;
    bool pooled = false;
    assert_int_equal(eph_sandbox_pool_take(pool, &fake_ops, &c, &a, &pooled), 0);
    assert_true(pooled); /* compute is billed from the take */
    assert_int_equal(eph_sandbox_pool_take(pool, &fake_ops, &c, &b, NULL), 0);
    assert_ptr_not_equal(a, b);
    assert_false(pthread_equal(((struct fake *)a)->creator, main_thread));
    /* Refilled in the background, up to the size and no further. */
    assert_int_equal(eph_sandbox_pool_wait_full(pool, 5000), 0);
    struct eph_sandbox_pool_stats st;
    eph_sandbox_pool_stats(pool, &st);
    assert_int_equal(st.ready, 3);
    assert_int_equal(st.taken, 2);
    assert_int_equal(st.created, 5);
    assert_int_equal(atomic_load(&live), 5);

    /* Another configuration is not served from this pool. */
    struct eph_sandbox_config other = c;
    other.limits.memory_mib *= 2;
    struct eph_sandbox *x = NULL;
    assert_int_equal(eph_sandbox_pool_take(pool, &fake_ops, &other, &x, NULL), 0);
    assert_true(pthread_equal(((struct fake *)x)->creator, main_thread));
    eph_sandbox_pool_stats(pool, &st);
    assert_int_equal(st.fallbacks, 1);
    assert_int_equal(st.ready, 3);

    /* Stop destroys the idle ones and only them: a, b and x are their takers'. */
    eph_sandbox_pool_stop(pool);
    eph_sandbox_pool_stats(pool, &st);
    assert_int_equal(st.destroyed, 3);
    assert_int_equal(st.ready, 0);
    assert_int_equal(atomic_load(&live), 3);
    eph_sandbox_destroy(a);
    eph_sandbox_destroy(b);
    eph_sandbox_destroy(x);
    assert_int_equal(atomic_load(&live), 0);
    /* Stopped: a take still works, by creating. */
    assert_int_equal(eph_sandbox_pool_take(pool, &fake_ops, &c, &a, NULL), 0);
    eph_sandbox_destroy(a);
    eph_sandbox_pool_stop(pool); /* idempotent */
}

#define TAKERS 8
#define TAKES 100

static void *taker(void *arg)
{
    uint64_t *ids = arg;
    struct eph_sandbox_config c = cfg_default();
    for (int i = 0; i < TAKES; i++) {
        struct eph_sandbox *sb = NULL;
        if (eph_sandbox_pool_take(pool, &fake_ops, &c, &sb, NULL) != 0 || !sb)
            return (void *)1;
        struct fake *f = (struct fake *)sb;
        if (atomic_fetch_add(&f->owners, 1) != 0)
            return (void *)2; /* handed out twice */
        ids[i] = f->id;
        if (i % 3 == 0)
            sched_yield();
        eph_sandbox_destroy(sb);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_never_handed_out_twice(void **state)
{
    struct eph_sandbox_config c = cfg_default();
    assert_int_equal(eph_sandbox_pool_start(pool, &fake_ops, &c, 4), 0);
    static uint64_t ids[TAKERS][TAKES];
    pthread_t t[TAKERS];
    for (int i = 0; i < TAKERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, taker, ids[i]), 0);
    for (int i = 0; i < TAKERS; i++) {
        void *r = (void *)3;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    /* Every sandbox any thread got is a different one (ids are never reused). */
    uint64_t *all = &ids[0][0];
    qsort(all, TAKERS * TAKES, sizeof(uint64_t), cmp_u64);
    for (int i = 1; i < TAKERS * TAKES; i++)
        assert_true(all[i] != all[i - 1]);
    struct eph_sandbox_pool_stats st;
    eph_sandbox_pool_stats(pool, &st);
    assert_int_equal(st.taken + st.fallbacks, TAKERS * TAKES);
    assert_true(st.taken > 0);
    eph_sandbox_pool_stop(pool);
    assert_int_equal(atomic_load(&live), 0);
}

static void test_failing_creates_back_off_and_stop(void **state)
{
    struct eph_sandbox_config c = cfg_default();
    atomic_store(&fail_creates, true);
    assert_int_equal(eph_sandbox_pool_start(pool, &fake_ops, &c, 2), 0);
    assert_int_equal(eph_sandbox_pool_wait_full(pool, 300), -ETIMEDOUT);
    struct eph_sandbox *sb = NULL;
    assert_int_equal(eph_sandbox_pool_take(pool, &fake_ops, &c, &sb, NULL),
                     -EIO); /* what create says */
    struct eph_sandbox_pool_stats st;
    eph_sandbox_pool_stats(pool, &st);
    assert_true(st.failures >= 1);
    assert_true(st.failures < 10); /* backing off, not spinning */
    /* The pool recovers once creates work again... */
    atomic_store(&fail_creates, false);
    assert_int_equal(eph_sandbox_pool_wait_full(pool, 15000), 0);
    /* ...and stop does not wait for a backoff. */
    uint64_t t0 = (uint64_t)time(NULL);
    eph_sandbox_pool_stop(pool);
    assert_true((uint64_t)time(NULL) - t0 <= 2);
    assert_int_equal(atomic_load(&live), 0);
}

/* ---- the real backend ---- */

/* The sandbox cgroups of this process, counted once per sandbox: under ephemeral/ in the cgroup2
 * mount (v2) or in the memory hierarchy (v1; the pids and cpu ones mirror it). Where those are is
 * read from this host's mounts, not assumed. */
static int count_cgroups_of_this_process(void)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "eph-%d-", (int)getpid());
    FILE *mi = fopen("/proc/self/mountinfo", "re");
    assert_non_null(mi);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), mi)) {
        /* id parent maj:min root MOUNT options ... - TYPE source SUPER */
        char mnt[1024], type[32], super[1024];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %*s %1023s", mnt) != 1 ||
            sscanf(dash + 3, "%31s %*s %1023s", type, super) != 2)
            continue;
        bool v2 = strcmp(type, "cgroup2") == 0;
        bool v1_memory = strcmp(type, "cgroup") == 0 &&
                         (strstr(super, ",memory") || strncmp(super, "memory", 6) == 0);
        if (!v2 && !v1_memory)
            continue;
        char parent[1100];
        snprintf(parent, sizeof(parent), "%s/ephemeral", mnt);
        DIR *d = opendir(parent);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
                n++;
        closedir(d);
    }
    fclose(mi);
    return n;
}

static void test_namespaces_pool(void **state)
{
    const char *build = getenv("BUILD"), *top = getenv("TOP");
    char init[4096], image[4096], why[256];
    snprintf(init, sizeof(init), "%s/ephemeral-init", build ? build : "build");
    snprintf(image, sizeof(image), "%s/var/images/default", top ? top : ".");
    struct eph_sandbox_config c = {.backend = "namespaces", .image = image, .init_path = init};
    eph_sandbox_limits_default(&c.limits);
    const struct eph_sandbox_ops *ops = eph_sandbox_backend("namespaces");
    assert_non_null(ops);
    if (access(image, R_OK) != 0 || ops->probe(&c, why, sizeof(why)) != 0) {
        print_message("skipped: the namespaces backend cannot run here (%s)\n",
                      access(image, R_OK) != 0 ? "no image" : why);
        skip();
    }
    assert_int_equal(eph_sandbox_pool_start(pool, ops, &c, 2), 0);
    assert_int_equal(eph_sandbox_pool_wait_full(pool, 20000), 0);
    assert_int_equal(count_cgroups_of_this_process(), 2);
    struct eph_sandbox *sb = NULL;
    assert_int_equal(eph_sandbox_pool_take(pool, ops, &c, &sb, NULL), 0);
    /* Created by the pool's thread, used from this one: it answers. */
    struct eph_exec_request req = {
        .command = "echo pooled", .timeout_ms = 10000, .stdout_cap = 64, .stderr_cap = 64};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    assert_int_equal(eph_sandbox_exec(sb, &req, &res), 0);
    assert_int_equal(res.exit_code, 0);
    assert_int_equal(res.out.len, 7);
    assert_memory_equal(res.out.data, "pooled\n", 7);
    eph_exec_result_release(&res);
    assert_int_equal(eph_sandbox_pool_wait_full(pool, 20000), 0); /* refilled */
    assert_int_equal(count_cgroups_of_this_process(), 3);
    assert_int_equal(eph_sandbox_destroy(sb), 0);
    eph_sandbox_pool_stop(pool);
    /* Nothing left: no cgroup of this process (destroy removes it after its init is reaped). */
    assert_int_equal(count_cgroups_of_this_process(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_disabled_creates_fresh, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fill_take_refill_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_never_handed_out_twice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failing_creates_back_off_and_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_namespaces_pool, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
