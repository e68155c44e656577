/*
 * test_cli_request.c - `ephemeral run` arguments to the request body: every flag, the request
 * file overridden by flags, --file encoding and its path rules, and the usage errors (each leaving
 * no descriptor open).
 */
#include <errno.h>
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

#include "cli/request.h"

static char dir[] = "/tmp/test_cli_request.XXXXXX";
static char err[512];

#define ARGV(...) ((char *[]){"run", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"run", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(o, ...) eph_cli_run_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (o), err, sizeof(err))

static char *path_in_dir(const char *name)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
    return p[k];
}

static void write_file(const char *name, const char *content, size_t n)
{
    FILE *f = fopen(path_in_dir(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, n, f), n);
    fclose(f);
}

static int group_setup(void **state)
{
    if (!mkdtemp(dir))
        return -1;
    static const char seed[] =
        "{\"prompt\": \"This is a sandbox test.\", \"web\": false, \"shell\": true, "
        "\"timeout_seconds\": 120, \"max_cost_micros\": 40000, \"connections\": [\"a\"]}";
    write_file("request.json", seed, sizeof(seed) - 1);
    write_file("hello.txt", "hello\n", 6);
    write_file("bad.json", "{\"prompt\": ", 11);
    write_file("array.json", "[1]", 3);
    write_file("dup.json", "{\"shell\": true, \"shell\": false}", 31);
    mkdir(path_in_dir("subdir"), 0700);
    return 0;
}

static int group_teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_all_flags(void **state)
{
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, "--prompt", "hi", "--no-shell", "--web", "--timeout=30", "--budget",
                           "$0.04", "--model", "m1", "--image", "tools", "--connection", "gh",
                           "--connection=jira", "--zdr", "--idempotency-key", "k-1", "--detach",
                           "--json"),
                     0);
    assert_string_equal(o.prompt, "hi");
    assert_int_equal(o.shell, 0);
    assert_int_equal(o.web, 1);
    assert_int_equal(o.timeout_seconds, 30);
    assert_int_equal(o.max_cost_micros, 40000);
    assert_string_equal(o.model, "m1");
    assert_string_equal(o.image, "tools");
    assert_int_equal(o.nconnections, 2);
    assert_true(o.zdr && o.detach && o.json);
    assert_string_equal(o.idempotency_key, "k-1");
    assert_null(o.request_path);

    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(
        s, "{\"connections\":[\"gh\",\"jira\"],\"image\":\"tools\","
           "\"max_cost_micros\":40000,\"model\":\"m1\",\"prompt\":\"hi\",\"shell\":false,"
           "\"timeout_seconds\":30,\"web\":true,\"zero_data_retention\":true}");
    free(s);
    json_decref(body);
    eph_cli_run_opts_release(&o);
}

/* --web-allow DOMAIN... sends web as {"allow": [...]}, in order; --no-web wins over it. */
static void test_web_allow(void **state)
{
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, "--prompt", "p", "--max-cost-micros", "5", "--web-allow",
                           "example.com", "--web-allow=*.example.org"),
                     0);
    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    char *s = json_dumps(json_object_get(body, "web"), JSON_COMPACT);
    assert_string_equal(s, "{\"allow\":[\"example.com\",\"*.example.org\"]}");
    free(s);
    json_decref(body);
    eph_cli_run_opts_release(&o);

    assert_int_equal(PARSE(&o, "--prompt", "p", "--max-cost-micros", "5", "--web-allow",
                           "a.example", "--no-web"),
                     0);
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    assert_true(json_is_false(json_object_get(body, "web")));
    json_decref(body);
    eph_cli_run_opts_release(&o);
}

