/* Allocation-failure injection for the unit tests (docs/HACKING.md, "Allocation failures").
 *
 * `make faults` links every unit test binary against the project's objects combined with
 * `ld -r --wrap=malloc,...`: each call the project's code makes to a function that can fail for
 * lack of resources (malloc, calloc, realloc, strdup, strndup, asprintf, vasprintf,
 * pthread_create, jansson's constructors, serialisers and parsers, curl_slist_append) comes here.
 * The test's own calls are not wrapped.
 *
 * It also wraps cmocka's group runner (and skip()). With FAULTS=1 in the environment, each test
 * runs in forked children, each with the group's and the test's set-up and teardown: a first
 * child counts the calls its body makes (C), then one child per N = 1 … C fails the Nth. An
 * outcome is fine when the test
 *   - passed although call N failed (the code absorbed the failure), or
 *   - failed an assertion (the failure reached the test as an error or a different result),
 * and in both cases LeakSanitizer finds no unreachable block when the body ends: for a failed
 * assertion the check runs before cmocka unwinds the test's stack, so what the test still holds
 * is not a leak, what the failing function dropped is. Anything else is a problem: a crash (a
 * signal, a sanitizer report), a leak, a hang (FAULT_TIMEOUT seconds), an exit, or a test that
 * fails with no failure injected. A problem is run once more with the failing call's stack
 * printed, and the child's output is shown.
 *
 * Environment: FAULTS=1 enables it (otherwise the tests run as usual); FAULT_ONLY=name runs one
 * test; FAULT_AT=N fails only call N; FAULT_MAX (default 400; 0: no cap) bounds the children per
 * test: past it, the first FAULT_MAX/2 calls and the rest spread evenly over the others;
 * FAULT_TIMEOUT (default 60) bounds one child. The last line is "faults: BINARY: T tests, P
 * failure points injected (A absorbed, R reported; S tests sampled), X problems"; the exit
 * status is the number of problems. */
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* The sanitizers' entry points, absent from a build without them (then no leak check). */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));
void __sanitizer_print_stack_trace(void) __attribute__((weak));

/* How a child ends: its exit status. */
enum {
    CHILD_NOT_REACHED = 0, /* the body ended before call N: the test is done */
    CHILD_ABSORBED = 40,   /* call N failed, the test passed */
    CHILD_REPORTED = 41,   /* call N failed, the test failed an assertion */
    CHILD_LEAKED = 42,     /* LeakSanitizer found unreachable blocks */
    CHILD_FAILED = 43,     /* the test failed with no failure injected */
    CHILD_SKIPPED = 44,    /* the test skipped itself: nothing to inject into */
    CHILD_NO_BODY = 45,    /* the set-up failed: the body never ran */
};

static atomic_long counted;  /* counted calls of the current child's test body */
static atomic_long fail_at;  /* the call to fail; 0 when not armed */
static atomic_int hit;       /* call fail_at was reached (and failed) */
static atomic_int show_site; /* print the stack of the failed call */
static int in_child;         /* a forked child running the test */
static int in_body;          /* ... and inside its body */
static int outcome = -1;     /* the child's exit status, once its body has ended */
static long *shared_count;   /* where a child leaves how many calls its body counted */

static int fail_now(void)
{
    long at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (at == 0)
        return 0;
    if (atomic_fetch_add(&counted, 1) + 1 != at)
        return 0;
    atomic_store(&hit, 1);
    if (atomic_load(&show_site) && __sanitizer_print_stack_trace) {
        fprintf(stderr, "fault: call %ld fails here:\n", at);
        __sanitizer_print_stack_trace();
    }
    return 1;
}

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_vasprintf(char **out, const char *fmt, va_list ap);
int __wrap_asprintf(char **out, const char *fmt, ...);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

void *__wrap_malloc(size_t size)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL; /* p stays the caller's, as realloc leaves it */
    }
    return realloc(p, size);
}

