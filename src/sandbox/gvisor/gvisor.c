/*
 * gvisor.c - the gvisor backend: the image as an OCI bundle run by runsc. See gvisor.h.
 *
 * create:
 *
 *   1. the shared guest files (host.h), made once per build of the init and the library and
 *      reused by every sandbox: guest/ (copies of ephemeral-init and ephemeral-gvisor-compat.so,
 *      mounted read-only at /.ephemeral: a copy, so that no other host file is visible) and
 *      ld.so.preload (one line naming the compat library, mounted over /etc/ld.so.preload); then
 *      the sandbox's own bundle, /run/ephemeral/gvisor/<tag>-<server pid>-gv<n>/ (0700):
 *        config.json      the OCI spec (eph_gvisor_spec_json), naming the shared files
 *        state/           runsc's --root: this sandbox's runsc state, and nothing else
 *        runsc.log, runsc.err   runsc's own log and stderr (read when the boot fails)
 *   2. a socketpair: one end is the server's channel, the other becomes the container's stdin
 *      and stdout (runsc run without a terminal hands its stdio to the container as they are);
 *   3. `runsc --root=state --network=none run --bundle DIR ID` spawned with a minimal environment
 *      (never the server's: it holds API keys), its own session, default signals, no other fd;
 *   4. inside, `ephemeral-init --keeper --make-dirs` is the first program (root, with the four
 *      capabilities of eph_gvisor_spec_json): it makes /tmp/ephemeral-run-XXXXXX/{scratch,home}
 *      in the tmpfs, worker's, moves the channel to fd 3 as the namespaces jail gives it, drops
 *      every capability and runs the commands as worker (src/guest/harden.h);
 *   5. the guest's hello.
 *
 * destroy closes the channel: init kills everything and exits, the container ends, and `runsc
 * run` deletes it (its state and cgroup) and exits. If it does not within a few seconds it is
 * killed, and whatever runsc state is left goes through `runsc kill ID KILL` and `runsc delete
 * --force ID`; then any cgroup directory named after the sandbox, and the bundle, are removed.
 * interrupt (from any thread) shuts the channel down and SIGKILLs `runsc run`, which takes the
 * attached sandbox with it: a blocked exec returns at once.
 *
 * Why the compat library: the Sentry of Debian 12's runsc (0.0~20221219) refuses statx and
 * fstatat with AT_NO_AUTOMOUNT, which coreutils 9 always passes, so `ls -l` fails with "Invalid
 * argument". The library (src/guest/gvisor/statx_compat.c) drops that no-op flag; the probe
 * runs `ls -ld` in a fresh sandbox, so a host where this chain does not work never picks gvisor.
 */
#include "sandbox/gvisor/gvisor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/text.h"
#include "sandbox/backend.h"
#include "sandbox/gvisor/host.h"
#include "sandbox/program.h"

#define COMPONENT "sandbox"
#define RUN_ROOT EPH_GVISOR_RUN_ROOT
#define RUN_DIR EPH_GVISOR_RUN_DIR
#define GUEST_MOUNT EPH_GVISOR_GUEST_MOUNT
#define COMPAT_NAME EPH_GVISOR_COMPAT_NAME
#define CGROUP_PARENT "ephemeral"
#define SETUP_TIMEOUT_MS 30000u
/* After the channel closes, how long `runsc run` gets to delete the container and exit (it
 * takes tens of milliseconds). */
#define EXIT_WAIT_MS 2000u
#define RUNSC_CMD_TIMEOUT_MS 15000u
#define PROBE_TIMEOUT_MS 20000u
#define SPAWN_PATH EPH_SANDBOX_SPAWN_PATH

/* g.name is the container id; the watched process is `runsc run`, to which the sandbox is
 * attached (it dies with it). */
struct gv_sandbox {
    struct eph_guest_sandbox g; /* first: the generic layer casts */
    char dir[PATH_MAX];         /* the bundle; removed by release once this sandbox has made it */
    char shared[PATH_MAX];      /* the shared guest files it mounts (host.h): never removed here */
    bool own_dir;
};

/* ---- small host helpers ------------------------------------------------------------------ */

/* Starts argv[0] with in/out/err as its stdio and nothing else open, in its own session, with
 * every signal at its default and unblocked (the server blocks and ignores some; children inherit
 * that), and only PATH in its environment. */