/* Flags override the request file's fields; the rest of the file is kept as it is. */
static void test_file_overridden(void **state)
{
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, path_in_dir("request.json"), "--no-shell", "--max-cost-micros",
                           "100000", "--connection", "b"),
                     0);
    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"connections\":[\"b\"],\"max_cost_micros\":100000,"
                           "\"prompt\":\"This is a sandbox test.\",\"shell\":false,"
                           "\"timeout_seconds\":120,\"web\":false}");
    free(s);
    json_decref(body);
    eph_cli_run_opts_release(&o);

    /* Unchanged without flags. */
    assert_int_equal(PARSE(&o, path_in_dir("request.json")), 0);
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    assert_int_equal(json_integer_value(json_object_get(body, "max_cost_micros")), 40000);
    assert_true(json_is_true(json_object_get(body, "shell")));
    json_decref(body);
    eph_cli_run_opts_release(&o);
}

static void test_stdin(void **state)
{
    static char in[] = "{\"prompt\":\"from stdin\",\"max_cost_micros\":5}";
    FILE *f = fmemopen(in, strlen(in), "r");
    assert_non_null(f);
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, "-", "--budget", "1"), 0);
    assert_string_equal(o.request_path, "-");
    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, f, &body, err, sizeof(err)), 0);
    assert_string_equal(json_string_value(json_object_get(body, "prompt")), "from stdin");
    assert_int_equal(json_integer_value(json_object_get(body, "max_cost_micros")), 1000000);
    json_decref(body);
    eph_cli_run_opts_release(&o);
    fclose(f);
}

static void expect_usage(int argc, char **argv, const char *needle)
{
    struct eph_cli_run_opts o;
    err[0] = '\0';
    int rc = eph_cli_run_parse(argc, argv, &o, err, sizeof(err));
    eph_cli_run_opts_release(&o);
    if (rc != -EINVAL || !strstr(err, needle))
        fail_msg("expected a usage error with '%s', got %d '%s'", needle, rc, err);
}

#define BAD(needle, ...) expect_usage(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), needle)

static void test_bad_flags(void **state)
{
    BAD("unknown option '--bogus'", "--bogus");
    BAD("unknown option '--promptx'", "--promptx=1");
    BAD("unknown option '-p'", "-p", "x");
    BAD("needs a value", "--prompt");
    BAD("needs a value", "--budget");
    BAD("takes no value", "--shell=yes");
    BAD("takes no value", "--zdr=1");
    BAD("--replay-of needs a run id", "--replay-of", "run_12");
    BAD("--replay-of needs a run id", "--replay-of", "run_0123456789ABCDEF0123456789abcdef");
    BAD("must not be empty", "--prompt", "");
    BAD("must not be empty", "--prompt=");
    BAD("--timeout", "--timeout", "0");
    BAD("--timeout", "--timeout", "3601");
    BAD("--timeout", "--timeout", "12s");
    BAD("--timeout", "--timeout", "-5");
    BAD("--timeout", "--timeout", " 5");
    BAD("--timeout", "--timeout", "99999999999999999999999");
    BAD("--budget", "--budget", "abc");
    BAD("--budget", "--budget", "0");
    BAD("--budget", "--budget", "-1");
    BAD("more than 6 decimals", "--budget", "0.0000001");
    BAD("too large", "--budget", "99999999999999999999");
    BAD("not more than zero", "--budget", "0.000000");
    BAD("--budget", "--budget", "1e3");
    BAD("--max-cost-micros", "--max-cost-micros", "0");
    BAD("--max-cost-micros", "--max-cost-micros", "1.5");
    BAD("--max-cost-micros", "--max-cost-micros", "99999999999999999999");
    BAD("not both", "--budget", "1", "--max-cost-micros", "5");
    BAD("--idempotency-key", "--idempotency-key", "");
    BAD("--idempotency-key", "--idempotency-key", "a\nb");
    BAD("unexpected argument 'b.json'", "a.json", "b.json");
    BAD("--file needs", "--file", ":x");
    BAD("--connection", "--connection", "");
    BAD("--web-allow needs a domain", "--web-allow", "");
    BAD("--model", "--model", "");
    BAD("--image", "--image", "");

    char longkey[300];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    BAD("--idempotency-key", "--idempotency-key", longkey);
    longkey[255] = '\0';
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, "--idempotency-key", longkey), 0);
    eph_cli_run_opts_release(&o);
}

