/* The store's images (docs/IMAGES.md): an org's and the operator's, who sees which, and a delete
 * refused while an unfinished run names the image. On SQLite, or PostgreSQL with EPH_TEST_PG. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/id.h"
#include "store_fixture.h"

static int setup(void **state)
{
    struct store_fixture *f = calloc(1, sizeof(*f));
    store_fixture_setup(f, "img");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    store_fixture_teardown(*state);
    free(*state);
    return 0;
}

static void make_image(struct eph_image_rec *r, const char *org, const char *name)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->org_id, sizeof(r->org_id), "%s", org);
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->status, sizeof(r->status), "building");
    snprintf(r->digest, sizeof(r->digest), "sha256:%064d", 1);
    r->recipe = json_pack("{s:[s]}", "packages", "jq");
    r->created_at_ms = 1000;
    r->log_path = strdup("/x/build.log");
}

static int collect(const struct eph_image_rec *r, void *ctx)
{
    char *names = ctx;
    strcat(names, r->name);
    strcat(names, r->org_id[0] ? "(org) " : "(op) ");
    return 0;
}

static void test_insert_get_update(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    struct eph_image_rec r, got;
    make_image(&r, f->org, "tools");
    assert_int_equal(st->ops->image_insert(st, &r), 0);
    assert_int_equal(st->ops->image_insert(st, &r), -EEXIST);
    assert_int_equal(st->ops->image_get(st, f->org, "tools", &got), 0);
    assert_string_equal(got.status, "building");
    assert_string_equal(got.digest, r.digest);
    assert_true(json_equal(got.recipe, r.recipe));
    assert_null(got.error);
    assert_string_equal(got.log_path, "/x/build.log");
    assert_int_equal(got.created_at_ms, 1000);
    eph_image_rec_release(&got);
    /* Another org does not see it. */
    bool created;
    char other[48];
    assert_int_equal(st->ops->org_ensure(st, "other", 0, other, sizeof(other), &created), 0);
    assert_int_equal(st->ops->image_get(st, other, "tools", &got), -ENOENT);
    /* Failed, with why. */
    snprintf(r.status, sizeof(r.status), "failed");
    r.error = strdup("E: Unable to locate package nope");
    r.size_bytes = 0;
    assert_int_equal(st->ops->image_update(st, &r), 0);
    assert_int_equal(st->ops->image_get(st, f->org, "tools", &got), 0);
    assert_string_equal(got.status, "failed");
    assert_string_equal(got.error, "E: Unable to locate package nope");
    eph_image_rec_release(&got);
    /* Ready. */
    snprintf(r.status, sizeof(r.status), "ready");
    free(r.error);
    r.error = NULL;
    r.size_bytes = 123456789012;
    assert_int_equal(st->ops->image_update(st, &r), 0);
    assert_int_equal(st->ops->image_get(st, f->org, "tools", &got), 0);
    assert_string_equal(got.status, "ready");
    assert_null(got.error);
    assert_int_equal(got.size_bytes, 123456789012);
    eph_image_rec_release(&got);
    eph_image_rec_release(&r);
    /* A record deleted and defined again is not the one an old build updates. */
    make_image(&r, f->org, "again");
    assert_int_equal(st->ops->image_insert(st, &r), 0);
    assert_int_equal(st->ops->image_delete(st, f->org, "again"), 0);
    struct eph_image_rec again;
    make_image(&again, f->org, "again");
    again.created_at_ms = 2000;
    assert_int_equal(st->ops->image_insert(st, &again), 0);
    snprintf(r.status, sizeof(r.status), "ready");
    assert_int_equal(st->ops->image_update(st, &r), -ENOENT);
    assert_int_equal(st->ops->image_get(st, f->org, "again", &got), 0);
    assert_string_equal(got.status, "building");
    eph_image_rec_release(&got);
    eph_image_rec_release(&again);
    eph_image_rec_release(&r);
    /* Updating one that is not there. */
    make_image(&r, f->org, "nope");
    assert_int_equal(st->ops->image_update(st, &r), -ENOENT);
    eph_image_rec_release(&r);
}