/* libcurl's header lists: NULL on failure, the list left as it was (and the caller must keep it).
 */
struct curl_slist *__wrap_curl_slist_append(struct curl_slist *list, const char *s);
struct curl_slist *__wrap_curl_slist_append(struct curl_slist *list, const char *s)
{
    if (fail_now())
        return NULL;
    return curl_slist_append(list, s);
}

char *__wrap_strdup(const char *s)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return strndup(s, n);
}

int __wrap_vasprintf(char **out, const char *fmt, va_list ap)
{
    if (fail_now()) {
        errno = ENOMEM;
        return -1; /* *out is undefined after a failure, as glibc documents */
    }
    return vasprintf(out, fmt, ap);
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = __wrap_vasprintf(out, fmt, ap);
    va_end(ap);
    return rc;
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    if (fail_now())
        return EAGAIN;
    return pthread_create(t, attr, fn, arg);
}

/* jansson: its allocations count while the project's code is inside one of its constructors or
 * serialisers (the test's own JSON is left alone). Its parsers are one fault point each, their
 * inner allocations not failed: jansson 2.14's lexer ignores a failed buffer growth and writes
 * past the buffer (lex_save), a crash in the library, not in the code under test. */
static __thread int jansson_depth;

static void *json_alloc(size_t size)
{
    if (jansson_depth > 0 && fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc(size);
}

#define IN_JANSSON(type, call)                                                                     \
    do {                                                                                           \
        jansson_depth++;                                                                           \
        type r_ = call;                                                                            \
        jansson_depth--;                                                                           \
        return r_;                                                                                 \
    } while (0)

json_t *__wrap_json_object(void);
json_t *__wrap_json_array(void);
json_t *__wrap_json_string(const char *v);
json_t *__wrap_json_stringn(const char *v, size_t n);
json_t *__wrap_json_integer(json_int_t v);
json_t *__wrap_json_real(double v);
json_t *__wrap_json_deep_copy(const json_t *v);
int __wrap_json_object_set_new(json_t *o, const char *key, json_t *v);
int __wrap_json_object_update(json_t *o, json_t *other);
int __wrap_json_array_append_new(json_t *a, json_t *v);
int __wrap_json_array_extend(json_t *a, json_t *other);
json_t *__wrap_json_pack(const char *fmt, ...);
char *__wrap_json_dumps(const json_t *v, size_t flags);
size_t __wrap_json_dumpb(const json_t *v, char *buf, size_t size, size_t flags);
int __wrap_json_dump_file(const json_t *v, const char *path, size_t flags);
json_t *__wrap_json_loads(const char *in, size_t flags, json_error_t *error);
json_t *__wrap_json_loadb(const char *in, size_t len, size_t flags, json_error_t *error);
json_t *__wrap_json_load_file(const char *path, size_t flags, json_error_t *error);

json_t *__wrap_json_object(void)
{
    IN_JANSSON(json_t *, json_object());
}
json_t *__wrap_json_array(void)
{
    IN_JANSSON(json_t *, json_array());
}
json_t *__wrap_json_string(const char *v)
{
    IN_JANSSON(json_t *, json_string(v));
}
json_t *__wrap_json_stringn(const char *v, size_t n)
{
    IN_JANSSON(json_t *, json_stringn(v, n));
}
json_t *__wrap_json_integer(json_int_t v)
{
    IN_JANSSON(json_t *, json_integer(v));
}
json_t *__wrap_json_real(double v)
{
    IN_JANSSON(json_t *, json_real(v));
}
json_t *__wrap_json_deep_copy(const json_t *v)
{
    IN_JANSSON(json_t *, json_deep_copy(v));
}

int __wrap_json_object_set_new(json_t *o, const char *key, json_t *v)
{
    IN_JANSSON(int, json_object_set_new(o, key, v));
}

int __wrap_json_object_update(json_t *o, json_t *other)
{
    IN_JANSSON(int, json_object_update(o, other));
}

int __wrap_json_array_append_new(json_t *a, json_t *v)
{
    IN_JANSSON(int, json_array_append_new(a, v));
}
int __wrap_json_array_extend(json_t *a, json_t *other)
{
    IN_JANSSON(int, json_array_extend(a, other));
}

json_t *__wrap_json_pack(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jansson_depth++;
    json_t *r = json_vpack_ex(NULL, 0, fmt, ap);
    jansson_depth--;
    va_end(ap);
    return r;
}

char *__wrap_json_dumps(const json_t *v, size_t flags)
{
    IN_JANSSON(char *, json_dumps(v, flags));
}

size_t __wrap_json_dumpb(const json_t *v, char *buf, size_t size, size_t flags)
{
    IN_JANSSON(size_t, json_dumpb(v, buf, size, flags));
}

int __wrap_json_dump_file(const json_t *v, const char *path, size_t flags)
{
    IN_JANSSON(int, json_dump_file(v, path, flags));
}

static int parse_fails(json_error_t *error)
{
    if (!fail_now())
        return 0;
    if (error) {
        memset(error, 0, sizeof(*error));
        error->line = error->column = -1;
        snprintf(error->text, sizeof(error->text), "out of memory");
        /* As jansson itself records it (json_error_code() reads the text's last byte). */
        error->text[JSON_ERROR_TEXT_LENGTH - 1] = (char)json_error_out_of_memory;
    }
    return 1;
}

json_t *__wrap_json_loads(const char *in, size_t flags, json_error_t *error)
{
    return parse_fails(error) ? NULL : json_loads(in, flags, error);
}

json_t *__wrap_json_loadb(const char *in, size_t len, size_t flags, json_error_t *error)
{
    return parse_fails(error) ? NULL : json_loadb(in, len, flags, error);
}

json_t *__wrap_json_load_file(const char *path, size_t flags, json_error_t *error)
{
    return parse_fails(error) ? NULL : json_load_file(path, flags, error);
}

__attribute__((constructor)) static void fault_init(void)
{
    json_set_alloc_funcs(json_alloc, free);
}

/* ---- the child ---- */

/* The body has ended (passed or failed an assertion): classify, with the leak check made while
 * the test's stack and state are still there. The teardown runs after, as in a normal run. */
static void body_end(int passed)
{
    in_body = 0;
    atomic_store(&fail_at, 0);
    *shared_count = atomic_load(&counted);
    int reached = atomic_load(&hit);
    if (reached && __lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check())
        outcome = CHILD_LEAKED;
    else if (!reached)
        outcome = passed ? CHILD_NOT_REACHED : CHILD_FAILED;
    else
        outcome = passed ? CHILD_ABSORBED : CHILD_REPORTED;
}

/* cmocka ends a failed test with longjmp (glibc's checked form): the body's end, seen while its
 * stack is still there. Then the real longjmp, on to the teardown. */
void __longjmp_chk(jmp_buf env, int val) __attribute__((noreturn));
void __longjmp_chk(jmp_buf env, int val)
{
    if (in_body)
        body_end(0);
    void (*real)(jmp_buf, int) = (void (*)(jmp_buf, int))dlsym(RTLD_NEXT, "__longjmp_chk");
    real(env, val);
    abort();
}

/* A test that skips itself (a machine without what it needs): nothing to inject into. */
void __real__skip(const char *file, int line);
void __wrap__skip(const char *file, int line);
void __wrap__skip(const char *file, int line)
{
    if (in_body) {
        in_body = 0;
        atomic_store(&fail_at, 0);
        outcome = CHILD_SKIPPED;
    }
    __real__skip(file, line);
}

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS};
#define N_CRASH_SIGNALS (sizeof(crash_signals) / sizeof(crash_signals[0]))
static struct sigaction sanitizer_handlers[N_CRASH_SIGNALS];

