/*
 * tunnel.h - the guest end of the broker tunnel (docs/BROKER.md), inside ephemeral-init.
 *
 * Off until the host sends tunnel_listen (only runs with web or connections): then a listener on
 * 127.0.0.1:PORT in the sandbox's own network namespace, and each accepted connection is a stream
 * multiplexed over the guest channel. Flow control is per stream: the guest reads from a socket
 * only while the host has granted credit, and grants the host credit only for bytes it has written
 * to the socket, so neither side buffers more than one window per stream.
 *
 * Everything here runs on init's one thread, from its poll loops; frames go out through the
 * sender given at start-up (init's blocking channel write).
 */
#ifndef EPH_GUEST_TUNNEL_H
#define EPH_GUEST_TUNNEL_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guest/protocol.h"

/* The most streams the guest keeps open at once, whatever the host asks. */
#define EPH_GTUNNEL_MAX_STREAMS 64
/* pollfd entries the tunnel may add: the listener and one per stream. */
#define EPH_GTUNNEL_MAX_POLLFDS (EPH_GTUNNEL_MAX_STREAMS + 1)

typedef void (*eph_gtunnel_send_fn)(const uint8_t *frame, size_t len);

void eph_gtunnel_init(eph_gtunnel_send_fn send);
/* Opens the listener: 0, or a negative errno (already listening: -EALREADY). */
int eph_gtunnel_listen(uint16_t port, uint32_t max_streams);
bool eph_gtunnel_on(void);
/* The environment entries that point programs at the listener (NULL-terminated), or NULL when the
 * tunnel is off. */
const char *const *eph_gtunnel_env(void);
/* Fills pfd with what the tunnel waits for; returns how many entries were used. */
size_t eph_gtunnel_pollfds(struct pollfd *pfd, size_t max);
/* Serves what poll reported on the entries eph_gtunnel_pollfds() filled. */
void eph_gtunnel_service(const struct pollfd *pfd, size_t n);
/* A tunnel frame from the host (data, window or close); frames for unknown streams are dropped
 * (the stream was reset here while they were on their way). */
void eph_gtunnel_frame(const struct eph_proto_frame *f);

#endif
