/* The fence (src/run/fence.c) with a stub sandbox whose machine is a child process of the test:
 * the watchdog process kills the machine once its run's fence has passed when the sandbox cannot
 * be paused; a sandbox whose lease cannot be renewed in time is paused (and not killed while this
 * process keeps it so), then resumed when the fence moves on; nothing is fenced on a single-node
 * store. And the cancel token's hold (common/sink.h): it waits while the fence has passed and
 * returns false once the run is cancelled. Every wait is bounded and polls a state; nothing sleeps
 * to synchronise. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/sink.h"
#include "run/fence.h"
#include "run/live.h"
#include "run/service.h"

#define WAIT_MS 20000

/* A stub sandbox: its machine is a child that waits to be killed. */
struct stub_sb {
    struct eph_sandbox base;
    pid_t pid;
    int pidfd;
    bool can_pause;
    atomic_int pauses, resumes, interrupts;
};

static int stub_watch_fd(struct eph_sandbox *sb)
{
    struct stub_sb *s = (struct stub_sb *)sb;
    return (int)syscall(SYS_pidfd_open, s->pid, 0);
}

static int stub_pause(struct eph_sandbox *sb, bool paused)
{
    struct stub_sb *s = (struct stub_sb *)sb;
    if (!s->can_pause)
        return -ENOTSUP;
    atomic_fetch_add(paused ? &s->pauses : &s->resumes, 1);
    return 0;
}

static void stub_interrupt(struct eph_sandbox *sb)
{
    atomic_fetch_add(&((struct stub_sb *)sb)->interrupts, 1);
}

static const struct eph_sandbox_ops stub_ops = {
    .name = "stub",
    .watch_fd = stub_watch_fd,
    .pause = stub_pause,
    .interrupt = stub_interrupt,
};

static void stub_start(struct stub_sb *s, bool can_pause)
{
    memset(s, 0, sizeof(*s));
    s->base.ops = &stub_ops;
    s->can_pause = can_pause;
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        for (;;)
            pause();
    }
    s->pidfd = (int)syscall(SYS_pidfd_open, s->pid, 0);
    assert_true(s->pidfd >= 0);
}

/* Whether the child died (by SIGKILL) within ms; reaps it when it did. */
static bool stub_died_within(struct stub_sb *s, int ms)
{
    struct pollfd p = {.fd = s->pidfd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1)
        return false;
    int st = 0;
    assert_int_equal(waitpid(s->pid, &st, 0), s->pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
    close(s->pidfd);
    s->pid = 0;
    return true;
}

static void stub_end(struct stub_sb *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        close(s->pidfd);
    }
}

static bool wait_count(atomic_int *n, int want)
{
    uint64_t end = eph_clock_mono_ns() + (uint64_t)WAIT_MS * 1000000u;
    while (atomic_load(n) < want && eph_clock_mono_ns() < end) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(n) >= want;
}

/* A service with just what the fence uses: a store that says it is shared, a configuration, a
 * live registry with one run worked here. */
struct rig {
    struct eph_store_ops ops;
    struct eph_store store;
    struct eph_config cfg;
    struct eph_service svc;
    struct eph_live *live;
};

static void rig_start(struct rig *r, bool shared, unsigned lease_seconds)
{
    memset(r, 0, sizeof(*r));
    r->ops.name = "stub";
    r->ops.shared = shared;
    r->store.ops = &r->ops;
    r->cfg.lease_seconds = lease_seconds;
    r->cfg.max_concurrent_runs = 4;
    r->svc.cfg = &r->cfg;
    r->svc.store = &r->store;
    assert_int_equal(eph_live_registry_new(&r->svc.live), 0);
    assert_int_equal(eph_live_register(r->svc.live, "run_fence", 0, 0), 0);
    r->live = eph_live_get(r->svc.live, "run_fence");
    assert_non_null(r->live);
    assert_int_equal(eph_fence_start(&r->svc), 0);
}

static void rig_end(struct rig *r)
{
    eph_fence_stop(&r->svc);
    eph_live_put(r->live);
    eph_live_registry_free(r->svc.live);
}

