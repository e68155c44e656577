/*
 * jail.c - the namespaces backend: the ops table and the one function that builds a sandbox.
 *
 * The parent (a thread of the server) prepares a plan, has the child cloned (by the launcher
 * where the process started one, launcher.c, else by itself), and then, in lockstep with it over a
 * SOCK_SEQPACKET socket:
 *
 *   parent                                   child (pid 1 of new pid/mnt/ipc/uts namespaces)
 *   ------                                   -----
 *   (v2: clone3 puts the child in its        fds: channel -> 3, init binary, sync; rest closed
 *    cgroup at birth)                        join the cgroup (v1: write "0" to each `tasks`)
 *                                            clear supplementary groups (still host root)
 *                                            mount: private, image, /tmp, /proc, /dev, ro, pivot
 *                                            hostname; pending-signal and mqueue rlimits
 *                                            become its host id (capabilities kept)
 *                                            new user + cgroup + network namespaces
 *   write setgroups=deny, uid_map, gid_map   send NEED_MAPS, wait GO_MAPS
 *   send GO_MAPS                             bring up lo
 *                                            rlimits; bounding set, ambient, securebits
 *                                            become worker (1000:1000); every cap set empty
 *                                            no_new_privs, setsid, parent-death signal
 *                                            seccomp (last: it also filters the steps above)
 *   see the sync socket close (exec done)    execveat(init) - closes the sync socket
 *   init's oom_score_adj: -1000 (if allowed)
 *   wait for the guest's hello
 *
 * A failing child step sends {step, errno} and exits; the parent logs the step's name and returns
 * the errno. Destroy: SIGKILL to the init through its pidfd (the kernel then kills the whole PID
 * namespace), reap it, kill and remove the cgroup. Every mount lives in the child's mount
 * namespace and every file in its tmpfs, so nothing else is left on the host.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "guest/seccomp.h"
#include "sandbox/backend.h"
#include "sandbox/hostid.h"
#include "sandbox/namespaces/namespaces.h"

#define COMPONENT "sandbox"
#define SETUP_TIMEOUT_MS 10000u
#define CHILD_CHAN_FD 3
#define CHILD_INIT_FD 4
#define CHILD_SYNC_FD 5
#define CHILD_CGROUP_FD 6 /* 6, 7, 8: what the child writes "0" into to join its cgroup */

struct ns_sandbox {
    struct eph_guest_sandbox g; /* first: the generic layer casts */
    struct eph_ns_plan plan;
    struct eph_ns_cgroup cgroup;
    struct eph_hostid_lease id; /* the host id worker maps to */
};

/* ---- the child -------------------------------------------------------------------------- */

struct child_step {
    const char *name;
    int (*run)(struct eph_ns_plan *p);
};

