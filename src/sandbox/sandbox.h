/*
 * sandbox.h - the sealed machine a run's commands execute in.
 *
 * A backend is a table of functions (struct eph_sandbox_ops): namespaces, gvisor, microvm. Every
 * backend runs ephemeral-init inside as the sandbox's init and speaks the guest protocol
 * (src/guest/protocol.h) with it, so exec, files, the tunnel, interrupt and destroy are the same
 * generic functions on every backend (guest.c); what differs is how the machine is booted and
 * released (backend.h). One sandbox serves one run and is never reused. Adding a backend is adding
 * a file and one line in sandbox.c.
 *
 * Threads: a sandbox is driven by one thread (the run's worker). eph_sandbox_interrupt() may come
 * from any other thread (cancel, shutdown, budget): it kills the machine at once, so that a blocked
 * exec returns -ECANCELED; destroy must still be called. So may the fence's watch_fd and pause
 * (run/fence.c), before destroy.
 */
#ifndef EPH_SANDBOX_H
#define EPH_SANDBOX_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/config.h"

struct eph_sandbox;

/* The limits of a sandbox: struct eph_sandbox_limits, in common/config.h. */
struct eph_sandbox_config {
    const char *backend;   /* "auto", "namespaces", "gvisor", "microvm" */
    const char *image;     /* root file system directory, mounted read-only */
    const char *init_path; /* host path of the static ephemeral-init binary */
    struct eph_sandbox_limits limits;
    const char
        *owner_tag; /* short tag naming the owning server (for orphan cleanup); may be NULL */
};

/* One command through /bin/sh -c as worker in the scratch directory. */
struct eph_exec_request {
    const char *command;
    uint32_t timeout_ms; /* wall time; the whole process group is killed when it passes */
    uint32_t stdout_cap; /* bytes of each stream kept for the caller; the rest is counted */
    uint32_t stderr_cap;
    /* A stream longer than its cap keeps its head and its tail: the result's buffer then holds
     * the first cap - cap/2 bytes followed by the last cap/2 (false: the first cap bytes). The
     * tail arrives (and on_output sees it) when the command has ended. */
    bool head_tail;
    const char *const *env; /* extra "K=V" entries, NULL-terminated; may be NULL */
    const char *cwd;        /* where it starts (inside the sandbox); NULL: the scratch directory */
    /* Optional: called from the exec thread with each piece of kept output as it arrives
     * (stream 1 = stdout, 2 = stderr); the pieces add up to exactly the result's buffers. */
    void (*on_output)(void *arg, int stream, const void *data, size_t len);
    void *on_output_arg;
    /* Optional: called from the exec thread with on_output_arg when tick_ms passed with no
     * output, while the command runs (on_output's user emits what it held back). */
    void (*on_tick)(void *arg);
    uint32_t tick_ms;
    /* Optional: the bytes of a stream past its head as the command writes them, live_cap bytes
     * at most (both streams), called like on_output. They are not the result's (its tail still
     * comes at the end): with head_tail, what a running command shows beyond its head. */
    void (*on_live)(void *arg, int stream, const void *data, size_t len);
    uint32_t live_cap;
};

struct eph_exec_result {
    int exit_code;  /* valid when signal == 0 */
    int signal;     /* terminating signal, or 0 */
    bool timed_out; /* killed by the timeout */
    uint64_t duration_us;
    struct eph_buf out; /* at most stdout_cap bytes (head_tail: see the request); owned by the
                           result */
    struct eph_buf err;
    uint64_t stdout_total; /* bytes the command wrote, kept or not */
    uint64_t stderr_total;
};

/* The broker tunnel (docs/BROKER.md): a proxy listener inside the sandbox whose connections come
 * out on the host as byte streams. */
struct eph_sandbox_tunnel {
    uint16_t port;        /* inside the sandbox, on 127.0.0.1: 3128 */
    uint32_t max_streams; /* connections open at once; more are refused inside */
    /* Called on the sandbox's channel thread, for each connection a program makes, with
     * the stream's id and the host end of its byte stream (a non-blocking socket the callee owns
     * and closes). Must not block: hand the socket to another thread. A negative return resets
     * the stream. */
    int (*on_stream)(void *arg, uint32_t stream, int fd);
    /* Optional, on the same thread: n bytes of the stream are about to cross (either way);
     * returns how many may. Fewer cuts the stream at that byte (the budget is spent). Both run
     * between commands as well as during them, so concurrently with the thread that drives the
     * sandbox: what they touch must be safe to use from two threads. */
    size_t (*on_bytes)(void *arg, uint32_t stream, size_t n);
    void *arg;
};

/* One entry of a scratch directory listing (list_files). Everything in it came from the guest and
 * was checked on the host: path is relative, without "." or ".." components, valid UTF-8, at most
 * EPH_PROTO_MAX_PATH bytes; target is set only on a symlink. */
enum eph_sandbox_file_type {
    EPH_SANDBOX_FILE = 1,
    EPH_SANDBOX_DIR = 2,
    EPH_SANDBOX_SYMLINK = 3,
};

struct eph_sandbox_file {
    enum eph_sandbox_file_type type;
    uint64_t size; /* a file's bytes when listed; 0 for a directory; a symlink's target length */
    char *path;
    char *target; /* NULL unless a symlink */
};

struct eph_sandbox_listing {
    struct eph_sandbox_file *v;
    size_t n;
    bool truncated; /* the guest left entries out (the entry cap, the depth, unsendable names) */
};

void eph_sandbox_listing_release(struct eph_sandbox_listing *l);

void eph_exec_result_init(struct eph_exec_result *r);
void eph_exec_result_release(struct eph_exec_result *r);

struct eph_sandbox_backend; /* backend.h */

