/*
 * log.h - leveled logging to stderr, text or JSON lines.
 *
 * One line per message: time, level, component, message; warnings and errors also say where in the
 * code they were logged (function and line: " (at func:line)" in text, "where" in JSON). The level
 * macros do not evaluate their arguments below the configured level. EPH_PWARN and EPH_PERROR
 * append strerror(errno). Never pass a secret or a prompt to these functions: logs are kept and
 * shipped by operators.
 */
#ifndef EPH_LOG_H
#define EPH_LOG_H

#include <stdbool.h>

enum eph_log_level { EPH_LOG_DEBUG = 0, EPH_LOG_INFO, EPH_LOG_WARN, EPH_LOG_ERROR, EPH_LOG_OFF };

extern enum eph_log_level eph_log_min_level;

/* Sets the level and format ("text" or "json"). Returns 0 or -EINVAL for an unknown format. */
int eph_log_configure(enum eph_log_level level, const char *format);
int eph_log_level_parse(const char *s, enum eph_log_level *out);

/* Names the request this thread serves in every line it logs from now on (NULL or "": none).
 * Request ids are made by the server, never taken from a client, so they are safe to print. */
void eph_log_set_request(const char *request_id);

/* func and line name the caller (the macros pass __func__ and __LINE__); err, when not 0, is an
 * errno value whose text is appended. */
void eph_log_write(enum eph_log_level level, const char *component, const char *func, int line,
                   int err, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define EPH_LOG_(lvl, comp, err, ...)                                                              \
    do {                                                                                           \
        if ((lvl) >= eph_log_min_level)                                                            \
            eph_log_write((lvl), (comp), __func__, __LINE__, (err), __VA_ARGS__);                  \
    } while (0)

#define EPH_DEBUG(comp, ...) EPH_LOG_(EPH_LOG_DEBUG, comp, 0, __VA_ARGS__)
#define EPH_INFO(comp, ...) EPH_LOG_(EPH_LOG_INFO, comp, 0, __VA_ARGS__)
#define EPH_WARN(comp, ...) EPH_LOG_(EPH_LOG_WARN, comp, 0, __VA_ARGS__)
#define EPH_ERROR(comp, ...) EPH_LOG_(EPH_LOG_ERROR, comp, 0, __VA_ARGS__)
/* The same, appending ": <strerror(errno)>" (errno read before the arguments are evaluated). */
#define EPH_PWARN(comp, ...) EPH_LOG_(EPH_LOG_WARN, comp, errno, __VA_ARGS__)
#define EPH_PERROR(comp, ...) EPH_LOG_(EPH_LOG_ERROR, comp, errno, __VA_ARGS__)

/* A programmer error: logs where, then aborts. Never for bad input. */
#define EPH_BUG(...)                                                                               \
    do {                                                                                           \
        eph_log_write(EPH_LOG_ERROR, "bug", __func__, __LINE__, 0, __VA_ARGS__);                   \
        eph_log_write(EPH_LOG_ERROR, "bug", __func__, __LINE__, 0, "in %s", __FILE__);             \
        abort();                                                                                   \
    } while (0)

#endif