static int child_report(int step, int err)
{
    struct eph_ns_sync_msg m = {.kind = EPH_NS_SYNC_FAILED, .step = step, .err = err};
    ssize_t w;
    do
        w = send(CHILD_SYNC_FD, &m, sizeof(m), MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w == (ssize_t)sizeof(m) ? 0 : -EPIPE;
}

static int child_wait_byte(char want)
{
    char c;
    ssize_t r;
    do
        r = recv(CHILD_SYNC_FD, &c, 1, 0);
    while (r < 0 && errno == EINTR);
    if (r != 1)
        return -ESRCH; /* the parent is gone */
    return c == want ? 0 : -EPROTO;
}

/* Moves the three descriptors the child keeps to fixed numbers and closes everything else: the
 * copy of the server's descriptor table holds other sandboxes' channels, listening sockets, the
 * database. stdio becomes /dev/null (the init never writes to the server's terminal). */
static int step_fds(struct eph_ns_plan *p)
{
    int chan = fcntl(p->chan_fd, F_DUPFD_CLOEXEC, 10);
    int init = fcntl(p->init_fd, F_DUPFD_CLOEXEC, 10);
    int sync = fcntl(p->sync_fd, F_DUPFD_CLOEXEC, 10);
    if (chan < 0 || init < 0 || sync < 0)
        return -errno;
    int cg[3];
    for (int i = 0; i < p->cg_join_n; i++)
        if ((cg[i] = fcntl(p->cg_join_fd[i], F_DUPFD_CLOEXEC, 10)) < 0)
            return -errno;
    if (dup2(chan, CHILD_CHAN_FD) < 0 || dup3(init, CHILD_INIT_FD, O_CLOEXEC) < 0 ||
        dup3(sync, CHILD_SYNC_FD, O_CLOEXEC) < 0)
        return -errno;
    for (int i = 0; i < p->cg_join_n; i++) {
        if (dup3(cg[i], CHILD_CGROUP_FD + i, O_CLOEXEC) < 0)
            return -errno;
        p->cg_join_fd[i] = CHILD_CGROUP_FD + i;
    }
    int null = open("/dev/null", O_RDWR);
    if (null < 0)
        return -errno;
    for (int fd = 0; fd < 3; fd++)
        if (null != fd && dup2(null, fd) < 0)
            return -errno;
    if (close_range(CHILD_CGROUP_FD + (unsigned)p->cg_join_n, ~0u, 0) != 0)
        return -errno;
    p->chan_fd = CHILD_CHAN_FD;
    p->init_fd = CHILD_INIT_FD;
    p->sync_fd = CHILD_SYNC_FD;
    return 0;
}

/* Before anything else the child creates (and long before anything untrusted runs). */
static int step_cgroup(struct eph_ns_plan *p)
{
    int rc = eph_ns_cgroup_join(p->cg_join_fd, p->cg_join_n);
    p->cg_join_n = 0;
    return rc;
}

static int step_groups(struct eph_ns_plan *p)
{
    return eph_ns_user_clear_groups();
}

static int step_mount(struct eph_ns_plan *p)
{
    umask(022);
    return eph_ns_mount_setup(p);
}

static int step_net(struct eph_ns_plan *p)
{
    return eph_ns_net_setup();
}

static int step_uts(struct eph_ns_plan *p)
{
    return eph_ns_uts_setup();
}

static int step_early_rlimits(struct eph_ns_plan *p)
{
    return eph_ns_rlimits_apply_early();
}

static int step_host_id(struct eph_ns_plan *p)
{
    return eph_ns_user_become_host_id(p->host_id);
}

static int step_userns(struct eph_ns_plan *p)
{
    int rc = eph_ns_user_unshare();
    if (rc)
        return rc;
    struct eph_ns_sync_msg m = {.kind = EPH_NS_SYNC_NEED_MAPS};
    if (send(CHILD_SYNC_FD, &m, sizeof(m), MSG_NOSIGNAL) != (ssize_t)sizeof(m))
        return -EPIPE;
    return child_wait_byte(EPH_NS_SYNC_GO_MAPS);
}

static int step_rlimits(struct eph_ns_plan *p)
{
    return eph_ns_rlimits_apply(p);
}

static int step_bounding(struct eph_ns_plan *p)
{
    return eph_ns_caps_drop_bounding();
}

static int step_worker(struct eph_ns_plan *p)
{
    return eph_ns_user_become_worker();
}

static int step_caps(struct eph_ns_plan *p)
{
    return eph_ns_caps_drop_all();
}

static int step_lock(struct eph_ns_plan *p)
{
    return eph_ns_caps_lock(CHILD_SYNC_FD);
}

static int step_seccomp(struct eph_ns_plan *p)
{
    return eph_guest_seccomp_load();
}

static int step_exec(struct eph_ns_plan *p)
{
    char *const argv[] = {"ephemeral-init", p->scratch, p->home, NULL};
    char *const envp[] = {NULL};
    syscall(SYS_execveat, CHILD_INIT_FD, "", argv, envp, AT_EMPTY_PATH);
    return -errno;
}

/* The order matters; docs/SANDBOX.md explains each constraint. */
static const struct child_step child_steps[] = {
    {"descriptors", step_fds},
    {"join the cgroup", step_cgroup},
    {"supplementary groups", step_groups},
    {"mounts and pivot_root", step_mount},
    {"hostname", step_uts},
    {"pending-signal and message-queue rlimits", step_early_rlimits},
    {"become the sandbox's host id", step_host_id},
    {"user, cgroup and network namespaces", step_userns},
    {"loopback", step_net},
    {"rlimits", step_rlimits},
    {"bounding set", step_bounding},
    {"become worker", step_worker},
    {"drop capabilities", step_caps},
    {"no_new_privs, setsid, parent-death signal", step_lock},
    {"seccomp", step_seccomp},
    {"exec ephemeral-init", step_exec},
};

#define NSTEPS ((int)(sizeof(child_steps) / sizeof(child_steps[0])))

static int child_main(void *arg)
{
    struct eph_ns_plan *p = arg;
    for (int i = 0; i < NSTEPS; i++) {
        int rc = child_steps[i].run(p);
        if (rc) {
            /* Before the descriptors step the sync socket is not at its number yet. */
            if (i == 0)
                (void)send(p->sync_fd, &(struct eph_ns_sync_msg){EPH_NS_SYNC_FAILED, i, rc},
                           sizeof(struct eph_ns_sync_msg), MSG_NOSIGNAL);
            else
                child_report(i, rc);
            _exit(127);
        }
    }
    _exit(127); /* not reached: the last step execs */
}

int eph_ns_jail_clone(struct eph_ns_plan *p, int cgroup_dir, const int *join_fd, int join_n,
                      bool sibling, pid_t *pid, int *pidfd)
{
    /* v2: born in the cgroup. Otherwise (v1, or no clone3) the child's first step joins it. */
    p->cg_join_n = 0;
    int rc = eph_ns_pid_clone_into_cgroup(child_main, p, cgroup_dir, sibling, pid, pidfd);
    if (rc == 1) {
        if (join_n < 0 || join_n > 3)
            return -EINVAL;
        p->cg_join_n = join_n;
        memcpy(p->cg_join_fd, join_fd, (size_t)join_n * sizeof(int));
        rc = eph_ns_pid_clone(child_main, p, sibling, pid, pidfd);
    }
    p->cg_join_n = 0;
    return rc;
}

/* ---- the parent ------------------------------------------------------------------------- */

/* Receives one message from the child by the deadline; 1 when the child closed the socket (its
 * exec succeeded, or it died). */
static int parent_recv(int fd, struct eph_ns_sync_msg *m, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = eph_clock_mono_ns();
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)((deadline_ns - now) / 1000000u) + 1);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n <= 0)
            continue;
        ssize_t r = recv(fd, m, sizeof(*m), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return 1;
        if (r != (ssize_t)sizeof(*m))
            return -EPROTO;
        return 0;
    }
}

