/*
 * guest_client.h - the worker (host) end of the guest protocol, shared by every backend.
 *
 * The client owns one channel fd to an ephemeral-init and speaks the protocol of
 * src/guest/protocol.h over it, one request at a time. Every frame from the guest is hostile: the
 * client checks each header and payload, refuses frames of the wrong type, id or direction and
 * output beyond the caps the request gave, bounds every wait by a deadline, and never buffers more
 * than a bounded queue. A guest that writes garbage, floods, stalls or dies mid-frame makes the
 * call fail with -EPROTO, -EMSGSIZE, -ETIMEDOUT or -EPIPE; after such an error the client is
 * broken (the stream is out of step) and every later call returns the same error: destroy the
 * sandbox.
 *
 * Threads: the calls below are made by one thread at a time (the one that drives the sandbox).
 * Until the broker tunnel is opened, that caller drives the channel itself: it writes its request
 * and reads until its reply frames are queued, with no other thread and no hand-off (most runs
 * never open a tunnel). Opening the tunnel hands the channel to a thread of the client (joined by
 * release) that reads it all the time and writes to it: it hands the tunnel's frames to the
 * tunnel and serves its streams, between calls as well as during them, and queues every other
 * frame for the caller, who then waits for it by its deadline. Either way one loop does the work
 * (the thread runs it forever, a caller until its frame is there). Flow control: the channel is
 * not read while the queue holds more than one largest frame (the caller is slow), and the
 * tunnel's streams are credit based (guest_tunnel.h): no side buffers without bound. The
 * tunnel's callbacks run on the channel thread.
 */
#ifndef EPH_SANDBOX_GUEST_CLIENT_H
#define EPH_SANDBOX_GUEST_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "guest/protocol.h"
#include "sandbox/sandbox.h"

struct eph_guest_tunnel;

struct eph_guest_frame; /* a queued frame from the guest */

struct eph_guest_client {
    int fd;
    /* The caller's side. */
    uint32_t next_id;
    uint8_t *tx; /* EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD bytes: a request being encoded */
    struct eph_guest_frame *cur; /* the frame the caller looks at (next_frame) */
    uint32_t guest_pid;          /* from the guest's hello */
    /* Whoever drives the channel (the caller, or the channel thread once there is one). */
    struct eph_proto_decoder dec;
    uint8_t *rx_payload; /* EPH_PROTO_MAX_PAYLOAD bytes, the decoder's buffer */
    uint8_t rbuf[65536]; /* bytes read but not yet decoded */
    size_t rpos, rlen;
    int out_src;    /* what is being written: 0 nothing, 1 requests, 2 the tunnel's frames */
    size_t out_off; /* bytes of it already written */
    /* Shared, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a frame was queued, or the client broke */
    int broken;        /* sticky error, 0 while the stream is in step */
    bool caller_broke; /* the caller met it (else the thread did, after what is queued) */
    bool stop;
    struct eph_buf requests; /* whole request frames to send */
    struct eph_guest_frame *head, *tail;
    size_t queued; /* payload bytes in the queue */
    /* The broker tunnel, once opened: its frames interleave with the replies. */
    struct eph_guest_tunnel *tunnel;
    int wake[2]; /* a pipe: wakes the channel thread when there is something to send or room */
    pthread_t thread;
    bool running; /* the channel thread owns the channel (since the tunnel opened) */
};

/* Takes ownership of fd (closed by release) and makes it non-blocking. 0, or -ENOMEM; release
 * must be called either way. */
int eph_guest_client_init(struct eph_guest_client *c, int fd) __attribute__((warn_unused_result));
void eph_guest_client_release(struct eph_guest_client *c);

/* Waits for the guest's hello (the guest is up and speaks our version). deadline_ns is on the
 * monotonic clock (eph_clock_mono_ns). */
int eph_guest_client_hello(struct eph_guest_client *c, uint64_t deadline_ns)
    __attribute__((warn_unused_result));
int eph_guest_client_ping(struct eph_guest_client *c, uint64_t deadline_ns)
    __attribute__((warn_unused_result));
/* Runs one command. res must have been initialised (eph_exec_result_init); its buffers are reset
 * and capped at the request's caps. The wait is bounded by the command's timeout plus a grace
 * period for the guest to report. 0 means the command ran (whatever its status). */
int eph_guest_client_exec(struct eph_guest_client *c, const struct eph_exec_request *req,
                          struct eph_exec_result *res) __attribute__((warn_unused_result));
/* Writes a file (split into frames as needed). */
int eph_guest_client_write_file(struct eph_guest_client *c, const char *path, const void *data,
                                size_t len, unsigned mode, uint64_t deadline_ns)
    __attribute__((warn_unused_result));
/* Reads at most cap bytes into out (reset first); -EMSGSIZE when the file is larger. */
int eph_guest_client_read_file(struct eph_guest_client *c, const char *path, size_t cap,
                               struct eph_buf *out, uint64_t deadline_ns)
    __attribute__((warn_unused_result));
/* Lists the scratch directory (sandbox.h's list_files). Every entry is checked again here: a path
 * that is absolute, has "..", "." or empty components, is not UTF-8 or is too long, a target on
 * what is not a symlink, more entries than asked for, or a count in list_end that is not what
 * came: the guest is broken (-EPROTO). out is released first and left empty on an error. */
int eph_guest_client_list_files(struct eph_guest_client *c, uint32_t max_entries,
                                uint32_t max_depth, struct eph_sandbox_listing *out,
                                uint64_t deadline_ns) __attribute__((warn_unused_result));
/* Opens the broker tunnel (guest_tunnel.h): the guest listens on cfg->port inside the sandbox. */
int eph_guest_client_open_tunnel(struct eph_guest_client *c, const struct eph_sandbox_tunnel *cfg,
                                 uint64_t deadline_ns) __attribute__((warn_unused_result));
/* The sticky error (0 while the channel is in step). */
int eph_guest_client_broken(struct eph_guest_client *c);
/* Asks the guest to kill everything and exit. */
int eph_guest_client_shutdown(struct eph_guest_client *c, uint64_t deadline_ns)
    __attribute__((warn_unused_result));

#endif