static int spawn(const char *const argv[], int in_fd, int out_fd, int err_fd, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    char *const envp[] = {(char *)SPAWN_PATH, NULL};
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc)
        return -rc;
    rc = posix_spawnattr_init(&attr);
    if (rc) {
        posix_spawn_file_actions_destroy(&fa);
        return -rc;
    }
    sigemptyset(&none);
    sigfillset(&all);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    /* Whatever the server has open that is not close-on-exec stays out of runsc (and of the
     * sandbox and gofer processes it starts). */
    if (!rc)
        rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (!rc)
        rc = posix_spawnattr_setsigmask(&attr, &none);
    if (!rc)
        rc = posix_spawnattr_setsigdefault(&attr, &all);
    if (!rc)
        rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                 POSIX_SPAWN_SETSID);
    if (!rc)
        rc = posix_spawn(pid, argv[0], &fa, &attr, (char *const *)argv, envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return -rc;
}

/* Like spawn(), for `runsc run` itself, which must also die with the server: a parent-death
 * signal (SIGKILL) takes it, and with it the sandbox attached to it, when the thread that
 * created the sandbox (which drives and destroys it, sandbox.h) is gone. posix_spawn cannot set
 * one, so this forks; the child calls only async-signal-safe functions before execve. */
static int spawn_attached(const char *const argv[], int in_fd, int out_fd, int err_fd, pid_t *pid)
{
    char *const envp[] = {(char *)SPAWN_PATH, NULL};
    pid_t parent = getpid();
    pid_t p = fork();
    if (p < 0)
        return -errno;
    if (p == 0) {
        struct sigaction dfl;
        sigset_t none;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; sig++)
            (void)sigaction(sig, &dfl, NULL);
        sigemptyset(&none);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        if (setsid() < 0)
            _exit(127);
        /* Out of the way of 0-2 first, in case one of them is already 0, 1 or 2. */
        int in = fcntl(in_fd, F_DUPFD_CLOEXEC, 10);
        int out = fcntl(out_fd, F_DUPFD_CLOEXEC, 10);
        int err = fcntl(err_fd, F_DUPFD_CLOEXEC, 10);
        if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
            _exit(127);
        if (close_range(3, ~0u, 0) != 0)
            _exit(127);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        execve(argv[0], (char *const *)argv, envp);
        _exit(127);
    }
    *pid = p;
    return 0;
}