static int parent_send_byte(int fd, char c)
{
    ssize_t w;
    do
        w = send(fd, &c, 1, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w == 1 ? 0 : -EPIPE;
}

static int child_failed(const struct eph_ns_sync_msg *m)
{
    int step = m->step;
    int err = m->err < 0 && m->err > -4096 ? m->err : -EIO;
    EPH_ERROR(COMPONENT, "sandbox setup failed at step '%s': %s",
              step >= 0 && step < NSTEPS ? child_steps[step].name : "?", strerror(-err));
    return err;
}

/* The OOM killer must not pick the init: it would take every command and the guest channel with
 * it. The init sets every command it starts to 1000, the first to be killed (guest/init.c); here
 * host root sets the init itself to -1000, never killed, which is also the floor below which
 * nothing inside may go (the init is not dumpable, so its /proc files are root's and the worker
 * cannot raise it). Without CAP_SYS_RESOURCE (some containers) the init keeps the server's value:
 * still below every command's, but a command may lower its own back to it (docs/SECURITY.md). */
static int protect_init(pid_t pid)
{
    static atomic_bool said;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", (int)pid);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t w = write(fd, "-1000", 5);
    int rc = w == 5 ? 0 : (w < 0 ? -errno : -EIO);
    close(fd);
    if (rc == -EACCES || rc == -EPERM) {
        if (!atomic_exchange(&said, true))
            EPH_DEBUG(COMPONENT, "no CAP_SYS_RESOURCE: sandbox inits keep the server's "
                                 "oom_score_adj (their commands run at 1000)");
        return 0;
    }
    if (rc)
        EPH_ERROR(COMPONENT, "cannot protect the sandbox's init from the OOM killer: %s",
                  strerror(-rc));
    return rc;
}

/* The parent's side of the lockstep; the child is running. */
static int parent_steps(struct ns_sandbox *sb, int sync_fd)
{
    uint64_t deadline = eph_clock_mono_ns() + (uint64_t)SETUP_TIMEOUT_MS * 1000000u;
    struct eph_ns_sync_msg m;
    int rc = parent_recv(sync_fd, &m, deadline);
    if (rc == 0 && m.kind == EPH_NS_SYNC_FAILED)
        return child_failed(&m);
    if (rc != 0 || m.kind != EPH_NS_SYNC_NEED_MAPS) {
        EPH_ERROR(COMPONENT, "sandbox setup: the child stopped before its user namespace");
        return rc < 0 ? rc : -EPROTO;
    }
    rc = eph_ns_user_write_maps(sb->g.pid, sb->plan.host_id);
    if (rc) {
        EPH_ERROR(COMPONENT, "cannot write the sandbox's uid/gid maps: %s", strerror(-rc));
        return rc;
    }
    rc = parent_send_byte(sync_fd, EPH_NS_SYNC_GO_MAPS);
    if (rc)
        return rc;
    rc = parent_recv(sync_fd, &m, deadline);
    if (rc == 0 && m.kind == EPH_NS_SYNC_FAILED)
        return child_failed(&m);
    if (rc != 1) {
        EPH_ERROR(COMPONENT, "sandbox setup: no exec from the child");
        return rc < 0 ? rc : -EPROTO;
    }
    return protect_init(sb->g.pid);
}

static int plan_prepare(struct ns_sandbox *sb, const struct eph_sandbox_config *cfg)
{
    struct eph_ns_plan *p = &sb->plan;
    const struct eph_sandbox_limits *l = &sb->g.limits;
    if (!cfg->image || !realpath(cfg->image, p->root)) {
        EPH_ERROR(COMPONENT, "sandbox image '%s' not found", cfg->image ? cfg->image : "");
        return -ENOENT;
    }
    static const char *const needed[] = {"proc", "dev", "tmp", "bin/sh"};
    for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
        char path[PATH_MAX + 16];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", p->root, needed[i]);
        if (stat(path, &st) != 0) {
            EPH_ERROR(COMPONENT, "sandbox image '%s' has no /%s", p->root, needed[i]);
            return -ENOENT;
        }
    }
    /* The run directory as seen inside, relative to the new root. */
    snprintf(p->run_rel, sizeof(p->run_rel), "%s", sb->g.run_dir + 1);
    snprintf(p->scratch_rel, sizeof(p->scratch_rel), "%s/scratch", p->run_rel);
    snprintf(p->home_rel, sizeof(p->home_rel), "%s/home", p->run_rel);
    snprintf(p->scratch, sizeof(p->scratch), "/%s", p->scratch_rel);
    snprintf(p->home, sizeof(p->home), "/%s", p->home_rel);
    /* Inodes scale with the size (a million empty files would otherwise eat kernel memory). */
    snprintf(p->tmp_opts, sizeof(p->tmp_opts), "size=%um,nr_inodes=%u,mode=1777", l->disk_mib,
             l->disk_mib * 64u < 4096u ? 4096u : l->disk_mib * 64u);
    snprintf(p->meminfo_rel, sizeof(p->meminfo_rel), "%s/meminfo", p->run_rel);
    p->meminfo_len = eph_ns_mount_meminfo(p->meminfo, sizeof(p->meminfo), l->memory_mib);
    p->nofile = l->nofile;
    p->fsize = l->fsize_bytes;
    /* A backstop behind pids.max, a little above it so that the cgroup is what normally says no. */
    p->nproc = (uint64_t)l->pids + 16u;
    p->host_id = (uid_t)sb->id.id;
    return 0;
}

