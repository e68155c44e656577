/*
 * test_microvm_snapshot.c - the microvm backend's saved machines, without QEMU: the key, the
 * parked line, the conversation with a saving QEMU's monitor (a fake monitor on a socketpair,
 * answering as QEMU 7.2 does, and misbehaving), the resume line, and the directory's upkeep.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "sandbox/microvm/snapshot.h"

static uint64_t in_ms(unsigned ms)
{
    return eph_clock_mono_ns() + (uint64_t)ms * 1000000u;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---- the key ---- */

static void test_key_follows_text_and_files(void **state)
{
    char dir[] = "/tmp/eph-snapkey-XXXXXX", a[64], b[64];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof(a), "%s/a", dir);
    snprintf(b, sizeof(b), "%s/b", dir);
    write_file(a, "one");
    write_file(b, "two");
    const char *files[] = {a, b};
    char k1[17], k2[17], k3[17], k4[17];
    assert_int_equal(eph_vm_snapshot_key("qemu -m 320", files, 2, k1), 0);
    assert_int_equal(strlen(k1), 16);
    assert_int_equal(strspn(k1, "0123456789abcdef"), 16);
    assert_int_equal(eph_vm_snapshot_key("qemu -m 320", files, 2, k2), 0);
    assert_string_equal(k1, k2);
    /* Another command line, another key. */
    assert_int_equal(eph_vm_snapshot_key("qemu -m 576", files, 2, k3), 0);
    assert_string_not_equal(k1, k3);
    /* A file replaced (a new init, kernel or disk): another key. */
    struct timespec old[2] = {{1000, 0}, {1000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, b, old, 0), 0);
    assert_int_equal(eph_vm_snapshot_key("qemu -m 320", files, 2, k4), 0);
    assert_string_not_equal(k1, k4);
    /* A file that is not there: no key. */
    unlink(b);
    assert_int_equal(eph_vm_snapshot_key("qemu -m 320", files, 2, k4), -ENOENT);
    unlink(a);
    rmdir(dir);
}

/* ---- parked ---- */

static void test_wait_parked(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    /* In pieces, as a virtio port may deliver it. */
    assert_int_equal(write(sv[1], "ephemeral-", 10), 10);
    assert_int_equal(write(sv[1], "parked\n", 7), 7);
    assert_int_equal(eph_vm_wait_parked(sv[0], in_ms(2000)), 0);
    /* Nothing more: the deadline. */
    assert_int_equal(eph_vm_wait_parked(sv[0], in_ms(20)), -ETIMEDOUT);
    /* Something else first. */
    assert_int_equal(write(sv[1], "hello\n", 6), 6);
    assert_int_equal(eph_vm_wait_parked(sv[0], in_ms(2000)), -EPROTO);
    close(sv[0]);
    close(sv[1]);
    /* The guest gone before it parked. */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(write(sv[1], "ephemeral-par", 13), 13);
    close(sv[1]);
    assert_int_equal(eph_vm_wait_parked(sv[0], in_ms(2000)), -EPIPE);
    close(sv[0]);
}

/* ---- the monitor ---- */

enum fake_mode {
    FAKE_OK,          /* QEMU 7.2: events between answers, the migration active, then completed */
    FAKE_MIG_FAILS,   /* the migration ends "failed" with QEMU's reason */
    FAKE_GETFD_ERROR, /* getfd answered with an error */
    FAKE_GARBAGE,     /* not JSON */
    FAKE_HUGE,        /* a line past the cap */
    FAKE_SILENT,      /* greets, then never answers */
};

struct fake {
    int fd;
    enum fake_mode mode;
    int got_fd;           /* the descriptor getfd carried, as received */
    char commands[2048];  /* the commands, in order, by name */
    bool bandwidth_unset; /* migrate-set-parameters seen with max-bandwidth */
};

static void say(int fd, const char *s)
{
    size_t n = strlen(s);
    assert_int_equal(write(fd, s, n), (ssize_t)n);
}

