/*
 * guard.c - connection places per address and for the server, the reading deadline, and the
 * failed-authentication buckets (guard.h says the rules). Addresses live in a hash table keyed by
 * SipHash with a random key, so that a client cannot choose addresses that share one chain; each
 * has its reading connections in a list, oldest first, and the server has all of them in another,
 * so that the one to give up and the next deadline are both at a list's head.
 */
#include "api/guard.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define NBUCKETS 1024u
/* Addresses kept for their failures alone, beyond those that hold connections. */
#define AUTH_ONLY_MAX 4096u
/* A bucket counts failures in units that a minute's refill adds up exactly: at N failures a
 * minute, N units a millisecond, so UNIT of them make one failure. */
#define UNIT 60000u

struct addr_rec {
    uint8_t key[16];
    struct addr_rec *next; /* hash chain */
    unsigned conns;
    struct eph_api_guard_conn *rhead, *rtail; /* its reading connections, oldest first */
    uint64_t tokens;                          /* failures left, in UNITs */
    uint64_t refilled_ms;
};

struct eph_api_guard_conn {
    struct addr_rec *addr; /* NULL once given up: the entry waits for eph_api_guard_close */
    int fd;
    bool reading;
    uint64_t since_ms;
    struct eph_api_guard_conn *gprev, *gnext; /* the server's reading list */
    struct eph_api_guard_conn *aprev, *anext; /* the address's */
    struct eph_api_guard_conn *prev, *next;   /* every entry, until its close */
};

struct eph_api_guard {
    pthread_mutex_t lock;
    struct eph_api_guard_limits lim;
    void (*close_fn)(int fd, void *ctx);
    void *ctx;
    unsigned char hash_key[crypto_shorthash_KEYBYTES];
    struct addr_rec *table[NBUCKETS];
    unsigned naddr, open, reading;
    struct eph_api_guard_conn *rhead, *rtail;
    struct eph_api_guard_conn *all;
};

int eph_api_guard_new(const struct eph_api_guard_limits *limits,
                      void (*close_fn)(int fd, void *ctx), void *ctx, struct eph_api_guard **out)
{
    if (sodium_init() < 0)
        return -EIO;
    struct eph_api_guard *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    pthread_mutex_init(&g->lock, NULL);
    g->lim = *limits;
    if (!g->lim.max_connections)
        g->lim.max_connections = 1;
    if (!g->lim.per_address)
        g->lim.per_address = 1;
    g->close_fn = close_fn;
    g->ctx = ctx;
    randombytes_buf(g->hash_key, sizeof(g->hash_key));
    *out = g;
    return 0;
}

void eph_api_guard_free(struct eph_api_guard *g)
{
    if (!g)
        return;
    /* Connections still open are the caller's to close; their entries go with the guard. */
    for (struct eph_api_guard_conn *c = g->all, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    for (unsigned i = 0; i < NBUCKETS; i++)
        for (struct addr_rec *a = g->table[i], *n; a; a = n) {
            n = a->next;
            free(a);
        }
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* An IPv4 address as its IPv6-mapped form; an IPv6 address by its /64 (one subscriber's usual
 * allocation, so that rotating the interface id gains nothing). */
static void address_key(const struct sockaddr *sa, uint8_t key[16])
{
    memset(key, 0, 16);
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &in4->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        bool mapped = IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr);
        memcpy(key, &in6->sin6_addr, mapped ? 16 : 8);
    }
}

static struct addr_rec **chain(struct eph_api_guard *g, const uint8_t key[16])
{
    uint64_t h;
    crypto_shorthash((unsigned char *)&h, key, 16, g->hash_key);
    return &g->table[h % NBUCKETS];
}

static struct addr_rec *find(struct eph_api_guard *g, const uint8_t key[16])
{
    for (struct addr_rec *a = *chain(g, key); a; a = a->next)
        if (memcmp(a->key, key, 16) == 0)
            return a;
    return NULL;
}

static uint64_t bucket_full(const struct eph_api_guard *g)
{
    return (uint64_t)g->lim.auth_failures_per_minute * UNIT;
}