static struct {
    const char *group;
    const char *test;
    CMUnitTestFunction body;
    long at; /* the call this child fails; LONG_MAX to count */
    int site;
    unsigned timeout;
    char log[64];
} cur;

static void trampoline(void **state)
{
    /* cmocka turns a crash into a failed test: give the signals back to the sanitizers. */
    for (size_t i = 0; i < N_CRASH_SIGNALS; i++)
        sigaction(crash_signals[i], &sanitizer_handlers[i], NULL);
    atomic_store(&show_site, cur.site);
    atomic_store(&counted, 0);
    atomic_store(&hit, 0);
    in_body = 1;
    atomic_store(&fail_at, cur.at);
    cur.body(state);
    body_end(1);
}

int __real__cmocka_run_group_tests(const char *group, const struct CMUnitTest *tests, size_t n,
                                   CMFixtureFunction setup, CMFixtureFunction teardown);
int __wrap__cmocka_run_group_tests(const char *group, const struct CMUnitTest *tests, size_t n,
                                   CMFixtureFunction setup, CMFixtureFunction teardown);

/* One child: the group's set-up, the test's, its body failing call `at`, the teardowns. */
static void child_run(const struct CMUnitTest *test, CMFixtureFunction setup,
                      CMFixtureFunction teardown)
{
    in_child = 1;
    int fd = open(cur.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd >= 0)
        dup2(fd, STDERR_FILENO);
    if (null >= 0)
        dup2(null, STDOUT_FILENO);
    alarm(cur.timeout);
    struct CMUnitTest one = *test;
    one.test_func = trampoline;
    __real__cmocka_run_group_tests(cur.group, &one, 1, setup, teardown);
    _exit(outcome < 0 ? CHILD_NO_BODY : outcome);
}

