/*
 * cleanup.h - locals that release what they hold when they go out of scope, and a retry on EINTR.
 *
 *     EPH_AUTOCLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);   closed on every return
 *     EPH_AUTOFREE char *text = NULL;                            free()d on every return
 *     EPH_AUTOJSON json_t *doc = json_object();                  json_decref()ed on every return
 *
 * A function that hands what it holds on to its caller steals it first, so that the cleanup finds
 * nothing left to release: return eph_steal_fd(&fd); *out = eph_steal_ptr(&text). The cleanup runs
 * in reverse order of declaration, after the return value is computed, and keeps errno as it was.
 * Only locals initialised where they are declared may carry these attributes (a goto or an early
 * return must never skip the initialisation). Header only, so the static guest agent can use it.
 */
#ifndef EPH_CLEANUP_H
#define EPH_CLEANUP_H

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

static inline void eph_cleanup_fd_(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}

static inline void eph_cleanup_free_(void *p)
{
    int saved = errno;
    free(*(void **)p);
    errno = saved;
}

static inline void eph_cleanup_json_(json_t **j)
{
    int saved = errno;
    json_decref(*j);
    errno = saved;
}

#define EPH_AUTOCLOSE __attribute__((cleanup(eph_cleanup_fd_)))
#define EPH_AUTOFREE __attribute__((cleanup(eph_cleanup_free_)))
#define EPH_AUTOJSON __attribute__((cleanup(eph_cleanup_json_)))

/* Takes the descriptor out of *fd (leaving -1 there) and returns it. */
static inline int eph_steal_fd(int *fd)
{
    int f = *fd;
    *fd = -1;
    return f;
}

static inline void *eph_steal_ptr_(void **pp)
{
    void *p = *pp;
    *pp = NULL;
    return p;
}
/* Takes the pointer out of *pp (leaving NULL there) and returns it, with its type. */
#define eph_steal_ptr(pp) ((__typeof__(*(pp)))eph_steal_ptr_((void **)(pp)))

/* Evaluates expr (a system call returning -1 and setting errno on failure) again while it fails
 * with EINTR; the value is expr's last result. */
#define EPH_RETRY_EINTR(expr)                                                                      \
    __extension__({                                                                                \
        __typeof__(expr) eph_retry_rc_;                                                            \
        do                                                                                         \
            eph_retry_rc_ = (expr);                                                                \
        while (eph_retry_rc_ == -1 && errno == EINTR);                                             \
        eph_retry_rc_;                                                                             \
    })

#endif