struct eph_sandbox_ops {
    const char *name;          /* "namespaces" */
    const char *ready_message; /* "namespace sandbox ready" */
    const char *destroyed_message;
    /* 0 when the backend works on this host, else a negative errno and a reason in why. */
    int (*probe)(const struct eph_sandbox_config *cfg, char *why, size_t whylen);
    /* Builds and boots a fresh machine; on success *out is owned by the caller (destroy it). */
    int (*create)(const struct eph_sandbox_config *cfg, struct eph_sandbox **out);
    int (*exec)(struct eph_sandbox *sb, const struct eph_exec_request *req,
                struct eph_exec_result *res);
    /* Writes a file relative to the scratch directory (or absolute inside the sandbox). */
    int (*write_file)(struct eph_sandbox *sb, const char *path, const void *data, size_t len,
                      unsigned mode);
    /* Reads at most cap bytes of a file into out; -EMSGSIZE when it is larger. */
    int (*read_file)(struct eph_sandbox *sb, const char *path, size_t cap, struct eph_buf *out);
    /* Lists the scratch directory (at most max_entries entries, max_depth levels) without
     * following a symlink; out is released first. Optional: NULL where the backend cannot
     * (-ENOTSUP for eph_sandbox_list_files). */
    int (*list_files)(struct eph_sandbox *sb, uint32_t max_entries, uint32_t max_depth,
                      struct eph_sandbox_listing *out);
    /* Absolute path of the scratch directory inside the sandbox. */
    const char *(*scratch_dir)(struct eph_sandbox *sb);
    void (*interrupt)(struct eph_sandbox *sb);
    /* Opens the broker tunnel's listener inside the sandbox (once; only for runs with web or
     * connections). The sandbox's channel thread relays its streams from then on, between calls
     * as well as during them (a background process may use the proxy); destroy closes every
     * stream. */
    int (*open_tunnel)(struct eph_sandbox *sb, const struct eph_sandbox_tunnel *t);
    /* Kills everything in the machine and removes every host-side trace. Always frees sb. Returns
     * 0, or a negative errno when something could not be removed (logged). */
    int (*destroy)(struct eph_sandbox *sb);
    /* Optional (may be NULL): removes what dead servers using this backend left behind; returns
     * how many were removed, or a negative errno. */
    int (*cleanup_orphans)(void);
    /* Optional (may be NULL): true when the backend writes the commands it runs and their output
     * to disk on the host (gvisor with EPHEMERAL_RUNSC_DEBUG_DIR); a zero-data-retention run
     * must then be refused. */
    bool (*records_commands)(void);
    /* Optional (the run's lease fence, docs/RUN.md): a new descriptor (a pidfd, O_CLOEXEC) of
     * the process whose SIGKILL ends the whole machine, for a watchdog outside the server;
     * -ENOTSUP without one. From any thread. */
    int (*watch_fd)(struct eph_sandbox *sb);
    /* Optional: stops (paused) or resumes everything in the machine, from any thread, so that
     * nothing in it runs meanwhile; -ENOTSUP when the backend cannot. */
    int (*pause)(struct eph_sandbox *sb, bool paused);
    /* The primitives of a guest-based backend (backend.h); NULL for a backend that implements the
     * calls above itself. */
    const struct eph_sandbox_backend *backend;
};

/* A sandbox as the rest of the service sees it: the backend plus its private state. Backends
 * embed this as their first member. */
struct eph_sandbox {
    const struct eph_sandbox_ops *ops;
};

/* ops->records_commands, false when the backend has none. */
bool eph_sandbox_records_commands(const struct eph_sandbox_ops *ops);

/* The backend named name ("namespaces"...), or NULL. */
const struct eph_sandbox_ops *eph_sandbox_backend(const char *name);
/* Resolves cfg->backend ("auto" = the strongest that probes fine: microvm, gvisor, namespaces).
 * 0 and *out set, or a negative errno with a reason in why. */
int eph_sandbox_choose(const struct eph_sandbox_config *cfg, const struct eph_sandbox_ops **out,
                       char *why, size_t whylen);
void eph_sandbox_limits_default(struct eph_sandbox_limits *l);

static inline int eph_sandbox_exec(struct eph_sandbox *sb, const struct eph_exec_request *req,
                                   struct eph_exec_result *res)
{
    return sb->ops->exec(sb, req, res);
}

static inline int eph_sandbox_list_files(struct eph_sandbox *sb, uint32_t max_entries,
                                         uint32_t max_depth, struct eph_sandbox_listing *out)
{
    return sb->ops->list_files ? sb->ops->list_files(sb, max_entries, max_depth, out) : -ENOTSUP;
}

static inline int eph_sandbox_destroy(struct eph_sandbox *sb)
{
    return sb->ops->destroy(sb);
}

/* Removes what dead servers left behind: sandbox cgroups and host-side directories whose owning
 * processes are gone. Returns how many were removed, or a negative errno. */
int eph_sandbox_cleanup_orphans(void);

/* The sandbox launcher (docs/SANDBOX.md, "The launcher"): a small process forked from the caller,
 * which then clones the namespaces backend's sandboxes from its own small copy instead of from the
 * caller's (a server's size makes every clone dearer). Start it before the process starts threads
 * or grows (first thing in `serve`), from a thread that lives as long as the process: the
 * launcher and every sandbox it clones die with that thread. Without one, or once it is gone,
 * the backend clones from the calling process. start: 0, -EALREADY, or a negative errno; stop
 * ends and reaps it (after the last sandbox was created). info: its pid (0 when there is none) and
 * how many sandboxes it has cloned since start. */
int eph_sandbox_launcher_start(void) __attribute__((warn_unused_result));
void eph_sandbox_launcher_stop(void);
void eph_sandbox_launcher_info(pid_t *pid, unsigned long *served);

#endif
