/* The sandbox launcher (src/sandbox/namespaces/launcher.c). Its side of the protocol against bad
 * requests, in this process over a socket pair: a message too short or too long, the wrong magic,
 * too few or too many descriptors, an unterminated path: each answered -EPROTO, with every
 * descriptor it carried closed, and the next good-looking request still read. Then the real
 * thing, where the namespaces backend runs here (root and the image): sandboxes cloned by the
 * launcher are this process's children and work; a launcher that is killed is reaped at the next
 * create, which this process then clones itself; stop reaps it. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox/backend.h"
#include "sandbox/namespaces/namespaces.h"

/* Mirrors of the launcher's wire structs: the test speaks the protocol from outside. */
struct req {
    uint32_t magic;
    int32_t join_n;
    int32_t has_cgroup_dir;
    struct eph_ns_plan plan;
};
struct rep {
    uint32_t magic;
    int32_t rc;
    int32_t pid;
};
#define MAGIC 0x4c4e4345u

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static void send_msg(int fd, const void *msg, size_t len, int nfds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 16)];
    } cm;
    memset(&cm, 0, sizeof(cm));
    int fds[16];
    for (int i = 0; i < nfds; i++) {
        fds[i] = dup(0);
        assert_true(fds[i] >= 0);
    }
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    assert_int_equal(sendmsg(fd, &mh, 0), (ssize_t)len);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
}

static struct req good_looking(void)
{
    struct req r;
    memset(&r, 0, sizeof(r));
    r.magic = MAGIC;
    strcpy(r.plan.root, "/nonexistent-image-root");
    return r;
}

/* One request through serve_one: its answer's rc, and no descriptor left behind. */
static int exchange(const void *msg, size_t len, int nfds)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    int before = count_fds();
    send_msg(sv[0], msg, len, nfds);
    assert_int_equal(eph_ns_launcher_serve_one(sv[1]), 0);
    assert_int_equal(count_fds(), before); /* every descriptor the request carried is closed */
    struct rep rep;
    char extra[8];
    struct iovec iov[2] = {{&rep, sizeof(rep)}, {extra, sizeof(extra)}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    assert_int_equal(recvmsg(sv[0], &mh, 0), (ssize_t)sizeof(rep));
    assert_int_equal(rep.magic, MAGIC);
    assert_int_equal(mh.msg_controllen, 0); /* no pidfd with an error */
    close(sv[0]);
    close(sv[1]);
    return rep.rc;
}

static void test_bad_requests(void **state)
{
    (void)state;
    struct req r = good_looking();
    assert_int_equal(exchange(&r, sizeof(r) - 1, 3), -EPROTO); /* short */
    char big[sizeof(r) + 64];
    memset(big, 0, sizeof(big));
    memcpy(big, &r, sizeof(r));
    assert_int_equal(exchange(big, sizeof(big), 3), -EPROTO); /* long */
    assert_int_equal(exchange(&r, sizeof(r), 0), -EPROTO);    /* no descriptors */
    assert_int_equal(exchange(&r, sizeof(r), 2), -EPROTO);    /* too few */
    assert_int_equal(exchange(&r, sizeof(r), 4), -EPROTO);    /* one not declared */
    assert_int_equal(exchange(&r, sizeof(r), 12), -EPROTO);   /* more than any request has */
    struct req m = r;
    m.magic = 0x12345678u;
    assert_int_equal(exchange(&m, sizeof(m), 3), -EPROTO);
    m = r;
    m.join_n = 4;
    assert_int_equal(exchange(&m, sizeof(m), 7), -EPROTO);
    m = r;
    m.join_n = -1;
    assert_int_equal(exchange(&m, sizeof(m), 2), -EPROTO);
    m = r;
    m.has_cgroup_dir = 2;
    assert_int_equal(exchange(&m, sizeof(m), 5), -EPROTO);
    m = r;
    memset(m.plan.root, 'a', sizeof(m.plan.root)); /* no terminator */
    assert_int_equal(exchange(&m, sizeof(m), 3), -EPROTO);
    m = r;
    memset(m.plan.tmp_opts, 'a', sizeof(m.plan.tmp_opts));
    assert_int_equal(exchange(&m, sizeof(m), 3), -EPROTO);
    m = r;
    m.plan.meminfo_len = sizeof(m.plan.meminfo) + 1;
    assert_int_equal(exchange(&m, sizeof(m), 3), -EPROTO);
    m = r;
    m.plan.root[0] = 'x'; /* not absolute */
    assert_int_equal(exchange(&m, sizeof(m), 3), -EPROTO);
}