static int open_null(int flags)
{
    int fd = open("/dev/null", flags | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* ---- cgroups ------------------------------------------------------------------------------- */

/* Removes one sandbox cgroup directory: what is still in it is the sandbox's own host processes
 * (Sentry, gofer, ptrace stubs), which are killed. Bounded to about two seconds. */
static int cgroup_dir_remove(const char *dir)
{
    struct timespec pause = {0, 2 * 1000 * 1000};
    for (int tries = 0; tries < 1000; tries++) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            return -errno;
        char path[PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        FILE *f = fopen(path, "re");
        if (f) {
            int pid;
            while (fscanf(f, "%d", &pid) == 1)
                if (pid > 1)
                    kill(pid, SIGKILL);
            fclose(f);
        }
        nanosleep(&pause, NULL);
    }
    return -EBUSY;
}

/* runsc creates the sandbox's cgroup as /ephemeral/<id> in every hierarchy it finds (on cgroup v1
 * that is memory, pids and cpu, and also blkio, cpuset, devices, freezer...): each is removed. */
struct cg_remove {
    const char *id;
    int err;
    int removed;
};

static void cgroup_remove_in(const char *mnt, int version, void *arg)
{
    (void)version; /* runsc made the same path in every hierarchy */
    struct cg_remove *r = arg;
    char dir[PATH_MAX + 128];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s/" CGROUP_PARENT "/%s", mnt, r->id);
    if (stat(dir, &st) != 0)
        return;
    int rc = cgroup_dir_remove(dir);
    if (rc) {
        EPH_WARN(COMPONENT, "cannot remove cgroup '%s': %s", dir, strerror(-rc));
        if (!r->err)
            r->err = rc;
    } else {
        r->removed++;
    }
}

static int cgroup_remove(const char *id, int *removed)
{
    struct cg_remove r = {.id = id};
    eph_guest_cgroup_mounts(cgroup_remove_in, &r);
    if (removed)
        *removed = r.removed;
    return r.err;
}

/* ---- runsc ------------------------------------------------------------------------------- */

static pthread_once_t runsc_once = PTHREAD_ONCE_INIT;
static char runsc_path[PATH_MAX];

static void runsc_find(void)
{
    eph_sandbox_find_program("EPHEMERAL_RUNSC", "runsc", runsc_path, sizeof(runsc_path));
}

/* EPHEMERAL_RUNSC_DEBUG_DIR when set to an absolute path, else NULL; said loudly once. */
static const char *debug_log_dir(void)
{
    static atomic_bool warned;
    const char *dir = getenv("EPHEMERAL_RUNSC_DEBUG_DIR");
    if (!dir || dir[0] != '/')
        return NULL;
    if (!atomic_exchange(&warned, true))
        EPH_WARN(COMPONENT,
                 "EPHEMERAL_RUNSC_DEBUG_DIR is set: runsc writes every command the sandboxes run "
                 "and its output to %s; zero-data-retention runs are refused",
                 dir);
    return dir;
}

static bool gv_records_commands(void)
{
    return debug_log_dir() != NULL;
}

static const char *runsc(void)
{
    pthread_once(&runsc_once, runsc_find);
    return runsc_path[0] ? runsc_path : NULL;
}

/* Runs `runsc --root=ROOT ARGS...` to completion (bounded), output discarded. 0 and *status, or a
 * negative errno. */
static int runsc_cmd(const char *root, const char *const *args, int *status)
{
    const char *argv[16];
    char root_opt[PATH_MAX + 16];
    size_t n = 0;
    if (!runsc())
        return -ENOENT;
    snprintf(root_opt, sizeof(root_opt), "--root=%s", root);
    argv[n++] = runsc();
    argv[n++] = root_opt;
    for (size_t i = 0; args[i] && n < sizeof(argv) / sizeof(argv[0]) - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int null = open_null(O_RDWR);
    if (null < 0)
        return null;
    pid_t pid;
    int rc = spawn(argv, null, null, null, &pid);
    close(null);
    if (rc)
        return rc;
    int pidfd = eph_guest_pidfd_open(pid);
    rc = eph_guest_child_wait(pid, pidfd, RUNSC_CMD_TIMEOUT_MS, status);
    if (rc == -ETIMEDOUT) {
        EPH_WARN(COMPONENT, "'runsc %s' did not finish in %u ms; killed", args[0],
                 RUNSC_CMD_TIMEOUT_MS);
        kill(pid, SIGKILL);
        (void)eph_guest_child_wait(pid, pidfd, RUNSC_CMD_TIMEOUT_MS, NULL);
    }
    if (pidfd >= 0)
        close(pidfd);
    return rc;
}

/* True when runsc has state for a container under root (any file but the lock files it leaves). */
static bool state_left(const char *root)
{
    DIR *d = opendir(root);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || (n > 5 && strcmp(e->d_name + n - 5, ".lock") == 0))
            continue;
        found = true;
    }
    closedir(d);
    return found;
}

/* `runsc kill ID KILL` then `runsc delete --force ID` against the sandbox's own state. */
static void runsc_kill_delete(const char *dir, const char *id)
{
    char root[PATH_MAX + 16];
    snprintf(root, sizeof(root), "%s/state", dir);
    const char *kill_args[] = {"kill", id, "KILL", NULL};
    const char *del_args[] = {"delete", "--force", id, NULL};
    int status = 0;
    (void)runsc_cmd(root, kill_args, &status); /* fails when it is already stopped: fine */
    int rc = runsc_cmd(root, del_args, &status);
    if (rc || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        EPH_DEBUG(COMPONENT, "runsc delete --force %s: %s, status %d", id,
                  rc ? strerror(-rc) : "ran", status);
}

/* The last line runsc wrote on its stderr, cleaned for a log line. */
static void runsc_last_error(const char *dir, char *out, size_t cap)
{
    char path[PATH_MAX + 16], buf[1024];
    out[0] = '\0';
    snprintf(path, sizeof(path), "%s/runsc.err", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
    close(fd);
    if (n <= 0)
        return;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    size_t j = 0;
    for (size_t i = 0; line[i] && j + 1 < cap; i++)
        out[j++] = (line[i] >= 0x20 && line[i] < 0x7f) ? line[i] : '?';
    out[j] = '\0';
}

/* ---- the spec ------------------------------------------------------------------------------ */

static json_t *str_array(const char *const *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && v[i]; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *mount_new(const char *dst, const char *type, const char *src,
                         const char *const *opts)
{
    return json_pack("{s:s, s:s, s:s, s:o}", "destination", dst, "type", type, "source", src,
                     "options", str_array(opts));
}

static json_t *rlimit_new(const char *type, uint64_t v)
{
    return json_pack("{s:s, s:I, s:I}", "type", type, "hard", (json_int_t)v, "soft", (json_int_t)v);
}

int eph_gvisor_spec_json(const struct eph_gvisor_plan *p, char **out)
{
    const struct eph_sandbox_limits *l = &p->limits;
    char tmp_size[32];
    *out = NULL;
    /* The init is the container's first and only program: as root (with CAP_CHOWN) it makes its
     * run directory and the two directories of the commands, worker's, moves the channel from
     * stdin to fd 3 (--make-dirs), then stays PID 1 and makes itself the keeper: no capability
     * left, effective uid 1000, real and saved uid 0, so that no command can signal or re-limit
     * it (src/guest/harden.h). Nothing of the image runs before that. */
    if (strlen(p->run_dir) + strlen(p->scratch) + strlen(p->home) > 512)
        return -ENAMETOOLONG;
    snprintf(tmp_size, sizeof(tmp_size), "size=%um", l->disk_mib);

    /* What the init needs as root, and only until it drops them all:
     * chown (the directories), setgid and setuid (the keeper's ids), setpcap (the bounding set). */
    static const char *const keeper_caps[] = {"CAP_CHOWN", "CAP_SETGID", "CAP_SETUID",
                                              "CAP_SETPCAP", NULL};
    static const char *const no_caps[] = {NULL};
    const char *const args[] = {GUEST_MOUNT "/init", "--keeper", "--make-dirs", p->run_dir,
                                p->scratch,          p->home,    NULL};
    const char *const env[] = {SPAWN_PATH, NULL};
    const char *const tmp_opts[] = {"nosuid", "nodev", "mode=1777", tmp_size, NULL};
    const char *const ro_opts[] = {"bind", "ro", "nosuid", "nodev", NULL};
    const char *const ro_noexec[] = {"bind", "ro", "nosuid", "nodev", "noexec", NULL};
    uint64_t mem = ((uint64_t)l->memory_mib + EPH_GVISOR_SENTRY_MIB) << 20;
    uint64_t host_tasks =
        (uint64_t)l->pids * EPH_GVISOR_HOST_TASKS_PER_PROC + EPH_GVISOR_HOST_TASKS_BASE;
    uint64_t fsize = l->fsize_bytes ? l->fsize_bytes : (uint64_t)l->disk_mib << 20;

    json_t *caps = json_pack("{s:o, s:o, s:o, s:o, s:o}", "bounding", str_array(keeper_caps),
                             "effective", str_array(keeper_caps), "inheritable", str_array(no_caps),
                             "permitted", str_array(keeper_caps), "ambient", str_array(no_caps));
    json_t *rlimits = json_array();
    if (rlimits) {
        json_array_append_new(rlimits, rlimit_new("RLIMIT_NOFILE", l->nofile));
        /* The Sentry counts worker's tasks: this is the sandbox's process limit (the host
         * cgroup's pids.max below is a backstop in host tasks, a different unit). */
        json_array_append_new(rlimits, rlimit_new("RLIMIT_NPROC", l->pids));
        json_array_append_new(rlimits, rlimit_new("RLIMIT_FSIZE", fsize));
        json_array_append_new(rlimits, rlimit_new("RLIMIT_CORE", 0));
    }
    json_t *process = json_pack("{s:b, s:{s:i, s:i, s:[]}, s:o, s:o, s:s, s:o, s:b, s:o}",
                                "terminal", 0, "user", "uid", 0, "gid", 0, "additionalGids", "args",
                                str_array(args), "env", str_array(env), "cwd", "/", "capabilities",
                                caps, "noNewPrivileges", 1, "rlimits", rlimits);

    json_t *mounts = json_array();
    if (mounts) {
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:s}", "destination", "/proc", "type",
                                                "proc", "source", "proc"));
        json_array_append_new(mounts, mount_new("/tmp", "tmpfs", "tmpfs", tmp_opts));
        json_array_append_new(mounts, mount_new(GUEST_MOUNT, "bind", p->guest_dir, ro_opts));
        if (p->preload_file)
            json_array_append_new(
                mounts, mount_new("/etc/ld.so.preload", "bind", p->preload_file, ro_noexec));
    }
    /* Memory: the run's share plus the Sentry's own (both are charged to this cgroup), swap
     * equal to it (memsw: no swap at all). CPU: a CFS quota of vcpus whole CPUs. */
    json_t *resources =
        json_pack("{s:{s:I, s:I}, s:{s:I}, s:{s:I, s:I}}", "memory", "limit", (json_int_t)mem,
                  "swap", (json_int_t)mem, "pids", "limit", (json_int_t)host_tasks, "cpu", "quota",
                  (json_int_t)l->vcpus * 100000, "period", (json_int_t)100000);
    json_t *linux_ =
        json_pack("{s:[{s:s}, {s:s}, {s:s}, {s:s}, {s:s}], s:o, s:s}", "namespaces", "type", "pid",
                  "type", "network", "type", "ipc", "type", "uts", "type", "mount", "resources",
                  resources, "cgroupsPath", p->cgroup_path);
    json_t *spec = json_pack("{s:s, s:o, s:{s:s, s:b}, s:s, s:o, s:o}", "ociVersion", "1.0.2",
                             "process", process, "root", "path", p->root, "readonly", 1, "hostname",
                             "sandbox", "mounts", mounts, "linux", linux_);
    if (!spec)
        return -ENOMEM;
    *out = json_dumps(spec, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(spec);
    return *out ? 0 : -ENOMEM;
}

/* ---- the backend --------------------------------------------------------------------------- */

/* The compat library lives beside ephemeral-init ($EPHEMERAL_GVISOR_COMPAT overrides). */
static int compat_path(const char *init_path, char *out, size_t cap)
{
    const char *env = getenv("EPHEMERAL_GVISOR_COMPAT");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return 0;
    }
    const char *slash = strrchr(init_path, '/');
    size_t n = slash ? (size_t)(slash - init_path) + 1 : 0;
    if (n + sizeof(COMPAT_NAME) > cap)
        return -ENAMETOOLONG;
    memcpy(out, init_path, n);
    memcpy(out + n, COMPAT_NAME, sizeof(COMPAT_NAME));
    return 0;
}

/* The image must hold every mount point the spec uses: runsc's gofer would otherwise create a
 * missing one in the image directory on the host. */
static int image_check(const struct eph_sandbox_config *cfg, char *root, char *why, size_t whylen)
{
    static const char *const dirs[] = {"proc", "tmp", "dev", ".ephemeral"};
    static const char *const files[] = {"bin/sh", "etc/ld.so.preload"};
    if (!cfg->image || !realpath(cfg->image, root)) {
        snprintf(why, whylen, "sandbox image '%s' not found", cfg->image ? cfg->image : "");
        return -ENOENT;
    }
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) + sizeof(files) / sizeof(files[0]); i++) {
        bool dir = i < sizeof(dirs) / sizeof(dirs[0]);
        const char *name = dir ? dirs[i] : files[i - sizeof(dirs) / sizeof(dirs[0])];
        char path[PATH_MAX + 32];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", root, name);
        if (stat(path, &st) != 0 || (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
            snprintf(why, whylen, "sandbox image '%s' has no /%s (rebuild it: make image)", root,
                     name);
            return -ENOENT;
        }
    }
    return 0;
}

