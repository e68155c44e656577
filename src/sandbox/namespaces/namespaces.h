/*
 * namespaces.h - the `namespaces` backend: Ephemeral's own jail.
 *
 * jail.c is the whole backend as the rest of the service sees it (the ops table) and holds the one
 * orchestrating function: the parent prepares a plan (every path, option string and number the
 * child will need, so that the child never allocates), clones the child into new PID, mount,
 * network, IPC and UTS namespaces, and both sides then run their ordered steps. One file per
 * kernel feature implements them; each step returns 0 or a negative errno and the first failure
 * ends the setup with the step's name in the log.
 *
 * The child runs in a copy of a possibly multithreaded server (or of the server's launcher,
 * launcher.c): after clone() it calls only
 * async-signal-safe functions and raw system calls (no malloc, no stdio, no glibc set*id, whose
 * thread broadcast would wait on threads that do not exist in the child).
 *
 * docs/SANDBOX.md lists the steps in order and why they are in that order.
 */
#ifndef EPH_SANDBOX_NAMESPACES_H
#define EPH_SANDBOX_NAMESPACES_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"

extern const struct eph_sandbox_ops eph_sandbox_namespaces_ops;

#define EPH_NS_WORKER_UID 1000
/* Host ids of sandbox users: a range no host user owns, one id per live sandbox on the host. */
#define EPH_NS_HOST_ID_BASE 0x7e000000u
#define EPH_NS_HOST_IDS 65536u
/* Per sandbox: queued signals (host default: about 96,000), and bytes of POSIX message queues
 * (host default 800 KiB, charged to kernel memory). */
#define EPH_NS_SIGPENDING_MAX 1024u
#define EPH_NS_MSGQUEUE_MAX (256u * 1024u)
/* Terminals per sandbox (devpts max=), out of the host's kernel.pty.max. */
#define EPH_NS_PTYS_MAX "32"

/* Everything the child needs, prepared by the parent before clone(). */
struct eph_ns_plan {
    char root[PATH_MAX];  /* the image, resolved (no symlinks) */
    char run_rel[64];     /* "tmp/ephemeral-run-XXXXXX", relative to the new root */
    char scratch_rel[80]; /* run_rel + "/scratch" */
    char home_rel[80];    /* run_rel + "/home" */
    char scratch[81];     /* "/tmp/ephemeral-run-XXXXXX/scratch", as seen inside */
    char home[81];
    char tmp_opts[96]; /* tmpfs options for /tmp: size, mode, inodes */
    /* What /proc/meminfo shows inside (mount.c): the sandbox's memory limit, not the host's. */
    char meminfo_rel[96]; /* run_rel + "/meminfo" */
    char meminfo[384];
    size_t meminfo_len;
    uid_t host_id; /* the host uid and gid that worker maps to */
    uint64_t nofile, fsize, nproc;
    int chan_fd; /* becomes fd 3 of init */
    int init_fd; /* the ephemeral-init binary, opened before pivot_root */
    int sync_fd; /* SOCK_SEQPACKET to the parent; closed by the exec */
    /* The child joins its cgroup itself by writing "0" into these (v1: each hierarchy's `tasks`,
     * which moves the calling thread without the kernel's global threadgroup lock; v2 without
     * clone3: `cgroup.procs`). cg_join_n = 0 when clone3 put the child there (CLONE_INTO_CGROUP).
     */
    int cg_join_fd[3];
    int cg_join_n;
};

/* Child -> parent messages on the sync socket (the parent -> child ones are single bytes). */
struct eph_ns_sync_msg {
    int32_t kind; /* EPH_NS_SYNC_* */
    int32_t step; /* index of the failed step */
    int32_t err;  /* negative errno */
};
#define EPH_NS_SYNC_NEED_MAPS 1
#define EPH_NS_SYNC_FAILED 2
#define EPH_NS_SYNC_GO_MAPS 'M'

/* jail.c: clones the sandbox's child from its plan, whose descriptors are this process's: born in
 * its cgroup through cgroup_dir (v2, clone3) where the kernel can, else with join_fd[0..join_n)
 * for the child to join it itself. sibling as for eph_ns_pid_clone. The caller keeps and closes
 * every descriptor; the child runs the steps and execs the init. */
int eph_ns_jail_clone(struct eph_ns_plan *p, int cgroup_dir, const int *join_fd, int join_n,
                      bool sibling, pid_t *pid, int *pidfd);

