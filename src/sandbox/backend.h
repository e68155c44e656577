/*
 * backend.h - what a sandbox backend writes, and the generic guest layer that does the rest.
 *
 * Every backend runs ephemeral-init inside its machine and talks to it over one channel with the
 * guest protocol. Everything that follows from that is the same on every backend and lives in
 * guest.c: the guest client, exec, files, the broker tunnel, interrupt, the owner tag, the names
 * of the run directory, and the host-side lifecycle (boot -> hello -> ready -> destroy). A backend
 * supplies only what differs (struct eph_sandbox_backend): how the machine is booted (it hands
 * back the host end of the channel and the process to watch), how it is released once the
 * channel is closed (reap, remove its host-side traces), and its probe and orphan sweep. It may
 * override how the machine is killed; by default the layer SIGKILLs the watched process through
 * its pidfd, which ends the machine on every backend built here.
 *
 * A backend's state is a struct whose first member is struct eph_guest_sandbox; the layer
 * allocates backend->size zeroed bytes, so the backend's own fields start zeroed too.
 *
 * Threads: create, destroy and the calls run on the thread that drives the sandbox (the run's
 * worker); interrupt may come from any thread. The channel itself is owned by the guest client's
 * thread (guest_client.h), which reads it all the time: broker tunnel streams are relayed between
 * calls as well as during them.
 */
#ifndef EPH_SANDBOX_BACKEND_H
#define EPH_SANDBOX_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/guest_client.h"
#include "sandbox/sandbox.h"

/* The generic part of every guest-based sandbox. Fields above the line are for backends. */
struct eph_guest_sandbox {
    struct eph_sandbox base; /* first: the public layer casts */
    /* Set by the layer before boot. */
    struct eph_sandbox_limits limits; /* cfg's, with every default filled in */
    char name[64];    /* "<owner tag>-<server pid>-<backend prefix><n>": cgroups, bundles, logs */
    char run_dir[64]; /* "/tmp/ephemeral-run-XXXXXX" as seen inside (XXXXXX random) */
    char scratch[80]; /* run_dir + "/scratch": the commands' working directory */
    char home[80];    /* run_dir + "/home" */
    void *boot_arg;   /* what the backend's create passed to eph_guest_sandbox_create */
    /* Set by boot when the default (10 s) does not fit: how long the guest may take to say hello.
     */
    uint32_t hello_timeout_ms;
    /* ---- private to guest.c ---- */
    struct eph_guest_client client;
    bool client_ready;
    pthread_mutex_t lock; /* guards chan_fd, pid and pidfd: interrupt() races destroy() */
    atomic_bool interrupted;
    int chan_fd; /* the channel while it is open, for interrupt's shutdown() */
    pid_t pid;   /* the watched process, until reaped */
    int pidfd;
};

struct eph_sandbox_backend {
    size_t size;                /* of the backend's state (>= sizeof(struct eph_guest_sandbox)) */
    const char *name_prefix;    /* between the server pid and the number in g->name: "gv" */
    bool shutdown_before_close; /* ask the guest to shut down before the channel is closed */
    /* Starts the machine. It calls eph_guest_sandbox_watch() as soon as a process exists (so
     * release can reap it whatever happens next) and returns the host end of the channel in
     * *chan_fd (the layer owns it from then on). Once boot has been called, release is called
     * whatever happens (boot's failure included), so boot first puts every field release reads
     * in its empty state (descriptors at -1). */
    int (*boot)(struct eph_guest_sandbox *g, const struct eph_sandbox_config *cfg, int *chan_fd);
    /* Optional: the guest never said hello (rc); logs what the backend knows about why. */
    void (*boot_failed)(struct eph_guest_sandbox *g, int rc);
    /* Optional: kills the machine now. Called with g->lock held, from any thread; must not block.
     * NULL: SIGKILL to the watched process. */
    void (*kill)(struct eph_guest_sandbox *g);
    /* Optional: stops (SIGSTOP) or resumes (SIGCONT) everything in the machine; called with
     * g->lock held, from any thread. NULL: the sandbox cannot be paused (-ENOTSUP).
     * eph_guest_pause_watched suits a machine that is one process (QEMU). */
    int (*pause)(struct eph_guest_sandbox *g, bool paused);
    /* After the channel is closed (and the machine killed unless the guest ended cleanly): reaps
     * the watched process (eph_guest_sandbox_reap) and removes every host-side trace. Frees
     * nothing of g itself. 0, or a negative errno when something could not be removed. */
    int (*release)(struct eph_guest_sandbox *g);
};