static int mkdir_ok(const char *path, mode_t mode)
{
    if (mkdir(path, mode) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* The sandbox's own bundle directory (its spec, runsc state and logs go there) and the shared
 * guest files it mounts (host.h), into sb->shared. */
static int bundle_prepare(struct gv_sandbox *sb, const struct eph_sandbox_config *cfg)
{
    char compat[PATH_MAX];
    const char *init = cfg->init_path ? cfg->init_path : "";
    int rc = compat_path(init, compat, sizeof(compat));
    if (rc)
        return rc;
    rc = eph_gvisor_shared_get(init, compat, sb->shared, sizeof(sb->shared));
    if (rc) {
        EPH_ERROR(COMPONENT, "cannot prepare the shared guest files of '%s' and '%s': %s", init,
                  compat, strerror(-rc));
        return rc;
    }
    if (mkdir_ok(RUN_ROOT, 0755) || mkdir_ok(RUN_DIR, 0700))
        return -errno;
    if (mkdir(sb->dir, 0700) != 0)
        return -errno;
    sb->own_dir = true;
    char state[PATH_MAX + 16];
    snprintf(state, sizeof(state), "%s/state", sb->dir);
    return mkdir(state, 0700) == 0 ? 0 : -errno;
}

static int spec_write(struct gv_sandbox *sb, const char *root, const struct eph_sandbox_limits *l)
{
    char guest[PATH_MAX + 16], preload[PATH_MAX + 32], cgroup[128];
    snprintf(guest, sizeof(guest), "%s/guest", sb->shared);
    snprintf(preload, sizeof(preload), "%s/ld.so.preload", sb->shared);
    snprintf(cgroup, sizeof(cgroup), "/" CGROUP_PARENT "/%s", sb->g.name);
    struct eph_gvisor_plan plan = {
        .root = root,
        .guest_dir = guest,
        .preload_file = preload,
        .cgroup_path = cgroup,
        .run_dir = sb->g.run_dir,
        .scratch = sb->g.scratch,
        .home = sb->g.home,
        .limits = *l,
    };
    char *json;
    int rc = eph_gvisor_spec_json(&plan, &json);
    if (rc)
        return rc;
    int dfd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        rc = -errno;
    else {
        rc = eph_gvisor_write_file_at(dfd, "config.json", json, strlen(json), 0600);
        close(dfd);
    }
    free(json);
    return rc;
}

/* Spawns `runsc run`; chan is the container's end of the channel. */
static int runsc_start(struct gv_sandbox *sb, int chan)
{
    char root_opt[PATH_MAX + 16], log_opt[PATH_MAX + 16], errpath[PATH_MAX + 16];
    snprintf(root_opt, sizeof(root_opt), "--root=%s/state", sb->dir);
    /* runsc logs to stdout unless told otherwise, and stdout is the channel. */
    snprintf(log_opt, sizeof(log_opt), "--log=%s/runsc.log", sb->dir);
    snprintf(errpath, sizeof(errpath), "%s/runsc.err", sb->dir);
    const char *argv[16];
    size_t n = 0;
    argv[n++] = runsc();
    argv[n++] = root_opt;
    argv[n++] = log_opt;
    argv[n++] = "--network=none";
    argv[n++] = "--cpu-num-from-quota";
    /* For an operator chasing a runsc problem: runsc's debug logs (large) go to that directory.
     * They hold every command and its output (--strace): gv_records_commands() makes the server
     * refuse zero-data-retention runs while it is on. */
    char debug_opt[PATH_MAX + 16];
    const char *debug_dir = debug_log_dir();
    if (debug_dir) {
        snprintf(debug_opt, sizeof(debug_opt), "--debug-log=%s/", debug_dir);
        argv[n++] = "--debug";
        argv[n++] = "--strace";
        argv[n++] = debug_opt;
    }
    argv[n++] = "run";
    argv[n++] = "--bundle";
    argv[n++] = sb->dir;
    argv[n++] = sb->g.name;
    argv[n] = NULL;
    int err = open(errpath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (err < 0)
        return -errno;
    pid_t pid = 0;
    int rc = spawn_attached(argv, chan, chan, err, &pid);
    close(err);
    if (rc) {
        EPH_ERROR(COMPONENT, "cannot start runsc '%s': %s", runsc(), strerror(-rc));
        return rc;
    }
    eph_guest_sandbox_watch(&sb->g, pid, eph_guest_pidfd_open(pid));
    return 0;
}

static int gv_boot(struct eph_guest_sandbox *g, const struct eph_sandbox_config *cfg, int *chan_fd)
{
    struct gv_sandbox *sb = (struct gv_sandbox *)g;
    char root[PATH_MAX], why[PATH_MAX + 96];
    int chan[2] = {-1, -1};
    if (!runsc()) {
        EPH_ERROR(COMPONENT, "runsc not found");
        return -ENOENT;
    }
    int rc = image_check(cfg, root, why, sizeof(why));
    if (rc) {
        EPH_ERROR(COMPONENT, "%s", why);
        return rc;
    }
    g->hello_timeout_ms = SETUP_TIMEOUT_MS;
    snprintf(sb->dir, sizeof(sb->dir), RUN_DIR "/%s", g->name);
    rc = bundle_prepare(sb, cfg);
    if (rc) {
        EPH_ERROR(COMPONENT, "cannot prepare the bundle '%s': %s", sb->dir, strerror(-rc));
        return rc;
    }
    rc = spec_write(sb, root, &g->limits);
    if (rc)
        return rc;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0)
        return -errno;
    rc = runsc_start(sb, chan[1]);
    close(chan[1]);
    if (rc) {
        close(chan[0]);
        return rc;
    }
    *chan_fd = chan[0];
    return 0;
}

static void gv_boot_failed(struct eph_guest_sandbox *g, int rc)
{
    char last[256];
    runsc_last_error(((struct gv_sandbox *)g)->dir, last, sizeof(last));
    EPH_ERROR(COMPONENT, "the gVisor sandbox did not start: %s%s%s", strerror(-rc),
              last[0] ? "; runsc: " : "", last);
}

/* The channel is closed: the init ends, hence the container, and `runsc run` deletes it and
 * exits (unless it was killed); then its state, cgroup and bundle are removed. */
static int gv_release(struct eph_guest_sandbox *g)
{
    struct gv_sandbox *sb = (struct gv_sandbox *)g;
    int rc = eph_guest_sandbox_reap(g, EXIT_WAIT_MS, NULL);
    if (sb->own_dir) {
        char state[PATH_MAX + 16];
        snprintf(state, sizeof(state), "%s/state", sb->dir);
        if (state_left(state))
            runsc_kill_delete(sb->dir, g->name);
        int c = cgroup_remove(g->name, NULL);
        if (c && !rc)
            rc = c;
        int r = eph_gvisor_rm_tree(sb->dir);
        if (r) {
            EPH_WARN(COMPONENT, "cannot remove the bundle '%s': %s", sb->dir, strerror(-r));
            if (!rc)
                rc = r;
        }
    }
    return rc;
}

static int gv_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out)
{
    return eph_guest_sandbox_create(&eph_sandbox_gvisor_ops, cfg, NULL, out);
}

/* ---- probe and orphans ------------------------------------------------------------------- */

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static bool probe_done;
static int probe_rc;
static char probe_why[512];

/* `runsc --version` answers with "runsc version ..."; its first line goes to version. */
static int version_check(char *version, size_t vcap, char *why, size_t whylen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -errno;
    int null = open_null(O_RDWR);
    if (null < 0) {
        close(p[0]);
        close(p[1]);
        return null;
    }
    const char *argv[] = {runsc(), "--version", NULL};
    pid_t pid;
    int rc = spawn(argv, null, p[1], null, &pid);
    close(null);
    close(p[1]);
    if (rc) {
        close(p[0]);
        eph_text_format_cut(why, whylen, "cannot run '%s': %s", runsc(), strerror(-rc));
        return rc;
    }
    char buf[256];
    size_t len = 0;
    uint64_t deadline = eph_clock_mono_ns() + 5000ull * 1000000u;
    while (len < sizeof(buf) - 1) {
        uint64_t now = eph_clock_mono_ns();
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1) == 0)
            break;
        ssize_t n = read(p[0], buf + len, sizeof(buf) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(p[0]);
    buf[len] = '\0';
    int status = 0;
    if (eph_guest_child_wait(pid, -1, 5000, &status) == -ETIMEDOUT) {
        kill(pid, SIGKILL);
        (void)eph_guest_child_wait(pid, -1, 5000, &status);
    }
    if (strncmp(buf, "runsc version ", 14) != 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
        eph_text_format_cut(why, whylen, "'%s --version' did not answer as runsc does", runsc());
        return -ENOEXEC;
    }
    buf[strcspn(buf, "\n")] = '\0';
    EPH_DEBUG(COMPONENT, "%s", buf);
    snprintf(version, vcap, "%s", buf);
    return 0;
}

/* A tiny sandbox boots and `ls -ld` works in it (the statx compat library is in place). */
static int boot_check(const struct eph_sandbox_config *cfg, char *why, size_t whylen)
{
    struct eph_sandbox_config c = *cfg;
    struct eph_sandbox *sb = NULL;
    c.limits.memory_mib = 256;
    c.limits.disk_mib = 16;
    c.limits.fsize_bytes = 0;
    c.owner_tag = "probe";
    int rc = gv_create(&c, &sb);
    if (rc) {
        snprintf(why, whylen, "a gVisor sandbox does not boot here: %s (see the log)",
                 strerror(-rc));
        return rc;
    }
    struct eph_exec_request req = {
        .command = "ls -ld / /tmp >/dev/null",
        .timeout_ms = PROBE_TIMEOUT_MS,
        .stdout_cap = 256,
        .stderr_cap = 256,
    };
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    rc = eph_guest_sandbox_exec(sb, &req, &res);
    if (!rc && (res.signal || res.exit_code != 0)) {
        snprintf(why, whylen, "'ls -ld /' fails in a gVisor sandbox (status %d): %.*s",
                 res.signal ? 128 + res.signal : res.exit_code,
                 (int)strcspn(res.err.data ? res.err.data : "", "\n"),
                 res.err.data ? res.err.data : "");
        rc = -ENOEXEC;
    } else if (rc) {
        snprintf(why, whylen, "a command in a gVisor sandbox failed: %s", strerror(-rc));
    }
    eph_exec_result_release(&res);
    int d = eph_guest_sandbox_destroy(sb);
    if (!rc && d) {
        snprintf(why, whylen, "a gVisor sandbox is not removed cleanly: %s", strerror(-d));
        rc = d;
    }
    return rc;
}

static int gv_probe(const struct eph_sandbox_config *cfg, char *why, size_t whylen)
{
    pthread_mutex_lock(&probe_lock);
    if (!probe_done) {
        char root[PATH_MAX];
        char compat[PATH_MAX];
        char version[256], ident[4 * PATH_MAX + 512];
        bool keyed = false;
        probe_why[0] = '\0';
        if (!runsc()) {
            snprintf(probe_why, sizeof(probe_why),
                     "runsc not found on PATH (install the Debian package runsc)");
            probe_rc = -ENOENT;
        } else if (geteuid() != 0) {
            snprintf(probe_why, sizeof(probe_why),
                     "the gvisor backend needs root (runsc creates the sandbox's cgroups and "
                     "namespaces)");
            probe_rc = -EPERM;
        } else if (!cfg->init_path || access(cfg->init_path, R_OK) != 0) {
            snprintf(probe_why, sizeof(probe_why), "ephemeral-init '%s' is not readable",
                     cfg->init_path ? cfg->init_path : "");
            probe_rc = -ENOENT;
        } else if (compat_path(cfg->init_path, compat, sizeof(compat)) ||
                   access(compat, R_OK) != 0) {
            eph_text_format_cut(probe_why, sizeof(probe_why),
                                "the gvisor compat library '%s' is not readable (make builds it)",
                                compat);
            probe_rc = -ENOENT;
        } else if ((probe_rc = image_check(cfg, root, probe_why, sizeof(probe_why))) != 0) {
            /* why is set */
        } else if ((keyed = eph_gvisor_probe_ident(runsc(), cfg->init_path, compat, root, ident,
                                                   sizeof(ident)) == 0) &&
                   eph_gvisor_probe_recorded_version(ident, version, sizeof(version)) == 0 &&
                   eph_gvisor_probe_remembered(version, ident)) {
            EPH_DEBUG(COMPONENT, "gVisor booted here before with the same runsc file, init, "
                                 "library and image: no version query, no probe sandbox");
            probe_rc = 0;
        } else if ((probe_rc = version_check(version, sizeof(version), probe_why,
                                             sizeof(probe_why))) != 0) {
            /* why is set */
        } else if (keyed && eph_gvisor_probe_remembered(version, ident)) {
            EPH_DEBUG(COMPONENT, "gVisor booted here before with the same runsc, init, library "
                                 "and image: no probe sandbox");
        } else {
            probe_rc = boot_check(cfg, probe_why, sizeof(probe_why));
            if (!probe_rc && keyed)
                eph_gvisor_probe_remember(version, ident);
        }
        probe_done = true;
    }
    int rc = probe_rc;
    if (rc && why)
        snprintf(why, whylen, "%s", probe_why);
    pthread_mutex_unlock(&probe_lock);
    return rc;
}

struct cg_sweep {
    int removed;
};

/* Sandbox cgroups of dead servers that no bundle names any more (a server that died between
 * removing the bundle and the cgroup, or a runsc that left one): <tag>-<pid>-gv<n>. */
static void cgroup_sweep_in(const char *mnt, int version, void *arg)
{
    (void)version;
    struct cg_sweep *s = arg;
    char parent[PATH_MAX + 32];
    snprintf(parent, sizeof(parent), "%s/" CGROUP_PARENT, mnt);
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR || !eph_guest_name_orphaned(e->d_name, "gv"))
            continue;
        char dir[PATH_MAX + 300];
        snprintf(dir, sizeof(dir), "%s/%.255s", parent, e->d_name);
        if (cgroup_dir_remove(dir) == 0) {
            EPH_INFO(COMPONENT, "removed orphaned cgroup '%s'", dir);
            s->removed++;
        }
    }
    closedir(d);
}