/* ---- the parent ---- */

static struct {
    long tests, points, absorbed, reported, problems, sampled;
} total;

static void show_log(void)
{
    FILE *f = fopen(cur.log, "r");
    if (!f)
        return;
    char line[1024];
    for (int n = 0; n < 150 && fgets(line, sizeof(line), f); n++)
        fprintf(stderr, "    | %s", line);
    fclose(f);
}

/* Runs one child; returns its exit status, or 1000 + the signal that ended it. */
static int fork_one(const struct CMUnitTest *test, CMFixtureFunction setup,
                    CMFixtureFunction teardown, long at, int site)
{
    cur.at = at;
    cur.site = site;
    *shared_count = 0;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "faults: fork: %s\n", strerror(errno));
        exit(2);
    }
    if (pid == 0)
        child_run(test, setup, teardown);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "faults: waitpid: %s\n", strerror(errno));
            exit(2);
        }
    if (WIFSIGNALED(status))
        return 1000 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

static const char *problem_name(int rc, char *buf, size_t len)
{
    if (rc == 1000 + SIGALRM)
        snprintf(buf, len, "hung (over %u s)", cur.timeout);
    else if (rc > 1000)
        snprintf(buf, len, "crashed (%s)", strsignal(rc - 1000));
    else if (rc == CHILD_LEAKED)
        snprintf(buf, len, "leaked");
    else if (rc == CHILD_FAILED)
        snprintf(buf, len, "the test fails with no failure injected");
    else if (rc == CHILD_NO_BODY)
        snprintf(buf, len, "its set-up failed");
    else
        snprintf(buf, len, "exited with status %d", rc);
    return buf;
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? atol(v) : dflt;
}

/* The calls of one test to fail: all of them up to FAULT_MAX; past that the first half of
 * FAULT_MAX and the rest spread evenly over the remaining calls (the summary says so). */
static long next_at(long at, long calls, long max)
{
    if (max <= 0 || calls <= max || at < max / 2)
        return at + 1;
    long left = calls - max / 2, step = left / (max - max / 2);
    return at + (step > 1 ? step : 1);
}