static struct addr_rec *add(struct eph_api_guard *g, const uint8_t key[16], uint64_t now_ms)
{
    struct addr_rec *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    memcpy(a->key, key, 16);
    a->tokens = bucket_full(g);
    a->refilled_ms = now_ms;
    struct addr_rec **head = chain(g, key);
    a->next = *head;
    *head = a;
    g->naddr++;
    return a;
}

/* Refills a's bucket at auth_failures_per_minute. */
static void refill(const struct eph_api_guard *g, struct addr_rec *a, uint64_t now_ms)
{
    uint64_t full = bucket_full(g);
    if (now_ms <= a->refilled_ms)
        return;
    uint64_t gained = (now_ms - a->refilled_ms) * g->lim.auth_failures_per_minute;
    a->tokens = gained >= full - a->tokens ? full : a->tokens + gained;
    a->refilled_ms = now_ms;
}

/* Drops a when nothing is left to remember of it: no connection, a full bucket. */
static void maybe_drop(struct eph_api_guard *g, struct addr_rec *a, uint64_t now_ms)
{
    if (a->conns)
        return;
    refill(g, a, now_ms);
    if (a->tokens < bucket_full(g))
        return;
    for (struct addr_rec **p = chain(g, a->key); *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            g->naddr--;
            free(a);
            return;
        }
}

static void reading_link(struct eph_api_guard *g, struct eph_api_guard_conn *c, uint64_t now_ms)
{
    struct addr_rec *a = c->addr;
    c->reading = true;
    c->since_ms = now_ms;
    c->gnext = NULL;
    c->gprev = g->rtail;
    if (g->rtail)
        g->rtail->gnext = c;
    else
        g->rhead = c;
    g->rtail = c;
    c->anext = NULL;
    c->aprev = a->rtail;
    if (a->rtail)
        a->rtail->anext = c;
    else
        a->rhead = c;
    a->rtail = c;
    g->reading++;
}

static void reading_unlink(struct eph_api_guard *g, struct eph_api_guard_conn *c)
{
    struct addr_rec *a = c->addr;
    if (!c->reading)
        return;
    c->reading = false;
    if (c->gprev)
        c->gprev->gnext = c->gnext;
    else
        g->rhead = c->gnext;
    if (c->gnext)
        c->gnext->gprev = c->gprev;
    else
        g->rtail = c->gprev;
    if (c->aprev)
        c->aprev->anext = c->anext;
    else
        a->rhead = c->anext;
    if (c->anext)
        c->anext->aprev = c->aprev;
    else
        a->rtail = c->aprev;
    c->gprev = c->gnext = c->aprev = c->anext = NULL;
    g->reading--;
}

/* Ends c: it no longer counts, and its entry waits for the close. */
static void give_up(struct eph_api_guard *g, struct eph_api_guard_conn *c, uint64_t now_ms)
{
    struct addr_rec *a = c->addr;
    reading_unlink(g, c);
    a->conns--;
    g->open--;
    c->addr = NULL;
    g->close_fn(c->fd, g->ctx);
    maybe_drop(g, a, now_ms);
}

struct eph_api_guard_conn *eph_api_guard_open(struct eph_api_guard *g, const struct sockaddr *addr,
                                              int fd, uint64_t now_ms)
{
    uint8_t key[16];
    address_key(addr, key);
    struct eph_api_guard_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_lock(&g->lock);
    struct addr_rec *a = find(g, key);
    /* The address's oldest reading connection makes room, then the server's. */
    if (a && a->conns >= g->lim.per_address) {
        if (!a->rhead)
            goto refuse;
        give_up(g, a->rhead, now_ms);
        a = find(g, key); /* it may have gone with its last connection */
    }
    if (g->open >= g->lim.max_connections) {
        if (!g->rhead)
            goto refuse;
        give_up(g, g->rhead, now_ms);
        a = find(g, key);
    }
    if (!a && !(a = add(g, key, now_ms)))
        goto refuse;
    c->addr = a;
    c->fd = fd;
    c->next = g->all;
    if (g->all)
        g->all->prev = c;
    g->all = c;
    a->conns++;
    g->open++;
    reading_link(g, c, now_ms);
    pthread_mutex_unlock(&g->lock);
    return c;
refuse:
    pthread_mutex_unlock(&g->lock);
    free(c);
    return NULL;
}