/* One command line from the client (and any descriptor with it). */
static bool hear(struct fake *f, char *line, size_t cap)
{
    size_t len = 0;
    for (;;) {
        char c;
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = {.iov_base = &c, .iov_len = 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = u.buf,
                             .msg_controllen = sizeof(u.buf)};
        ssize_t n = recvmsg(f->fd, &msg, 0);
        if (n <= 0)
            return false;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        if (cm && cm->cmsg_type == SCM_RIGHTS)
            memcpy(&f->got_fd, CMSG_DATA(cm), sizeof(int));
        if (c == '\n')
            break;
        if (len + 1 < cap)
            line[len++] = c;
    }
    line[len] = '\0';
    return true;
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    if (f->mode == FAKE_GARBAGE) {
        say(f->fd, "this is not a monitor\n");
        return NULL;
    }
    if (f->mode == FAKE_HUGE) {
        char *big = malloc(70000);
        memset(big, 'x', 70000);
        (void)!write(f->fd, big, 70000);
        free(big);
        return NULL;
    }
    say(f->fd, "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 22, \"minor\": 2, \"major\": 7}}, "
               "\"capabilities\": [\"oob\"]}}\r\n");
    char line[1024];
    int polls = 0;
    while (hear(f, line, sizeof(line))) {
        if (f->mode == FAKE_SILENT)
            continue;
        char name[64] = "";
        const char *e = strstr(line, "\"execute\": \"");
        if (e)
            sscanf(e + 12, "%63[^\"]", name);
        strncat(f->commands, name, sizeof(f->commands) - strlen(f->commands) - 2);
        strcat(f->commands, " ");
        if (strcmp(name, "migrate-set-parameters") == 0 && strstr(line, "max-bandwidth"))
            f->bandwidth_unset = true;
        if (strcmp(name, "getfd") == 0 && f->mode == FAKE_GETFD_ERROR) {
            say(f->fd, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"No file descriptor "
                       "supplied via SCM_RIGHTS\"}}\r\n");
            continue;
        }
        if (strcmp(name, "migrate") == 0)
            say(f->fd, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": "
                       "\"MIGRATION\", \"data\": {\"status\": \"setup\"}}\r\n");
        if (strcmp(name, "query-migrate") == 0) {
            polls++;
            if (polls < 3)
                say(f->fd, "{\"return\": {\"status\": \"active\"}}\r\n");
            else if (f->mode == FAKE_MIG_FAILS)
                say(f->fd, "{\"return\": {\"status\": \"failed\", \"error-desc\": \"Unable to "
                           "write to file: File too large\"}}\r\n");
            else
                say(f->fd, "{\"return\": {\"status\": \"completed\", \"total-time\": 618}}\r\n");
            continue;
        }
        say(f->fd, "{\"return\": {}}\r\n");
        if (strcmp(name, "quit") == 0)
            break;
    }
    return NULL;
}

static int save_against(struct fake *f, enum fake_mode mode, unsigned ms, char *why, size_t cap)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    memset(f, 0, sizeof(*f));
    f->fd = sv[1];
    f->mode = mode;
    f->got_fd = -1;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fake_main, f), 0);
    int state = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(state >= 0);
    int rc = eph_vm_qmp_save(sv[0], state, in_ms(ms), why, cap);
    close(sv[0]); /* ends a fake still listening */
    assert_int_equal(pthread_join(t, NULL), 0);
    close(sv[1]);
    close(state);
    if (f->got_fd >= 0)
        close(f->got_fd);
    return rc;
}

static void test_qmp_save(void **state)
{
    struct fake f;
    char why[256];
    assert_int_equal(save_against(&f, FAKE_OK, 5000, why, sizeof(why)), 0);
    assert_string_equal(f.commands, "qmp_capabilities migrate-set-parameters getfd migrate "
                                    "query-migrate query-migrate query-migrate quit ");
    assert_true(f.bandwidth_unset);
    assert_true(f.got_fd >= 0); /* the state file went over with getfd */
}

static void test_qmp_save_failures(void **state)
{
    struct fake f;
    char why[256];
    assert_int_equal(save_against(&f, FAKE_MIG_FAILS, 5000, why, sizeof(why)), -EIO);
    assert_string_equal(why, "migration failed: Unable to write to file: File too large");
    /* No quit after a failure: the caller kills and reaps the QEMU. */
    assert_null(strstr(f.commands, "quit"));
    assert_int_equal(save_against(&f, FAKE_GETFD_ERROR, 5000, why, sizeof(why)), -EIO);
    assert_string_equal(why, "No file descriptor supplied via SCM_RIGHTS");
    assert_null(strstr(f.commands, "migrate "));
    assert_int_equal(save_against(&f, FAKE_GARBAGE, 5000, why, sizeof(why)), -EPROTO);
    assert_int_equal(save_against(&f, FAKE_HUGE, 5000, why, sizeof(why)), -EMSGSIZE);
    assert_int_equal(save_against(&f, FAKE_SILENT, 50, why, sizeof(why)), -ETIMEDOUT);
}

/* ---- the resume line ---- */

static void word(const char *line, const char *key, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    assert_non_null(p);
    p += strlen(pat);
    size_t n = strcspn(p, " \n");
    assert_true(n < cap);
    memcpy(out, p, n);
    out[n] = '\0';
}