static void fault_test(const struct CMUnitTest *test, CMFixtureFunction setup,
                       CMFixtureFunction teardown)
{
    long max = env_long("FAULT_MAX", 400), only = env_long("FAULT_AT", 0);
    cur.test = test->name;
    cur.body = test->test_func;
    total.tests++;
    char why[96];
    int rc = fork_one(test, setup, teardown, LONG_MAX, 0); /* a first run counts the calls */
    long calls = *shared_count;
    if (rc != CHILD_NOT_REACHED && rc != CHILD_SKIPPED) {
        fprintf(stderr, "FAULT %s/%s: with no failure injected: %s\n", cur.group, cur.test,
                problem_name(rc, why, sizeof(why)));
        show_log();
        total.problems++;
        return;
    }
    if (rc == CHILD_SKIPPED) {
        printf("faults: %s/%s: skipped\n", cur.group, cur.test);
        return;
    }
    long points = 0;
    for (long at = only ? only : 1; at <= (only ? only : calls); at = next_at(at, calls, max)) {
        rc = fork_one(test, setup, teardown, at, 0);
        if (rc == CHILD_NOT_REACHED || rc == CHILD_SKIPPED)
            break; /* fewer calls than counted: a path that depends on timing */
        points++;
        total.points++;
        if (rc == CHILD_ABSORBED || rc == CHILD_REPORTED) {
            ++*(rc == CHILD_ABSORBED ? &total.absorbed : &total.reported);
            if (only) { /* FAULT_AT: where the call is, and what the test said */
                fprintf(stderr, "faults: %s/%s: call %ld %s\n", cur.group, cur.test, at,
                        rc == CHILD_ABSORBED ? "absorbed" : "reported");
                fork_one(test, setup, teardown, at, 1);
                show_log();
            }
            continue;
        }
        fprintf(stderr, "FAULT %s/%s: call %ld of %ld failed: %s\n", cur.group, cur.test, at, calls,
                problem_name(rc, why, sizeof(why)));
        fork_one(test, setup, teardown, at, 1); /* again, with the failing call's stack */
        show_log();
        total.problems++;
    }
    if (max > 0 && calls > max && !only)
        total.sampled++;
    printf("faults: %s/%s: %ld calls, %ld failure points%s\n", cur.group, cur.test, calls, points,
           max > 0 && calls > max && !only ? " (sampled)" : "");
}

int __wrap__cmocka_run_group_tests(const char *group, const struct CMUnitTest *tests, size_t n,
                                   CMFixtureFunction setup, CMFixtureFunction teardown)
{
    if (!getenv("FAULTS") || in_child)
        return __real__cmocka_run_group_tests(group, tests, n, setup, teardown);
    for (size_t i = 0; i < N_CRASH_SIGNALS; i++)
        sigaction(crash_signals[i], NULL, &sanitizer_handlers[i]);
    shared_count = mmap(NULL, sizeof(*shared_count), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_count == MAP_FAILED) {
        fprintf(stderr, "faults: mmap: %s\n", strerror(errno));
        return 1;
    }
    (void)group; /* cmocka names the array, "tests" in every file: name the binary */
    cur.group = program_invocation_short_name;
    cur.timeout = (unsigned)env_long("FAULT_TIMEOUT", 60);
    snprintf(cur.log, sizeof(cur.log), "/tmp/fault-child.%d.log", (int)getpid());
    const char *only = getenv("FAULT_ONLY");
    for (size_t i = 0; i < n; i++)
        if (!only || strcmp(only, tests[i].name) == 0)
            fault_test(&tests[i], setup, teardown);
    unlink(cur.log);
    printf("faults: %s: %ld tests, %ld failure points injected (%ld absorbed, %ld reported; "
           "%ld tests sampled), %ld problems\n",
           cur.group, total.tests, total.points, total.absorbed, total.reported, total.sampled,
           total.problems);
    return (int)total.problems;
}
