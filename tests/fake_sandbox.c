/*
 * fake_sandbox.c - the unit tests' sandbox backend. See fake_sandbox.h.
 */
#include "fake_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/backend.h"

struct fake_sandbox {
    struct eph_guest_sandbox g; /* first */
    bool made_dir;              /* g.run_dir exists on the host and is ours */
};

static int fake_probe(const struct eph_sandbox_config *cfg, char *why, size_t whylen)
{
    if (geteuid() != 0) {
        snprintf(why, whylen, "the fake sandbox needs root for its PID namespace");
        return -EPERM;
    }
    if (!cfg->init_path || access(cfg->init_path, X_OK) != 0) {
        snprintf(why, whylen, "no ephemeral-init at '%s'", cfg->init_path ? cfg->init_path : "");
        return -ENOENT;
    }
    return 0;
}

/* The run directory on the host: the layer named it /tmp/ephemeral-run-XXXXXX (random). */
static int dirs_make(struct fake_sandbox *sb)
{
    if (mkdir(sb->g.run_dir, 0700) != 0)
        return -errno;
    sb->made_dir = true;
    if (mkdir(sb->g.scratch, 0755) != 0 || mkdir(sb->g.home, 0700) != 0)
        return -errno;
    return 0;
}

static int fake_boot(struct eph_guest_sandbox *g, const struct eph_sandbox_config *cfg,
                     int *chan_fd)
{
    struct fake_sandbox *sb = (struct fake_sandbox *)g;
    int chan[2];
    if (!cfg->init_path)
        return -EINVAL;
    int rc = dirs_make(sb);
    if (rc)
        return rc;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0)
        return -errno;
    char *const argv[] = {"ephemeral-init", g->scratch, g->home, NULL};
    /* Fork semantics (no new stack): the child only rearranges descriptors and execs. */
    pid_t pid =
        (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNET | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid < 0) {
        rc = -errno;
        close(chan[0]);
        close(chan[1]);
        return rc;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (chan[1] == 3 ? fcntl(3, F_SETFD, 0) != 0 : dup2(chan[1], 3) != 3)
            _exit(127);
        execv(cfg->init_path, argv);
        _exit(127);
    }
    close(chan[1]);
    eph_guest_sandbox_watch(g, pid, eph_guest_pidfd_open(pid));
    *chan_fd = chan[0];
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

static int fake_release(struct eph_guest_sandbox *g)
{
    struct fake_sandbox *sb = (struct fake_sandbox *)g;
    int rc = eph_guest_sandbox_reap(g, 0, NULL);
    if (sb->made_dir && nftw(g->run_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && !rc)
        rc = -errno ? -errno : -EIO;
    return rc;
}

static int fake_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out)
{
    return eph_guest_sandbox_create(&eph_fake_sandbox_ops, cfg, NULL, out);
}

static const struct eph_sandbox_backend fake_backend = {
    .size = sizeof(struct fake_sandbox),
    .name_prefix = "fake",
    .boot = fake_boot,
    .release = fake_release,
};

const struct eph_sandbox_ops eph_fake_sandbox_ops = {
    .name = "fake",
    .ready_message = "fake sandbox ready",
    .destroyed_message = "fake sandbox destroyed",
    .probe = fake_probe,
    .create = fake_create,
    EPH_GUEST_SANDBOX_OPS(&fake_backend),
};

int eph_fake_sandbox_config(struct eph_sandbox_config *cfg, char *init_buf, size_t init_cap,
                            char *why, size_t whylen)
{
    const char *build = getenv("BUILD");
    memset(cfg, 0, sizeof(*cfg));
    snprintf(init_buf, init_cap, "%s/ephemeral-init", build ? build : "build");
    cfg->backend = "fake";
    cfg->init_path = init_buf;
    cfg->owner_tag = "test";
    eph_sandbox_limits_default(&cfg->limits);
    return fake_probe(cfg, why, whylen);
}