/* launcher.c: the process that clones the sandboxes of a server (docs/SANDBOX.md, "The launcher").
 * Clones through it as eph_ns_jail_clone would: 0 and the child (a child of this process), a
 * negative errno, or 1 when this process has no launcher (or it is gone): the caller clones. */
int eph_ns_launcher_clone(const struct eph_ns_plan *p, int cgroup_dir, const int *join_fd,
                          int join_n, pid_t *pid, int *pidfd);
/* The launcher's side of one request read from fd (its loop, and the unit tests): 0 when it was
 * answered (a malformed one with -EPROTO), 1 at end of file, or a negative errno when fd broke. */
int eph_ns_launcher_serve_one(int fd);

/* user.c: ids and the user namespace. */
int eph_ns_user_clear_groups(void);            /* child, still host root */
int eph_ns_user_become_host_id(uid_t host_id); /* child: host root -> its host id */
int eph_ns_user_unshare(void);                 /* child: new user, cgroup and network namespaces */
int eph_ns_user_write_maps(pid_t pid, uid_t host_id); /* parent */
int eph_ns_user_become_worker(void);                  /* child, inside the new user namespace */

/* pid.c: the clone into new namespaces, and the end of the process. sibling: CLONE_PARENT, the
 * child is the caller's parent's child (the launcher's way, launcher.c). */
int eph_ns_pid_clone(int (*fn)(void *), void *arg, bool sibling, pid_t *pid, int *pidfd);
/* The same through clone3(CLONE_INTO_CGROUP) with a cgroup v2 directory: the child is born in the
 * cgroup. 1 when the kernel cannot (before 5.7, clone3 filtered, cgroup_fd < 0; remembered for the
 * process): then the caller falls back to eph_ns_pid_clone and has the child join by itself. */
int eph_ns_pid_clone_into_cgroup(int (*fn)(void *), void *arg, int cgroup_fd, bool sibling,
                                 pid_t *pid, int *pidfd);
int eph_ns_pid_kill(int pidfd);
int eph_ns_pid_reap(pid_t pid, int *status);

/* mount.c: the file system, ending in pivot_root. prepare: once per process, before any child
 * (which /proc entries this kernel lacks, so the child does not try to mount over them). */
void eph_ns_mount_prepare(void);
/* The text of the sandbox's /proc/meminfo for a memory limit (parent side); its length. */
size_t eph_ns_mount_meminfo(char *out, size_t cap, unsigned memory_mib);
int eph_ns_mount_setup(const struct eph_ns_plan *p);

/* net.c, uts.c */
int eph_ns_net_setup(void);
int eph_ns_uts_setup(void);

/* rlimits.c: early, before the user namespace (they become its ceilings); the rest after. */
int eph_ns_rlimits_apply_early(void);
int eph_ns_rlimits_apply(const struct eph_ns_plan *p);

/* caps.c */
int eph_ns_caps_drop_bounding(void); /* while caps remain: bounding, ambient, securebits */
int eph_ns_caps_drop_all(void);      /* after becoming worker: every set empty */
int eph_ns_caps_lock(int parent_fd); /* no_new_privs, setsid, parent-death signal */

/* cgroup.c */
struct eph_ns_cgroup {
    int version; /* 1 or 2; 0 when not created */
    int n;
    char dirs[3][PATH_MAX];
};
int eph_ns_cgroup_probe(char *why, size_t whylen);
/* Sends sig to every process in the cgroup, again until a pass finds none it had not signalled
 * (a process forking meanwhile): with SIGSTOP, nothing in it runs once it returns 0. */
int eph_ns_cgroup_signal_all(const struct eph_ns_cgroup *cg, int sig);
int eph_ns_cgroup_create(struct eph_ns_cgroup *cg, const char *name,
                         const struct eph_sandbox_limits *l);
/* Opens what the child writes "0" into to join the cgroup (cgroup.c explains why the child does
 * it): v1, each hierarchy's `tasks`; v2, `cgroup.procs`. fds[] gets cg->n descriptors (O_CLOEXEC).
 */
int eph_ns_cgroup_open_join(const struct eph_ns_cgroup *cg, int fds[3], int *n);
/* v2 only: a descriptor of the cgroup's directory for clone3(CLONE_INTO_CGROUP), or -1 on v1. */
int eph_ns_cgroup_dir_fd(const struct eph_ns_cgroup *cg);
/* Child side: writes "0" into each descriptor (raw system calls only). */
int eph_ns_cgroup_join(const int *fds, int n);
/* Kills every task left and removes the directories. */
int eph_ns_cgroup_destroy(struct eph_ns_cgroup *cg);
int eph_ns_cgroup_cleanup_orphans(void);

#endif
