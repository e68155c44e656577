/*
 * guest_tunnel.h - the host end of the broker tunnel, inside the guest client (docs/BROKER.md).
 *
 * Each stream the guest opens (a connection a program made to the proxy listener inside the
 * sandbox) becomes one end of a local socket pair; the other end is handed to the caller's
 * on_stream (the broker), which reads the program's bytes and writes the answer as if it were the
 * program's own connection. The relay between the frames and the socket pair is credit based per
 * stream and direction: the host reads a socket only while the guest has granted credit, and
 * grants the guest credit only for bytes it has written to the socket. So a slow reader in the
 * sandbox stops the broker's writes, and no side holds more than one window per stream.
 *
 * Nothing here writes to the channel: frames to send are appended to an outgoing queue that the
 * guest client flushes, so tunnel frames never split a request frame. Nothing blocks.
 */
#ifndef EPH_SANDBOX_GUEST_TUNNEL_H
#define EPH_SANDBOX_GUEST_TUNNEL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "guest/protocol.h"
#include "sandbox/sandbox.h"

struct eph_guest_tunnel;

/* The most streams one tunnel relays at once, whatever the caller asks. */
#define EPH_GUEST_TUNNEL_MAX_STREAMS 64

/* 0 and *out, or -ENOMEM / -EINVAL. */
int eph_guest_tunnel_new(const struct eph_sandbox_tunnel *cfg, struct eph_guest_tunnel **out)
    __attribute__((warn_unused_result));
/* Closes every stream's socket (the broker's reads and writes then fail at once) and frees t. */
void eph_guest_tunnel_free(struct eph_guest_tunnel *t);
/* A tunnel frame from the guest. 0, or -EPROTO for a guest that breaks the protocol in a way that
 * means the channel is out of step (an open for a stream id in use). A stream that misbehaves
 * (data beyond its credit) is reset, the channel goes on. */
int eph_guest_tunnel_frame(struct eph_guest_tunnel *t, const struct eph_proto_frame *f)
    __attribute__((warn_unused_result));
size_t eph_guest_tunnel_pollfds(struct eph_guest_tunnel *t, struct pollfd *pfd, size_t max);
void eph_guest_tunnel_service(struct eph_guest_tunnel *t, const struct pollfd *pfd, size_t n);
/* The frames waiting to go to the guest (the guest client writes them and consumes the buffer). */
struct eph_buf *eph_guest_tunnel_out(struct eph_guest_tunnel *t);
/* Streams open now. */
size_t eph_guest_tunnel_streams(const struct eph_guest_tunnel *t);

#endif