void eph_api_guard_busy(struct eph_api_guard *g, struct eph_api_guard_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->addr)
        reading_unlink(g, c);
    pthread_mutex_unlock(&g->lock);
}

void eph_api_guard_idle(struct eph_api_guard *g, struct eph_api_guard_conn *c, uint64_t now_ms)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->addr && !c->reading)
        reading_link(g, c, now_ms);
    pthread_mutex_unlock(&g->lock);
}

void eph_api_guard_close(struct eph_api_guard *g, struct eph_api_guard_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    struct addr_rec *a = c->addr;
    if (a) {
        reading_unlink(g, c);
        a->conns--;
        g->open--;
        maybe_drop(g, a, a->refilled_ms);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        g->all = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&g->lock);
    free(c);
}

uint64_t eph_api_guard_expire(struct eph_api_guard *g, uint64_t now_ms)
{
    pthread_mutex_lock(&g->lock);
    while (g->rhead && now_ms - g->rhead->since_ms >= g->lim.head_ms)
        give_up(g, g->rhead, now_ms);
    uint64_t next = g->rhead ? g->rhead->since_ms + g->lim.head_ms - now_ms : g->lim.head_ms;
    pthread_mutex_unlock(&g->lock);
    return next;
}

void eph_api_guard_counts(struct eph_api_guard *g, unsigned *open, unsigned *reading,
                          unsigned *addresses)
{
    pthread_mutex_lock(&g->lock);
    *open = g->open;
    *reading = g->reading;
    *addresses = g->naddr;
    pthread_mutex_unlock(&g->lock);
}

unsigned eph_api_guard_auth_wait(struct eph_api_guard *g, const struct sockaddr *addr,
                                 uint64_t now_ms)
{
    if (!g->lim.auth_failures_per_minute)
        return 0;
    uint8_t key[16];
    address_key(addr, key);
    unsigned wait = 0;
    pthread_mutex_lock(&g->lock);
    struct addr_rec *a = find(g, key);
    if (a) {
        refill(g, a, now_ms);
        if (a->tokens < UNIT) {
            /* The time for the missing units to come back, rounded up to seconds. */
            uint64_t per_ms = g->lim.auth_failures_per_minute;
            uint64_t ms = (UNIT - a->tokens + per_ms - 1) / per_ms;
            wait = (unsigned)((ms + 999) / 1000);
            if (!wait)
                wait = 1;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return wait;
}

/* Drops the addresses that only remember failures long refilled; true when one went. */
static bool sweep(struct eph_api_guard *g, uint64_t now_ms)
{
    unsigned before = g->naddr;
    for (unsigned i = 0; i < NBUCKETS; i++)
        for (struct addr_rec *a = g->table[i], *n; a; a = n) {
            n = a->next;
            maybe_drop(g, a, now_ms);
        }
    return g->naddr < before;
}

void eph_api_guard_auth_failed(struct eph_api_guard *g, const struct sockaddr *addr,
                               uint64_t now_ms)
{
    if (!g->lim.auth_failures_per_minute)
        return;
    uint8_t key[16];
    address_key(addr, key);
    pthread_mutex_lock(&g->lock);
    struct addr_rec *a = find(g, key);
    /* An address with no connection here (a failure counted after its close) is remembered
     * while there is room: the table never grows past the connections and AUTH_ONLY_MAX. */
    if (!a && (g->naddr < g->open + AUTH_ONLY_MAX || sweep(g, now_ms)))
        a = add(g, key, now_ms);
    if (a) {
        refill(g, a, now_ms);
        a->tokens = a->tokens >= UNIT ? a->tokens - UNIT : 0;
    }
    pthread_mutex_unlock(&g->lock);
}