/* --output: each pattern checked as the server would, sent in order as "outputs". */
static void test_outputs(void **state)
{
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, "--prompt", "p", "--max-cost-micros", "5", "--output", "report.md",
                           "--output=out/**"),
                     0);
    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    char *s = json_dumps(json_object_get(body, "outputs"), JSON_COMPACT);
    assert_string_equal(s, "[\"report.md\",\"out/**\"]");
    free(s);
    json_decref(body);
    eph_cli_run_opts_release(&o);
    BAD("--output '../x'", "--output", "../x");
    BAD("--output '/etc/passwd'", "--output", "/etc/passwd");
    BAD("--output ''", "--output", "");
    BAD("whole component", "--output", "a**");
}

/* A replay needs no prompt: the original's is used. */
static void test_replay_of(void **state)
{
    struct eph_cli_run_opts o;
    assert_int_equal(
        PARSE(&o, "--replay-of", "run_0123456789abcdef0123456789abcdef", "--budget", "0.1"), 0);
    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    assert_string_equal(json_string_value(json_object_get(body, "replay_of")),
                        "run_0123456789abcdef0123456789abcdef");
    assert_null(json_object_get(body, "prompt"));
    assert_int_equal(json_integer_value(json_object_get(body, "max_cost_micros")), 100000);
    json_decref(body);
    eph_cli_run_opts_release(&o);
}

static void test_double_dash(void **state)
{
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, "--shell", "--", "--weird-name.json"), 0);
    assert_string_equal(o.request_path, "--weird-name.json");
    eph_cli_run_opts_release(&o);
}

/* The lowest descriptor number free now: the same before and after a call that failed means the
 * call left no descriptor open. */
static int lowest_free_fd(void)
{
    int fd = dup(0);
    assert_true(fd >= 0);
    close(fd);
    return fd;
}

static void expect_body_error(int argc, char **argv, int want, const char *needle)
{
    int free_fd = lowest_free_fd();
    struct eph_cli_run_opts o;
    assert_int_equal(eph_cli_run_parse(argc, argv, &o, err, sizeof(err)), 0);
    json_t *body = NULL;
    err[0] = '\0';
    int rc = eph_cli_run_body(&o, stdin, &body, err, sizeof(err));
    eph_cli_run_opts_release(&o);
    assert_null(body);
    if (rc != want || !strstr(err, needle))
        fail_msg("expected %d with '%s', got %d '%s'", want, needle, rc, err);
    if (lowest_free_fd() != free_fd)
        fail_msg("a descriptor was left open after '%s'", needle);
}

#define BAD_BODY(want, needle, ...)                                                                \
    expect_body_error(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), want, needle)