static int ns_boot(struct eph_guest_sandbox *g, const struct eph_sandbox_config *cfg, int *chan_fd)
{
    struct ns_sandbox *sb = (struct ns_sandbox *)g;
    int chan[2] = {-1, -1}, sync[2] = {-1, -1};
    int join_fd[3], join_n = 0, cgroup_dir = -1;
    pid_t pid = 0;
    int pidfd = -1;
    sb->plan.init_fd = -1;
    sb->id.fd = -1;
    int rc;
    eph_ns_mount_prepare();

    rc = eph_hostid_acquire(EPH_NS_HOST_ID_BASE, EPH_NS_HOST_IDS, &sb->id);
    if (rc) {
        if (rc == -EAGAIN)
            EPH_ERROR(COMPONENT, "too many sandboxes on this host (%u)", EPH_NS_HOST_IDS);
        else
            EPH_ERROR(COMPONENT, "cannot lease a host id for the sandbox: %s", strerror(-rc));
        goto fail;
    }
    rc = plan_prepare(sb, cfg);
    if (rc)
        goto fail;
    sb->plan.init_fd = open(cfg->init_path ? cfg->init_path : "", O_RDONLY | O_CLOEXEC);
    if (sb->plan.init_fd < 0) {
        rc = -errno;
        EPH_ERROR(COMPONENT, "cannot open ephemeral-init '%s': %s",
                  cfg->init_path ? cfg->init_path : "", strerror(errno));
        goto fail;
    }
    rc = eph_ns_cgroup_create(&sb->cgroup, g->name, &g->limits);
    if (rc)
        goto fail;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0 ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync) != 0) {
        rc = -errno;
        goto fail;
    }
    rc = eph_ns_cgroup_open_join(&sb->cgroup, join_fd, &join_n);
    if (rc) {
        EPH_ERROR(COMPONENT, "cannot open the sandbox's cgroup: %s", strerror(-rc));
        goto fail;
    }
    cgroup_dir = eph_ns_cgroup_dir_fd(&sb->cgroup);
    sb->plan.chan_fd = chan[1];
    sb->plan.sync_fd = sync[1];
    /* The launcher clones it when there is one (the server's), else this process does. */
    rc = eph_ns_launcher_clone(&sb->plan, cgroup_dir, join_fd, join_n, &pid, &pidfd);
    if (rc == 1)
        rc = eph_ns_jail_clone(&sb->plan, cgroup_dir, join_fd, join_n, false, &pid, &pidfd);
    if (!rc)
        eph_guest_sandbox_watch(g, pid, pidfd);
    close(chan[1]);
    close(sync[1]);
    chan[1] = sync[1] = -1;
    close(sb->plan.init_fd);
    sb->plan.init_fd = -1;
    for (int i = 0; i < join_n; i++)
        close(join_fd[i]);
    join_n = 0;
    if (cgroup_dir >= 0)
        close(cgroup_dir);
    cgroup_dir = -1;
    if (rc) {
        EPH_ERROR(COMPONENT, "cannot clone the sandbox: %s", strerror(-rc));
        goto fail;
    }
    rc = parent_steps(sb, sync[0]);
    close(sync[0]);
    sync[0] = -1;
    if (rc)
        goto fail;
    *chan_fd = chan[0];
    return 0;

