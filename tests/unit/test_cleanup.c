/* common/cleanup.h (scoped descriptors, heap and JSON, steal, the EINTR retry) and the location
 * that common/log.c adds to warnings and errors. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "common/log.h"

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static int open_scoped(bool keep)
{
    EPH_AUTOCLOSE int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    if (keep)
        return eph_steal_fd(&fd);
    return fd; /* the number only: closed on the way out */
}

static void test_autoclose_and_steal(void **state)
{
    int fd = open_scoped(false);
    assert_false(fd_open(fd));
    fd = open_scoped(true);
    assert_true(fd_open(fd));
    close(fd);
}

static void test_autoclose_keeps_errno(void **state)
{
    {
        EPH_AUTOCLOSE int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        errno = ENOSPC;
    }
    assert_int_equal(errno, ENOSPC);
}

static char *dup_scoped(void)
{
    EPH_AUTOFREE char *p = strdup("kept");
    assert_non_null(p);
    char *out = eph_steal_ptr(&p);
    assert_null(p);
    return out;
}

static void test_steal_ptr(void **state)
{
    /* Under the address sanitizer a missed free() is a leak and a double free() a crash. */
    EPH_AUTOFREE char *s = dup_scoped();
    assert_string_equal(s, "kept");
    EPH_AUTOJSON json_t *j = json_pack("{s:i}", "n", 1);
    json_t *k = json_incref(j);
    assert_int_equal(k->refcount, 2);
    {
        EPH_AUTOJSON json_t *scoped = json_incref(j);
        assert_int_equal(j->refcount, 3);
    }
    assert_int_equal(j->refcount, 2);
    json_decref(k);
}

static int calls;
static int interrupted_twice(void)
{
    if (++calls <= 2) {
        errno = EINTR;
        return -1;
    }
    return 7;
}

static int fails_once(void)
{
    calls++;
    errno = EBADF;
    return -1;
}

static void test_retry_eintr(void **state)
{
    calls = 0;
    assert_int_equal(EPH_RETRY_EINTR(interrupted_twice()), 7);
    assert_int_equal(calls, 3);
    calls = 0;
    assert_int_equal(EPH_RETRY_EINTR(fails_once()), -1);
    assert_int_equal(errno, EBADF);
    assert_int_equal(calls, 1);
}

/* Runs fn with stderr sent to a file and returns what it wrote. */
static void capture(void (*fn)(void), char *out, size_t cap)
{
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fileno(tmp), 2), 2);
    fn();
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
}

static int error_line;
static void log_error(void)
{
    errno = ENOENT;
    error_line = __LINE__ + 1;
    EPH_PERROR("test", "cannot open '%s'", "x");
}

static void log_info(void)
{
    EPH_INFO("test", "started");
}

static void log_json_warning(void)
{
    assert_int_equal(eph_log_configure(EPH_LOG_INFO, "json"), 0);
    EPH_WARN("test", "slow");
    assert_int_equal(eph_log_configure(EPH_LOG_INFO, "text"), 0);
}

static void test_log_says_where(void **state)
{
    char out[1024], want[128];
    capture(log_error, out, sizeof(out));
    snprintf(want, sizeof(want), "error test: cannot open 'x': %s (at log_error:%d)\n",
             strerror(ENOENT), error_line);
    assert_non_null(strstr(out, want));
    /* information says what happened, not where */
    capture(log_info, out, sizeof(out));
    assert_non_null(strstr(out, "info  test: started\n"));
    assert_null(strstr(out, "(at "));
    capture(log_json_warning, out, sizeof(out));
    assert_non_null(strstr(out, "\"message\":\"slow\",\"where\":\"log_json_warning:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_autoclose_and_steal), cmocka_unit_test(test_autoclose_keeps_errno),
        cmocka_unit_test(test_steal_ptr),           cmocka_unit_test(test_retry_eintr),
        cmocka_unit_test(test_log_says_where),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