static int gv_cleanup_orphans(void)
{
    int removed = 0;
    DIR *d = opendir(RUN_DIR);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' || !eph_guest_name_orphaned(e->d_name, "gv"))
                continue;
            char dir[PATH_MAX], state[PATH_MAX + 16];
            snprintf(dir, sizeof(dir), RUN_DIR "/%.200s", e->d_name);
            snprintf(state, sizeof(state), "%s/state", dir);
            if (state_left(state))
                runsc_kill_delete(dir, e->d_name);
            (void)cgroup_remove(e->d_name, NULL);
            if (eph_gvisor_rm_tree(dir) == 0) {
                EPH_INFO(COMPONENT, "removed orphaned gVisor sandbox '%s'", dir);
                removed++;
            }
        }
        closedir(d);
    }
    /* Shared guest files of other builds, idle and held by no process (host.h). */
    (void)eph_gvisor_shared_sweep();
    /* Stray cgroups are logged one by one; what is counted is sandboxes. */
    struct cg_sweep s = {0};
    eph_guest_cgroup_mounts(cgroup_sweep_in, &s);
    return removed;
}

static const struct eph_sandbox_backend gv_backend = {
    .size = sizeof(struct gv_sandbox),
    .name_prefix = "gv",
    .boot = gv_boot,
    .boot_failed = gv_boot_failed,
    .release = gv_release,
};

const struct eph_sandbox_ops eph_sandbox_gvisor_ops = {
    .name = "gvisor",
    .ready_message = "gVisor sandbox ready",
    .destroyed_message = "gVisor sandbox destroyed",
    .probe = gv_probe,
    .create = gv_create,
    .cleanup_orphans = gv_cleanup_orphans,
    .records_commands = gv_records_commands,
    EPH_GUEST_SANDBOX_OPS(&gv_backend),
};