/* A backend's create: allocates the state, fills the layer's fields, boots, waits for the hello.
 * boot_arg is handed to boot in g->boot_arg. */
/* Whether a host name the layer made ("<tag>-<server pid>-<prefix><n>", g->name) belongs to a
 * server that is no longer running: the orphan sweeps' rule. Anything else (another backend's,
 * an operator's, this server's own) is false, so that a sweep leaves it alone. */
bool eph_guest_name_orphaned(const char *name, const char *prefix);
/* Calls fn with each cgroup (version 1) and cgroup2 (version 2) mount point of this process. */
void eph_guest_cgroup_mounts(void (*fn)(const char *mnt, int version, void *arg), void *arg);

int eph_guest_sandbox_create(const struct eph_sandbox_ops *ops,
                             const struct eph_sandbox_config *cfg, void *boot_arg,
                             struct eph_sandbox **out) __attribute__((warn_unused_result));
/* boot: the process whose death ends the machine (init, runsc, QEMU). pidfd may be -1. */
void eph_guest_sandbox_watch(struct eph_guest_sandbox *g, pid_t pid, int pidfd);
/* release: waits up to grace_ms for the watched process to exit, then kills it and waits again;
 * *status (may be NULL) gets its wait status. 0, or a negative errno (it could not be reaped). */
int eph_guest_sandbox_reap(struct eph_guest_sandbox *g, uint32_t grace_ms, int *status);
/* A round trip to the guest (a probe's check that the guest answers). */
int eph_guest_sandbox_ping(struct eph_sandbox *sb, uint32_t timeout_ms)
    __attribute__((warn_unused_result));
/* pidfd_open(2), or -1 where the kernel has none. */
int eph_guest_pidfd_open(pid_t pid);
/* Waits for a child (pidfd may be -1) by the deadline: 0 and *status (may be NULL), -ETIMEDOUT
 * (the child is left running), or another negative errno. */
int eph_guest_child_wait(pid_t pid, int pidfd, uint32_t timeout_ms, int *status);

/* The generic half of every guest backend's ops table. */
int eph_guest_sandbox_exec(struct eph_sandbox *sb, const struct eph_exec_request *req,
                           struct eph_exec_result *res) __attribute__((warn_unused_result));
int eph_guest_sandbox_write_file(struct eph_sandbox *sb, const char *path, const void *data,
                                 size_t len, unsigned mode) __attribute__((warn_unused_result));
int eph_guest_sandbox_read_file(struct eph_sandbox *sb, const char *path, size_t cap,
                                struct eph_buf *out) __attribute__((warn_unused_result));
int eph_guest_sandbox_list_files(struct eph_sandbox *sb, uint32_t max_entries, uint32_t max_depth,
                                 struct eph_sandbox_listing *out)
    __attribute__((warn_unused_result));
const char *eph_guest_sandbox_scratch_dir(struct eph_sandbox *sb);
void eph_guest_sandbox_interrupt(struct eph_sandbox *sb);
int eph_guest_sandbox_watch_fd(struct eph_sandbox *sb);
int eph_guest_sandbox_pause(struct eph_sandbox *sb, bool paused);
/* A backend's pause for a machine that is one process: SIGSTOP / SIGCONT to the watched one. */
int eph_guest_pause_watched(struct eph_guest_sandbox *g, bool paused);
int eph_guest_sandbox_open_tunnel(struct eph_sandbox *sb, const struct eph_sandbox_tunnel *t)
    __attribute__((warn_unused_result));
int eph_guest_sandbox_destroy(struct eph_sandbox *sb);

#define EPH_GUEST_SANDBOX_OPS(backend_)                                                            \
    .exec = eph_guest_sandbox_exec, .write_file = eph_guest_sandbox_write_file,                    \
    .read_file = eph_guest_sandbox_read_file, .list_files = eph_guest_sandbox_list_files,          \
    .scratch_dir = eph_guest_sandbox_scratch_dir, .interrupt = eph_guest_sandbox_interrupt,        \
    .open_tunnel = eph_guest_sandbox_open_tunnel, .destroy = eph_guest_sandbox_destroy,            \
    .watch_fd = eph_guest_sandbox_watch_fd, .pause = eph_guest_sandbox_pause,                      \
    .backend = (backend_)

#endif
