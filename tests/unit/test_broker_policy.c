/* Who may go where (docs/BROKER.md): a connection's target split and normalised, its method and
 * path rules (and the attempts to walk around a prefix), and the web allow-list. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "broker/policy.h"

static int target(const char *s, struct eph_conn_target *t)
{
    return eph_conn_target_parse(s, strlen(s), t);
}

static void test_target(void **state)
{
    static struct eph_conn_target t;
    assert_int_equal(target("/github/repos/o/r?per_page=5", &t), 0);
    assert_string_equal(t.name, "github");
    assert_string_equal(t.path, "/repos/o/r");
    assert_int_equal(t.query_len, 10);
    assert_memory_equal(t.query, "per_page=5", 10);
    assert_int_equal(target("/github", &t), 0);
    assert_string_equal(t.path, "/");
    assert_null(t.query);
    assert_int_equal(target("/github/", &t), 0);
    assert_string_equal(t.path, "/");
    assert_int_equal(target("/my_api-2/a/../b", &t), 0);
    assert_string_equal(t.name, "my_api-2");
    assert_string_equal(t.path, "/b");

    static const char *bad[] = {
        "/",
        "",
        "github/x",
        "/GitHub/x",
        "/git%68ub/x",
        "/../github/x",
        "/./x",
        "//github/x",
        "/git.hub/x",
        "/github/../../x",
        "/github//x",
        "/github/%2e%2e/%2e%2e/x",
        "/github/a%2fb",
        "?x",
        "/github\\x",
        "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (target(bad[i], &t) != -EINVAL)
            fail_msg("accepted: %s", bad[i]);
}

/* The rule's verdict, or -1 when the target does not even parse (refused before any rule). */
static int check(const char *method, const char *raw_target)
{
    static const char *const methods[] = {"GET", "POST"};
    static const char *const prefixes[] = {"/repos", "/user/"};
    static struct eph_conn_target t;
    if (eph_conn_target_parse(raw_target, strlen(raw_target), &t) != 0)
        return -1;
    return (int)eph_policy_check(method, strlen(method), t.path, methods, 2, prefixes, 2);
}

static void test_rules(void **state)
{
    assert_int_equal(check("GET", "/gh/repos"), EPH_POLICY_ALLOWED);
    assert_int_equal(check("GET", "/gh/repos/"), EPH_POLICY_ALLOWED);
    assert_int_equal(check("POST", "/gh/repos/o/r/issues"), EPH_POLICY_ALLOWED);
    assert_int_equal(check("GET", "/gh/user/"), EPH_POLICY_ALLOWED);
    assert_int_equal(check("GET", "/gh/user/keys"), EPH_POLICY_ALLOWED);
    assert_int_equal(check("GET", "/gh/repos/x/../y"), EPH_POLICY_ALLOWED);
    assert_int_equal(check("GET", "/gh/%72epos/x"), EPH_POLICY_ALLOWED);

    assert_int_equal(check("DELETE", "/gh/repos/o/r"), EPH_POLICY_METHOD_NOT_ALLOWED);
    assert_int_equal(check("get", "/gh/repos/o/r"), EPH_POLICY_METHOD_NOT_ALLOWED);
    assert_int_equal(check("GETX", "/gh/repos"), EPH_POLICY_METHOD_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/reposx"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/user"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/admin"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/"), EPH_POLICY_PATH_NOT_ALLOWED);
    /* The walk-arounds: out of the prefix after normalisation, or refused outright. */
    assert_int_equal(check("GET", "/gh/repos/../admin"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/repos/%2e%2e/admin"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/repos/%2E%2E/admin"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/repos/..;/admin"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/repos/./../admin"), EPH_POLICY_PATH_NOT_ALLOWED);
    assert_int_equal(check("GET", "/gh/repos//../admin"), -1);
    assert_int_equal(check("GET", "/gh//repos"), -1);
    assert_int_equal(check("GET", "/gh/repos%2f..%2fadmin"), -1);
    assert_int_equal(check("GET", "/gh/repos/../../admin"), -1);

    /* No prefixes: every path; a prefix that does not normalise allows nothing. */
    static const char *const get[] = {"GET"};
    static const char *const broken[] = {"/a/../../b"};
    assert_int_equal(eph_policy_check("GET", 3, "/anything", get, 1, NULL, 0), EPH_POLICY_ALLOWED);
    assert_int_equal(eph_policy_check("GET", 3, "/b", get, 1, broken, 1),
                     EPH_POLICY_PATH_NOT_ALLOWED);
    assert_true(eph_policy_path_allowed("/x/y", "/"));
    assert_true(eph_policy_path_allowed("/repos/x", "/repos/../repos"));
    assert_string_equal(eph_policy_denial_code(EPH_POLICY_METHOD_NOT_ALLOWED),
                        "method_not_allowed");
    assert_string_equal(eph_policy_denial_code(EPH_POLICY_PATH_NOT_ALLOWED), "path_not_allowed");
}

static void test_domains(void **state)
{
    static const char *const allow[] = {"example.com", "*.Docs.Python.org.", "127.0.0.1"};
    assert_true(eph_policy_domain_allowed("example.com", allow, 3));
    assert_false(eph_policy_domain_allowed("www.example.com", allow, 3));
    assert_false(eph_policy_domain_allowed("badexample.com", allow, 3));
    assert_false(eph_policy_domain_allowed("example.com.evil.net", allow, 3));
    assert_false(eph_policy_domain_allowed("example.co", allow, 3));
    assert_true(eph_policy_domain_allowed("a.docs.python.org", allow, 3));
    assert_true(eph_policy_domain_allowed("a.b.docs.python.org", allow, 3));
    assert_false(eph_policy_domain_allowed("docs.python.org", allow, 3));
    assert_false(eph_policy_domain_allowed("xdocs.python.org", allow, 3));
    assert_false(eph_policy_domain_allowed(".docs.python.org", allow, 3));
    assert_true(eph_policy_domain_allowed("127.0.0.1", allow, 3));
    assert_false(eph_policy_domain_allowed("127.0.0.2", allow, 3));
    assert_false(eph_policy_domain_allowed("", allow, 3));
    assert_false(eph_policy_domain_allowed("example.com", NULL, 0));
    static const char *const star[] = {"*."};
    assert_false(eph_policy_domain_allowed("a.b", star, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target),
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_domains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
