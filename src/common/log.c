#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/text.h"

enum eph_log_level eph_log_min_level = EPH_LOG_INFO;
static bool log_json;
/* The request an API thread is serving, named in every line it logs (eph_log_set_request). */
static _Thread_local char log_request[40];

void eph_log_set_request(const char *request_id)
{
    snprintf(log_request, sizeof(log_request), "%s", request_id ? request_id : "");
}

int eph_log_configure(enum eph_log_level level, const char *format)
{
    if (format && strcmp(format, "json") == 0)
        log_json = true;
    else if (format && strcmp(format, "text") != 0)
        return -EINVAL;
    else
        log_json = false;
    eph_log_min_level = level;
    return 0;
}

int eph_log_level_parse(const char *s, enum eph_log_level *out)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i <= EPH_LOG_OFF; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum eph_log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* Writes s as the inside of a JSON string. */
static void json_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

void eph_log_write(enum eph_log_level level, const char *component, const char *func, int line,
                   int err, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    char msg[2048];
    char when[32];
    va_list ap;
    int saved = errno;

    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        snprintf(msg, sizeof(msg), "(unformattable message)");
    if (err) {
        size_t len = strlen(msg);
        snprintf(msg + len, sizeof(msg) - len, ": %s", strerror(err));
    }
    /* Where a warning or an error was logged: enough to find it, never data. */
    char where[96] = "";
    if (level >= EPH_LOG_WARN && func)
        eph_text_format_cut(where, sizeof(where), "%s:%d", func, line);
    eph_clock_format_iso8601(eph_clock_real_ms(), when, sizeof(when));

    flockfile(stderr);
    if (log_json) {
        fprintf(stderr, "{\"time\":\"%s\",\"level\":\"%s\",\"component\":\"", when, names[level]);
        json_escape(stderr, component);
        fputs("\",\"message\":\"", stderr);
        json_escape(stderr, msg);
        if (where[0]) {
            fputs("\",\"where\":\"", stderr);
            json_escape(stderr, where);
        }
        if (log_request[0]) {
            fputs("\",\"request_id\":\"", stderr);
            json_escape(stderr, log_request);
        }
        fputs("\"}\n", stderr);
    } else {
        fprintf(stderr, "%s %-5s %s: %s%s%s%s%s%s%s\n", when, names[level], component, msg,
                where[0] ? " (at " : "", where, where[0] ? ")" : "",
                log_request[0] ? " [request " : "", log_request, log_request[0] ? "]" : "");
    }
    funlockfile(stderr);
    errno = saved;
}