static void test_body_errors(void **state)
{
    BAD_BODY(-EINVAL, "a prompt is required", "--budget", "1");
    BAD_BODY(-EINVAL, "a budget is required", "--prompt", "x");
    BAD_BODY(-ENOENT, "cannot read", path_in_dir("missing.json"));
    BAD_BODY(-EISDIR, "cannot read", path_in_dir("subdir"));
    BAD_BODY(-EINVAL, "not a regular file", "/dev/null");
    BAD_BODY(-EINVAL, "not valid json", path_in_dir("bad.json"));
    BAD_BODY(-EINVAL, "json object", path_in_dir("array.json"));
    BAD_BODY(-EINVAL, "not valid json", path_in_dir("dup.json"));
    BAD_BODY(-EINVAL, "utf-8", "--prompt", "\xff\xfe", "--budget", "1");
    BAD_BODY(-ENOENT, "cannot read", "--prompt", "x", "--budget", "1", "--file",
             path_in_dir("nope.txt"));
    BAD_BODY(-EISDIR, "cannot read", "--prompt", "x", "--budget", "1", "--file",
             path_in_dir("subdir"));
    /* The server's path rule, each refusal saying which part of it failed. */
    BAD_BODY(-EINVAL, "absolute", "--prompt", "x", "--budget", "1", "--file", "hello.txt:/etc/x");
    BAD_BODY(-EINVAL, "'..'", "--prompt", "x", "--budget", "1", "--file", "hello.txt:../x");
    BAD_BODY(-EINVAL, "'..'", "--prompt", "x", "--budget", "1", "--file", "hello.txt:a/../b");
    BAD_BODY(-EINVAL, "empty", "--prompt", "x", "--budget", "1", "--file", "hello.txt:");
    BAD_BODY(-EINVAL, "ends with '/'", "--prompt", "x", "--budget", "1", "--file",
             "hello.txt:dir/");
    BAD_BODY(-EINVAL, "empty component", "--prompt", "x", "--budget", "1", "--file",
             "hello.txt:a//b");
    BAD_BODY(-EINVAL, "'.' component", "--prompt", "x", "--budget", "1", "--file", "hello.txt:./a");
    BAD_BODY(-EINVAL, "control character", "--prompt", "x", "--budget", "1", "--file",
             "hello.txt:a\tb");
    /* Two files the run cannot both have. */
    char twice[300], under[300];
    snprintf(twice, sizeof(twice), "%s:a", path_in_dir("hello.txt"));
    snprintf(under, sizeof(under), "%s:a/b", path_in_dir("hello.txt"));
    BAD_BODY(-EINVAL, "twice", "--prompt", "x", "--budget", "1", "--file", twice, "--file", twice);
    BAD_BODY(-EINVAL, "puts a file under it", "--prompt", "x", "--budget", "1", "--file", twice,
             "--file", under);
}

static void test_files(void **state)
{
    char spec[300];
    snprintf(spec, sizeof(spec), "%s:in/greeting.txt", path_in_dir("hello.txt"));
    struct eph_cli_run_opts o;
    assert_int_equal(PARSE(&o, "--prompt", "x", "--budget", "0.5", "--file",
                           path_in_dir("hello.txt"), "--file", spec),
                     0);
    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    char *s = json_dumps(json_object_get(body, "files"), JSON_COMPACT);
    assert_string_equal(s, "[{\"path\":\"hello.txt\",\"content_base64\":\"aGVsbG8K\"},"
                           "{\"path\":\"in/greeting.txt\",\"content_base64\":\"aGVsbG8K\"}]");
    free(s);
    json_decref(body);
    eph_cli_run_opts_release(&o);
}

/* More than the API takes in all fails before the whole file is read. */
static void test_files_too_large(void **state)
{
    FILE *f = fopen(path_in_dir("big.bin"), "wb");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (off_t)EPH_CLI_FILES_BYTES_MAX + 1), 0);
    fclose(f);
    BAD_BODY(-EMSGSIZE, "too large", "--prompt", "x", "--budget", "1", "--file",
             path_in_dir("big.bin"));
    /* Two halves that fit alone but not together. */
    f = fopen(path_in_dir("half.bin"), "wb");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (off_t)(EPH_CLI_FILES_BYTES_MAX / 2 + 1)), 0);
    fclose(f);
    char a[300], b[300];
    snprintf(a, sizeof(a), "%s:a", path_in_dir("half.bin"));
    snprintf(b, sizeof(b), "%s:b", path_in_dir("half.bin"));
    BAD_BODY(-EMSGSIZE, "too large", "--prompt", "x", "--budget", "1", "--file", a, "--file", b);
}

static void test_too_many_files(void **state)
{
    char *argv[2 * EPH_CLI_FILES_MAX + 5];
    int argc = 0;
    argv[argc++] = "run";
    for (int i = 0; i <= EPH_CLI_FILES_MAX; i++) {
        argv[argc++] = "--file";
        argv[argc++] = "x";
    }
    argv[argc] = NULL;
    expect_usage(argc, argv, "at most");
}

