/*
 * guard.h - the HTTP server's defence against connection floods and key guessing, as plain data
 * (no socket of its own, the time passed in), so that it is tested without a server.
 *
 * Every connection is either reading (its request head has not all arrived, or it waits on a
 * keep-alive for its next request) or busy (a whole head is in and the server is answering it:
 * handlers, long polls, event streams). A reading connection must become busy within head_ms or
 * it is closed. One client address (an IPv4 address, or an IPv6 /64) holds at most per_address
 * connections and the server at most max_connections: a new connection past a limit takes the
 * place of the oldest reading connection under that limit (the address's own, or anyone's for
 * the server's), and is refused only when every connection under the limit is busy. So a flood of
 * heads that never finish can never keep out a client that sends its request, from another
 * address or the same one, and no address takes more than per_address of the server's places.
 *
 * Failed authentications are counted per address in a bucket of auth_failures_per_minute that
 * refills at that rate; an address whose bucket is empty is refused every authentication, good
 * keys included, until a failure's worth has refilled (a limiter that still checked the key would
 * let a guesser go on at full speed, reading 429 as "wrong").
 *
 * Threads: every function may be called from any thread; close_fn is called under the guard's
 * lock and must not call back into it.
 */
#ifndef EPH_API_GUARD_H
#define EPH_API_GUARD_H

#include <stdint.h>
#include <sys/socket.h>

struct eph_api_guard;
struct eph_api_guard_conn;

struct eph_api_guard_limits {
    unsigned max_connections;          /* every address together */
    unsigned per_address;              /* one address */
    unsigned head_ms;                  /* a reading connection's deadline */
    unsigned auth_failures_per_minute; /* 0: no limit */
};

/* close_fn(fd, ctx) ends a connection the guard gives up on (the server shuts its socket down,
 * and its connection is then closed as a client that left). */
int eph_api_guard_new(const struct eph_api_guard_limits *limits,
                      void (*close_fn)(int fd, void *ctx), void *ctx, struct eph_api_guard **out)
    __attribute__((warn_unused_result));
/* Frees the guard and every entry; no connection may reach it any more. */
void eph_api_guard_free(struct eph_api_guard *g);

/* A new connection from addr on fd, reading since now_ms: its entry, or NULL when it is refused
 * (or out of memory): the caller ends it then. */
struct eph_api_guard_conn *eph_api_guard_open(struct eph_api_guard *g, const struct sockaddr *addr,
                                              int fd, uint64_t now_ms);
/* The connection's head is in: no deadline any more. */
void eph_api_guard_busy(struct eph_api_guard *g, struct eph_api_guard_conn *c);
/* The connection's request is answered: it reads its next request from now_ms. */
void eph_api_guard_idle(struct eph_api_guard *g, struct eph_api_guard_conn *c, uint64_t now_ms);
/* The connection is closed (whoever closed it): frees its entry. c may be NULL. */
void eph_api_guard_close(struct eph_api_guard *g, struct eph_api_guard_conn *c);
/* Ends the reading connections past their deadline; the milliseconds until the next deadline
 * (head_ms when no connection is reading). */
uint64_t eph_api_guard_expire(struct eph_api_guard *g, uint64_t now_ms);
/* Open connections, those of them reading, and the addresses remembered (tests and logs). */
void eph_api_guard_counts(struct eph_api_guard *g, unsigned *open, unsigned *reading,
                          unsigned *addresses);

/* 0 when addr may try a key now, else the whole seconds until it may. */
unsigned eph_api_guard_auth_wait(struct eph_api_guard *g, const struct sockaddr *addr,
                                 uint64_t now_ms);
/* addr presented a key that is not valid. */
void eph_api_guard_auth_failed(struct eph_api_guard *g, const struct sockaddr *addr,
                               uint64_t now_ms);

#endif
