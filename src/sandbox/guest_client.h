/*
 * guest_client.h - the worker (host) end of the guest protocol, shared by every backend.
 *
 * The client owns one channel fd to an ephemeral-init and speaks the protocol of
 * src/guest/protocol.h over it, one request at a time. Every frame from the guest is hostile: the
 * client checks each header and payload, refuses frames of the wrong type, id or direction and
 * output beyond the caps the request gave, bounds every wait by a deadline (poll), and never
 * buffers more than the caps. A guest that writes garbage, floods, stalls or dies mid-frame makes
 * the call fail with -EPROTO, -EMSGSIZE, -ETIMEDOUT or -EPIPE; after such an error the client is
 * broken (the stream is out of step) and every later call returns the same error: destroy the
 * sandbox.
 *
 * Threads: one thread drives a client. Nothing here blocks without a deadline.
 */
#ifndef EPH_SANDBOX_GUEST_CLIENT_H
#define EPH_SANDBOX_GUEST_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "guest/protocol.h"
#include "sandbox/sandbox.h"

struct eph_guest_tunnel;

struct eph_guest_client {
    int fd;
    uint32_t next_id;
    int broken; /* sticky error, 0 while the stream is in step */
    struct eph_proto_decoder dec;
    uint8_t *rx_payload; /* EPH_PROTO_MAX_PAYLOAD bytes, the decoder's buffer */
    uint8_t *tx;         /* EPH_PROTO_HEADER_SIZE + EPH_PROTO_MAX_PAYLOAD bytes */
    uint8_t rbuf[65536]; /* bytes read but not yet decoded */
    size_t rpos, rlen;
    uint32_t guest_pid; /* from the guest's hello */
    /* The broker tunnel, once opened: its frames interleave with the replies, and its streams
     * are relayed whenever the client waits on the channel. */
    struct eph_guest_tunnel *tunnel;
    size_t out_off; /* bytes of the tunnel's queue already written */
    bool stashed;   /* a reply read while sending, kept for next_frame */
    struct eph_proto_frame stash;
};

/* Takes ownership of fd (closed by release) and makes it non-blocking. 0 or -ENOMEM. */
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
/* Opens the broker tunnel (guest_tunnel.h): the guest listens on cfg->port inside the sandbox. */
int eph_guest_client_open_tunnel(struct eph_guest_client *c, const struct eph_sandbox_tunnel *cfg,
                                 uint64_t deadline_ns) __attribute__((warn_unused_result));
/* Asks the guest to kill everything and exit. */
int eph_guest_client_shutdown(struct eph_guest_client *c, uint64_t deadline_ns)
    __attribute__((warn_unused_result));

#endif