/* The end of the server's side, and a hang-up: serve_one says so and does not answer. */
static void test_end_of_file(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    close(sv[0]);
    assert_int_equal(eph_ns_launcher_serve_one(sv[1]), 1);
    close(sv[1]);
}

/* Whether the namespaces backend runs here (root, cgroups, the image); false after saying why. */
static bool ns_usable(struct eph_sandbox_config *cfg, char *init, size_t ilen, char *image,
                      size_t mlen)
{
    const char *build = getenv("BUILD"), *top = getenv("TOP");
    snprintf(init, ilen, "%s/ephemeral-init", build ? build : "build");
    snprintf(image, mlen, "%s/var/images/default", top ? top : ".");
    memset(cfg, 0, sizeof(*cfg));
    cfg->backend = "namespaces";
    cfg->image = image;
    cfg->init_path = init;
    cfg->owner_tag = "test";
    eph_sandbox_limits_default(&cfg->limits);
    char why[512];
    if (access(image, R_OK) != 0) {
        print_message("skipped: no image at %s (make image)\n", image);
        return false;
    }
    if (eph_sandbox_namespaces_ops.probe(cfg, why, sizeof(why)) != 0) {
        print_message("skipped: namespaces: %s\n", why);
        return false;
    }
    return true;
}

static pid_t parent_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    pid_t ppid = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "PPid: %d", &ppid) == 1)
            break;
    fclose(f);
    return ppid;
}

static void check_sandbox(struct eph_sandbox_config *cfg, unsigned long want_served)
{
    struct eph_sandbox *sb = NULL;
    assert_int_equal(eph_sandbox_namespaces_ops.create(cfg, &sb), 0);
    struct eph_guest_sandbox *g = (struct eph_guest_sandbox *)sb;
    assert_int_equal(parent_of(g->pid), getpid()); /* the launcher's sibling: our child */
    pid_t lp;
    unsigned long served;
    eph_sandbox_launcher_info(&lp, &served);
    assert_int_equal(served, want_served);
    struct eph_exec_request req = {
        .command = "echo hi", .timeout_ms = 30000, .stdout_cap = 64, .stderr_cap = 64};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    assert_int_equal(eph_sandbox_exec(sb, &req, &res), 0);
    assert_int_equal(res.exit_code, 0);
    assert_int_equal(res.out.len, 3);
    assert_memory_equal(res.out.data, "hi\n", 3);
    eph_exec_result_release(&res);
    pid_t init = g->pid;
    assert_int_equal(eph_sandbox_destroy(sb), 0);
    errno = 0;
    assert_int_equal(kill(init, 0), -1); /* reaped by us, not left as a zombie */
    assert_int_equal(errno, ESRCH);
}

static void test_launcher(void **state)
{
    (void)state;
    struct eph_sandbox_config cfg;
    char init[4096], image[4096];
    if (!ns_usable(&cfg, init, sizeof(init), image, sizeof(image)))
        skip();
    pid_t lp;
    unsigned long served;
    eph_sandbox_launcher_info(&lp, &served);
    assert_int_equal(lp, 0);
    assert_int_equal(eph_sandbox_launcher_start(), 0);
    assert_int_equal(eph_sandbox_launcher_start(), -EALREADY);
    eph_sandbox_launcher_info(&lp, &served);
    assert_true(lp > 0);
    assert_int_equal(parent_of(lp), getpid());
    assert_int_equal(served, 0);

    check_sandbox(&cfg, 1);
    check_sandbox(&cfg, 2);

    /* Killed while idle: the next create finds it gone, reaps it and clones here. Its end is
     * waited for without reaping it (WNOWAIT), which is the server's to do. */
    assert_int_equal(kill(lp, SIGKILL), 0);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)lp, &si, WEXITED | WNOWAIT), 0);
    check_sandbox(&cfg, 2);
    errno = 0;
    assert_int_equal(kill(lp, 0), -1);
    assert_int_equal(errno, ESRCH);
    pid_t now;
    eph_sandbox_launcher_info(&now, &served);
    assert_int_equal(now, 0);

    /* Started again, then stopped: stop reaps it, and creates clone here again. */
    assert_int_equal(eph_sandbox_launcher_start(), 0);
    eph_sandbox_launcher_info(&lp, &served);
    assert_int_equal(served, 0);
    check_sandbox(&cfg, 1);
    eph_sandbox_launcher_stop();
    errno = 0;
    assert_int_equal(kill(lp, 0), -1);
    assert_int_equal(errno, ESRCH);
    check_sandbox(&cfg, 1);
    eph_sandbox_launcher_stop(); /* twice: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_end_of_file),
        cmocka_unit_test(test_launcher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