static void test_path_rules(void **state)
{
    assert_true(eph_cli_file_path_ok("a"));
    assert_true(eph_cli_file_path_ok("a/b.txt"));
    assert_true(eph_cli_file_path_ok("..a/b..")); /* dots inside names are fine */
    assert_false(eph_cli_file_path_ok(""));
    assert_false(eph_cli_file_path_ok(NULL));
    assert_false(eph_cli_file_path_ok("/a"));
    assert_false(eph_cli_file_path_ok(".."));
    assert_false(eph_cli_file_path_ok("a/.."));
    assert_false(eph_cli_file_path_ok("../a"));
    assert_false(eph_cli_file_path_ok("a//b"));
    assert_false(eph_cli_file_path_ok("a/"));
    assert_false(eph_cli_file_path_ok("."));
    assert_false(eph_cli_file_path_ok("./a"));
}

/* `sandbox create`: run's flags but the run-only ones, a day's time limit, an idle timeout, no
 * prompt needed. */
static void test_sandbox(void **state)
{
    (void)state;
    struct eph_cli_run_opts o;
    char *argv[] = {"create", "--budget",    "0.05",        "--timeout",  "86400", "--idle-timeout",
                    "60",     "--web-allow", "example.com", "--metadata", "k=v",   "--zdr",
                    NULL};
    assert_int_equal(eph_cli_sandbox_parse(12, argv, &o, err, sizeof(err)), 0);
    json_t *body = NULL;
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), 0);
    char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text,
                        "{\"idle_timeout_seconds\":60,\"max_cost_micros\":50000,"
                        "\"metadata\":{\"k\":\"v\"},\"timeout_seconds\":86400,"
                        "\"web\":{\"allow\":[\"example.com\"]},\"zero_data_retention\":true}");
    free(text);
    json_decref(body);
    eph_cli_run_opts_release(&o);
    static const char *const run_only[] = {"--prompt=x", "--shell",      "--model=m", "--detach",
                                           "--output=a", "--download=d", "--no-shell"};
    for (size_t i = 0; i < sizeof(run_only) / sizeof(run_only[0]); i++) {
        char *a[] = {"create", (char *)run_only[i], NULL};
        assert_int_equal(eph_cli_sandbox_parse(2, a, &o, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "is an option of `ephemeral run`"));
        eph_cli_run_opts_release(&o);
    }
    char *idle[] = {"run", "--idle-timeout", "5", NULL};
    assert_int_equal(eph_cli_run_parse(3, idle, &o, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "`ephemeral sandbox create`"));
    eph_cli_run_opts_release(&o);
    char *longer[] = {"run", "--timeout", "3601", NULL};
    assert_int_equal(eph_cli_run_parse(3, longer, &o, err, sizeof(err)), -EINVAL);
    eph_cli_run_opts_release(&o);
    char *nobudget[] = {"create", NULL};
    assert_int_equal(eph_cli_sandbox_parse(1, nobudget, &o, err, sizeof(err)), 0);
    assert_int_equal(eph_cli_run_body(&o, stdin, &body, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "a budget is required"));
    eph_cli_run_opts_release(&o);
}

static void test_idempotency_key(void **state)
{
    char a[37], b[37];
    assert_int_equal(eph_cli_idempotency_key(a), 0);
    assert_int_equal(eph_cli_idempotency_key(b), 0);
    assert_int_equal(strlen(a), 36);
    assert_string_not_equal(a, b);
    assert_int_equal(a[8], '-');
    assert_int_equal(a[13], '-');
    assert_int_equal(a[14], '4');
    assert_int_equal(a[18], '-');
    assert_non_null(strchr("89ab", a[19]));
    assert_int_equal(a[23], '-');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_flags),       cmocka_unit_test(test_file_overridden),
        cmocka_unit_test(test_web_allow),       cmocka_unit_test(test_outputs),
        cmocka_unit_test(test_stdin),           cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_double_dash),     cmocka_unit_test(test_replay_of),
        cmocka_unit_test(test_body_errors),     cmocka_unit_test(test_files),
        cmocka_unit_test(test_files_too_large), cmocka_unit_test(test_too_many_files),
        cmocka_unit_test(test_path_rules),      cmocka_unit_test(test_idempotency_key),
        cmocka_unit_test(test_sandbox),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