static void test_operator_images_are_everyones(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    bool created;
    char other[48];
    assert_int_equal(st->ops->org_ensure(st, "other", 0, other, sizeof(other), &created), 0);
    struct eph_image_rec r, got;
    make_image(&r, "", "shared");
    assert_int_equal(st->ops->image_insert(st, &r), 0);
    eph_image_rec_release(&r);
    make_image(&r, "", "both");
    assert_int_equal(st->ops->image_insert(st, &r), 0);
    eph_image_rec_release(&r);
    make_image(&r, f->org, "both");
    snprintf(r.status, sizeof(r.status), "ready");
    assert_int_equal(st->ops->image_insert(st, &r), 0);
    eph_image_rec_release(&r);
    /* Both orgs see the operator's; acme's own "both" hides the operator's. */
    assert_int_equal(st->ops->image_get(st, other, "shared", &got), 0);
    assert_string_equal(got.org_id, "");
    eph_image_rec_release(&got);
    assert_int_equal(st->ops->image_get(st, f->org, "both", &got), 0);
    assert_string_equal(got.org_id, f->org);
    eph_image_rec_release(&got);
    assert_int_equal(st->ops->image_get(st, other, "both", &got), 0);
    assert_string_equal(got.org_id, "");
    eph_image_rec_release(&got);
    char names[256] = "";
    assert_int_equal(st->ops->image_list(st, f->org, collect, names), 0);
    assert_string_equal(names, "both(org) shared(op) ");
    names[0] = '\0';
    assert_int_equal(st->ops->image_list(st, other, collect, names), 0);
    assert_string_equal(names, "both(op) shared(op) ");
    /* An org cannot delete the operator's image through its own name. */
    assert_int_equal(st->ops->image_delete(st, other, "shared"), -ENOENT);
    assert_int_equal(st->ops->image_delete(st, "", "shared"), 0);
    assert_int_equal(st->ops->image_get(st, other, "shared", &got), -ENOENT);
}

static void test_delete_refused_while_a_run_uses_it(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    /* A queued run names "default" (the column's default); an image of that name is in use. */
    struct eph_image_rec r;
    make_image(&r, "", "default");
    assert_int_equal(st->ops->image_insert(st, &r), 0);
    eph_image_rec_release(&r);
    make_image(&r, f->org, "default");
    assert_int_equal(st->ops->image_insert(st, &r), 0);
    eph_image_rec_release(&r);
    struct eph_run run;
    eph_run_init(&run);
    assert_int_equal(eph_id_hex("run_", 16, run.id, sizeof(run.id)), 0);
    snprintf(run.org_id, sizeof(run.org_id), "%s", f->org);
    run.status = EPH_RUN_QUEUED;
    run.model = strdup("m");
    run.prompt = strdup("p");
    run.timeout_seconds = 10;
    run.created_at_ms = eph_clock_real_ms();
    run.cost.reserved_micros = 100;
    assert_int_equal(st->ops->run_insert(st, &run, NULL), 0);
    assert_int_equal(st->ops->image_delete(st, f->org, "default"), -EBUSY);
    assert_int_equal(st->ops->image_delete(st, "", "default"), -EBUSY);
    assert_int_equal(st->ops->image_delete(st, f->org, "missing"), -ENOENT);
    /* Finished, the run no longer holds it. */
    run.status = EPH_RUN_CANCELLED;
    run.finished_at_ms = eph_clock_real_ms();
    run.cost.released_micros = 100;
    struct eph_run_final fin = {.run = &run};
    assert_int_equal(st->ops->run_finish(st, &fin), 0);
    assert_int_equal(st->ops->image_delete(st, f->org, "default"), 0);
    assert_int_equal(st->ops->image_delete(st, "", "default"), 0);
    eph_run_release(&run);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_insert_get_update, setup, teardown),
        cmocka_unit_test_setup_teardown(test_operator_images_are_everyones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_refused_while_a_run_uses_it, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