static void test_resume_line(void **state)
{
    struct eph_sandbox_limits l = {
        .disk_mib = 64, .nofile = 256, .fsize_bytes = 1 << 20, .pids = 48, .memory_mib = 256};
    char a[EPH_VM_RESUME_MAX], b[EPH_VM_RESUME_MAX];
    int na = eph_vm_resume_line(a, sizeof(a), "/tmp/ephemeral-run-AbC123", &l);
    int nb = eph_vm_resume_line(b, sizeof(b), "/tmp/ephemeral-run-AbC123", &l);
    assert_true(na > 0 && (size_t)na == strlen(a) && a[na - 1] == '\n');
    assert_true(nb > 0);
    assert_memory_equal(a, "ephemeral.resume=1 ", 19);
    char v[128], w[128];
    word(a, "ephemeral.run", v, sizeof(v));
    assert_string_equal(v, "/tmp/ephemeral-run-AbC123");
    word(a, "ephemeral.disk_mib", v, sizeof(v));
    assert_string_equal(v, "64");
    word(a, "ephemeral.nofile", v, sizeof(v));
    assert_string_equal(v, "256");
    word(a, "ephemeral.fsize", v, sizeof(v));
    assert_string_equal(v, "1048576");
    word(a, "ephemeral.nproc", v, sizeof(v)); /* pids and the same margin as a boot's */
    assert_string_equal(v, "64");
    /* The clock: now, in ns. */
    word(a, "ephemeral.time", v, sizeof(v));
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long t = atoll(v), host = (long long)now.tv_sec * 1000000000ll + now.tv_nsec;
    assert_true(t <= host && host - t < 5000000000ll);
    /* A seed and a version 4 boot id, each different in every line. */
    word(a, "ephemeral.seed", v, sizeof(v));
    word(b, "ephemeral.seed", w, sizeof(w));
    assert_int_equal(strlen(v), 64);
    assert_int_equal(strspn(v, "0123456789abcdef"), 64);
    assert_string_not_equal(v, w);
    word(a, "ephemeral.boot_id", v, sizeof(v));
    word(b, "ephemeral.boot_id", w, sizeof(w));
    assert_int_equal(strlen(v), 36);
    assert_true(v[8] == '-' && v[13] == '-' && v[18] == '-' && v[23] == '-');
    assert_int_equal(v[14], '4');
    assert_non_null(strchr("89ab", v[19]));
    assert_string_not_equal(v, w);
    /* Too small a buffer: an error, not a cut line. */
    assert_int_equal(eph_vm_resume_line(a, 64, "/tmp/ephemeral-run-AbC123", &l), -ENAMETOOLONG);
}

/* ---- the directory ---- */

static void test_prune(void **state)
{
    char dir[] = "/tmp/eph-snapdir-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    /* Six saved machines, oldest first. */
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof(path), "%s/%016d.state", dir, i);
        write_file(path, "x");
        struct timespec t[2] = {{1000 + i, 0}, {1000 + i, 0}};
        assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
    }
    /* A build of a process that is gone, and one of a live process (this one). */
    pid_t gone = fork();
    assert_true(gone >= 0);
    if (gone == 0)
        _exit(0);
    assert_int_equal(waitpid(gone, NULL, 0), gone);
    snprintf(path, sizeof(path), "%s/0000000000000009.state.tmp-%d-0", dir, (int)gone);
    write_file(path, "x");
    snprintf(path, sizeof(path), "%s/0000000000000009.state.tmp-%d-1", dir, (int)getpid());
    write_file(path, "x");
    snprintf(path, sizeof(path), "%s/unrelated", dir);
    write_file(path, "x");
    assert_int_equal(eph_vm_snapshot_prune(dir), 3);
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof(path), "%s/%016d.state", dir, i);
        assert_int_equal(access(path, F_OK) == 0, i >= 2); /* the four newest stay */
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/0000000000000009.state.tmp-%d-0", dir, (int)gone);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/0000000000000009.state.tmp-%d-1", dir, (int)getpid());
    assert_int_equal(access(path, F_OK), 0);
    unlink(path);
    snprintf(path, sizeof(path), "%s/unrelated", dir);
    assert_int_equal(access(path, F_OK), 0);
    unlink(path);
    assert_int_equal(rmdir(dir), 0);
    /* No directory yet: nothing to do. */
    assert_int_equal(eph_vm_snapshot_prune(dir), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_follows_text_and_files),
        cmocka_unit_test(test_wait_parked),
        cmocka_unit_test(test_qmp_save),
        cmocka_unit_test(test_qmp_save_failures),
        cmocka_unit_test(test_resume_line),
        cmocka_unit_test(test_prune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