/* The node cannot pause the sandbox: the watchdog kills its machine once the fence passes. */
static void test_watchdog_kills_at_the_fence(void **state)
{
    (void)state;
    struct rig r;
    rig_start(&r, true, 600);
    assert_non_null(r.svc.fence);
    struct stub_sb sb;
    stub_start(&sb, false);
    /* A fence far ahead: the machine lives. */
    eph_live_set_fence(r.live, eph_clock_mono_ns() + 3600ull * 1000000000u);
    eph_fence_arm(r.svc.fence, r.live, &sb.base);
    assert_false(stub_died_within(&sb, 300));
    /* Its fence passes: killed, by the watchdog (this process never signals it). */
    eph_live_set_fence(r.live, eph_clock_mono_ns());
    assert_true(stub_died_within(&sb, WAIT_MS));
    eph_fence_disarm(r.svc.fence, r.live);
    assert_int_equal(eph_fence_kills(r.svc.fence), 1);
    stub_end(&sb);
    rig_end(&r);
}

/* A lease that cannot be renewed in time pauses the sandbox, which this process then keeps from
 * the watchdog; a renewal resumes it; disarming a paused one interrupts it. */
static void test_paused_then_resumed(void **state)
{
    (void)state;
    struct rig r;
    rig_start(&r, true, 800); /* a lead of 100 s before the fence */
    struct stub_sb sb;
    stub_start(&sb, true);
    eph_live_set_fence(r.live, eph_clock_mono_ns() + 50ull * 1000000000u);
    eph_fence_arm(r.svc.fence, r.live, &sb.base);
    assert_true(wait_count(&sb.pauses, 1));
    assert_int_equal(atomic_load(&sb.resumes), 0);
    eph_live_set_fence(r.live, eph_clock_mono_ns() + 3600ull * 1000000000u);
    assert_true(wait_count(&sb.resumes, 1));
    assert_false(stub_died_within(&sb, 0));
    /* In doubt again, then given up: not resumed, interrupted. */
    eph_live_set_fence(r.live, eph_clock_mono_ns() + 50ull * 1000000000u);
    assert_true(wait_count(&sb.pauses, 2));
    eph_fence_disarm(r.svc.fence, r.live);
    assert_int_equal(atomic_load(&sb.interrupts), 1);
    assert_int_equal(atomic_load(&sb.resumes), 1);
    assert_int_equal(eph_fence_kills(r.svc.fence), 0);
    stub_end(&sb);
    rig_end(&r);
}

/* One node: nobody else can take a run over, so there is no fence and no watchdog. */
static void test_single_node_has_no_fence(void **state)
{
    (void)state;
    struct rig r;
    rig_start(&r, false, 30);
    assert_null(r.svc.fence);
    struct stub_sb sb;
    stub_start(&sb, false);
    eph_fence_arm(r.svc.fence, r.live, &sb.base);
    eph_fence_disarm(r.svc.fence, r.live);
    assert_int_equal(eph_fence_kills(r.svc.fence), 0);
    stub_end(&sb);
    rig_end(&r);
}

struct canceller {
    atomic_bool *flag;
    atomic_bool started;
};

static void *cancel_later(void *arg)
{
    struct canceller *c = arg;
    while (!atomic_load(&c->started)) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(c->flag, true);
    return NULL;
}

static void test_hold(void **state)
{
    (void)state;
    atomic_bool flag = false;
    _Atomic uint64_t fence = 0;
    struct eph_cancel c = {.flag = &flag, .fence_ns = &fence};
    assert_true(eph_cancel_hold(&c)); /* no fence */
    assert_true(eph_cancel_hold(NULL));
    atomic_store(&fence, eph_clock_mono_ns() + 3600ull * 1000000000u);
    assert_true(eph_cancel_hold(&c)); /* ahead */
    /* Passed: waits until the run is cancelled, then says so. */
    atomic_store(&fence, eph_clock_mono_ns());
    struct canceller k = {.flag = &flag};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_later, &k), 0);
    atomic_store(&k.started, true);
    assert_false(eph_cancel_hold(&c));
    pthread_join(t, NULL);
    assert_true(atomic_load(&flag));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watchdog_kills_at_the_fence),
        cmocka_unit_test(test_paused_then_resumed),
        cmocka_unit_test(test_single_node_has_no_fence),
        cmocka_unit_test(test_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