fail:
    for (int i = 0; i < 2; i++) {
        if (chan[i] >= 0)
            close(chan[i]);
        if (sync[i] >= 0)
            close(sync[i]);
    }
    for (int i = 0; i < join_n; i++)
        close(join_fd[i]);
    if (cgroup_dir >= 0)
        close(cgroup_dir);
    return rc;
}

/* The init's death ends the PID namespace: it is killed and reaped at once, then the cgroup
 * (which kills anything left in it) is removed. */
static int ns_release(struct eph_guest_sandbox *g)
{
    struct ns_sandbox *sb = (struct ns_sandbox *)g;
    int rc = eph_guest_sandbox_reap(g, 0, NULL);
    if (sb->cgroup.n) {
        int c = eph_ns_cgroup_destroy(&sb->cgroup);
        if (c && !rc)
            rc = c;
    }
    if (sb->plan.init_fd >= 0)
        close(sb->plan.init_fd);
    eph_hostid_release(&sb->id);
    return rc;
}

static int ns_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out)
{
    return eph_guest_sandbox_create(&eph_sandbox_namespaces_ops, cfg, NULL, out);
}

static int ns_probe(const struct eph_sandbox_config *cfg, char *why, size_t whylen)
{
    int rc = eph_ns_cgroup_probe(why, whylen);
    if (rc)
        return rc;
    if (geteuid() != 0) {
        /* The jail maps a dedicated host id and builds mounts as host root before entering its
         * user namespace: it needs root (or CAP_SYS_ADMIN and CAP_SETUID) on the host. */
        snprintf(why, whylen, "the namespaces backend needs to run as root");
        return -EPERM;
    }
    if (cfg->init_path && access(cfg->init_path, R_OK) != 0) {
        snprintf(why, whylen, "ephemeral-init '%s' is not readable: %s", cfg->init_path,
                 strerror(errno));
        return -ENOENT;
    }
    return 0;
}

/* Every process of the sandbox, its init included, is in its cgroup and cannot leave it. */
static int ns_pause(struct eph_guest_sandbox *g, bool paused)
{
    struct ns_sandbox *sb = (struct ns_sandbox *)g;
    return eph_ns_cgroup_signal_all(&sb->cgroup, paused ? SIGSTOP : SIGCONT);
}

static const struct eph_sandbox_backend ns_backend = {
    .size = sizeof(struct ns_sandbox),
    .name_prefix = "",
    .boot = ns_boot,
    .release = ns_release,
    .pause = ns_pause,
};

const struct eph_sandbox_ops eph_sandbox_namespaces_ops = {
    .name = "namespaces",
    .ready_message = "namespace sandbox ready",
    .destroyed_message = "namespace sandbox destroyed",
    .probe = ns_probe,
    .create = ns_create,
    .cleanup_orphans = eph_ns_cgroup_cleanup_orphans,
    EPH_GUEST_SANDBOX_OPS(&ns_backend),
};
