#include "cli/render.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/money.h"

#define C_RESET "\033[0m"
#define C_DIM "\033[2m"
#define C_BOLD "\033[1m"
#define C_RED "\033[1;31m"
#define C_GREEN "\033[1;32m"
#define C_YELLOW "\033[33m"
#define C_BLUE "\033[34m"
#define C_MAGENTA "\033[35m"
#define C_CYAN "\033[36m"

void eph_cli_render_init(struct eph_cli_render *r, FILE *out, bool color)
{
    memset(r, 0, sizeof(*r));
    r->out = out;
    r->color = color;
    r->last_seq = -1;
}

bool eph_cli_color_wanted(FILE *out)
{
    const char *nc = getenv("NO_COLOR");
    if (nc && *nc)
        return false;
    return isatty(fileno(out)) == 1;
}

/* Length of the UTF-8 sequence at s (at most n bytes) and its code point; 0 when invalid, so the
 * caller escapes the byte. Overlong forms and surrogates are invalid. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len;
    uint32_t c;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    } else if ((s[0] & 0xE0) == 0xC0) {
        len = 2;
        c = s[0] & 0x1F;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3;
        c = s[0] & 0x0F;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4;
        c = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

/* Code points a terminal acts on rather than shows: C1 controls, line and paragraph separators,
 * and the bidi embeddings and isolates that can make text read differently from what it is. */
static bool dangerous_cp(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E ||
           cp == 0x200F || cp == 0xFEFF;
}

void eph_cli_render_text(FILE *out, const char *s, bool multiline, size_t max_bytes)
{
    if (!s)
        return;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    size_t i = 0;
    while (i < n) {
        uint32_t cp = 0;
        size_t len = utf8_decode(p + i, n - i, &cp);
        if (max_bytes && i + (len ? len : 1) > max_bytes) {
            fputs("…", out);
            return;
        }
        if (len == 0) {
            fprintf(out, "\\x%02x", p[i]);
            i++;
            continue;
        }
        if (cp == '\n')
            fputs(multiline ? "\n" : "\\n", out);
        else if (cp == '\t')
            fputc(multiline ? '\t' : ' ', out);
        else if (cp == '\r')
            fputs("\\r", out);
        else if (cp < 0x20 || cp == 0x7F)
            fprintf(out, "\\x%02x", (unsigned)cp);
        else if (dangerous_cp(cp))
            fprintf(out, "\\u%04x", (unsigned)cp);
        else
            fwrite(p + i, 1, len, out);
        i += len;
    }
}

static const char *json_str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s;
}

static bool str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static bool has_prefix(const char *s, const char *prefix)
{
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static const struct {
    const char *status;
    const char *label;
} status_labels[] = {
    {"queued", "Queued"},
    {"starting", "Starting"},
    {"running", "Running"},
    {"completed", "Completed"},
    {"failed", "Failed"},
    {"timed_out", "Timed out"},
    {"budget_exhausted", "Budget exhausted"},
    {"cancelled", "Cancelled"},
    /* A sandbox's own (docs/SANDBOXES.md). */
    {"ready", "Ready"},
    {"stopped", "Stopped"},
};

const char *eph_cli_status_label(const char *status)
{
    for (size_t i = 0; status && i < sizeof(status_labels) / sizeof(status_labels[0]); i++)
        if (strcmp(status, status_labels[i].status) == 0)
            return status_labels[i].label;
    return NULL;
}

int eph_cli_status_exit(const char *status)
{
    if (str_eq(status, "completed") || str_eq(status, "stopped"))
        return 0;
    if (str_eq(status, "failed") || str_eq(status, "timed_out") ||
        str_eq(status, "budget_exhausted") || str_eq(status, "cancelled"))
        return 1;
    return -EAGAIN;
}

/* "MicroVM", "gVisor" or "Sandbox": the event's data.backend, or, from a server that does not
 * send it, how its message names the backend. */
static const char *sandbox_label(const char *backend, const char *message)
{
    if (backend)
        return str_eq(backend, "microvm")  ? "MicroVM"
               : str_eq(backend, "gvisor") ? "gVisor"
                                           : "Sandbox";
    if (message && strcasestr(message, "microvm"))
        return "MicroVM";
    if (message && strcasestr(message, "gvisor"))
        return "gVisor";
    return "Sandbox";
}

/* An unknown source, shown as a word: letters, digits and spaces only, first letter capital. */
static void word_label(const char *s, char out[EPH_CLI_LABEL_MAX])
{
    size_t o = 0;
    for (; s && *s && o < 16; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c)) {
            out[o] = (char)(o == 0 ? toupper(c) : c);
            o++;
        } else if ((c == '_' || c == '.' || c == '-' || c == ' ') && o > 0 && out[o - 1] != ' ')
            out[o++] = ' ';
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    if (o == 0) {
        strcpy(out, "Event");
        return;
    }
    out[o] = '\0';
}

const char *eph_cli_render_label(struct eph_cli_render *r, const char *source, const char *type,
                                 const char *backend, const char *message,
                                 char out[EPH_CLI_LABEL_MAX])
{
    const char *label = NULL;
    if (str_eq(type, "run.queued") || str_eq(source, "queue")) {
        label = "Queued";
    } else if (has_prefix(type, "run.")) {
        const char *status = type + 4;
        label = eph_cli_status_label(status);
        if (!label) {
            word_label(status, out);
            return out;
        }
    } else if (str_eq(type, "worker.destroyed")) {
        label = "Worker destroyed";
    } else if (has_prefix(type, "sandbox.") && eph_cli_status_exit(type + 8) >= 0) {
        label = eph_cli_status_label(type + 8); /* a sandbox's end: "Stopped", "Timed out" */
    } else if (str_eq(source, "sandbox") || has_prefix(type, "sandbox.")) {
        label = sandbox_label(backend, message);
        if (r)
            snprintf(r->sandbox_label, sizeof(r->sandbox_label), "%s", label);
    } else if (str_eq(type, "worker.started")) {
        /* The product page shows the worker starting under the sandbox's name ("MicroVM  worker
         * started · shell on · web off"): it is the sandbox's first sign of life. */
        label = r && r->sandbox_label[0] ? r->sandbox_label : "Worker";
    } else if (str_eq(source, "worker")) {
        label = "Worker";
    } else if (str_eq(source, "model")) {
        label = "Model";
    } else if (str_eq(source, "shell")) {
        label = "Shell";
    } else if (str_eq(source, "web")) {
        label = "Web";
    } else if (str_eq(source, "connection")) {
        label = "Connection";
    } else {
        word_label(source ? source : type, out);
        return out;
    }
    snprintf(out, EPH_CLI_LABEL_MAX, "%s", label);
    return out;
}

static const char *label_color(const char *type, const char *source)
{
    if (str_eq(type, "run.completed"))
        return C_GREEN;
    if (has_prefix(type, "run.") && !str_eq(type, "run.queued"))
        return C_RED;
    if (str_eq(source, "shell"))
        return C_CYAN;
    if (str_eq(source, "model"))
        return C_MAGENTA;
    if (str_eq(source, "web") || str_eq(source, "connection"))
        return C_YELLOW;
    return C_BLUE;
}

/* One line of a command's live output, under the command: past the time and label columns,
 * after a bar, stderr in red. */
static void live_line(struct eph_cli_render *r, int stream, const char *line)
{
    FILE *f = r->out;
    if (r->color)
        fprintf(f, "%27s" C_DIM "│" C_RESET " %s", "", stream ? C_RED : "");
    else
        fprintf(f, "%27s│ ", "");
    eph_cli_render_text(f, line, false, EPH_CLI_LIVE_LINE_MAX + 4);
    fputs(r->color ? C_RESET "\n" : "\n", f);
}

/* Shows what each stream holds of a line not ended yet (before another event). */
static void live_flush(struct eph_cli_render *r)
{
    for (int s = 0; s < 2; s++) {
        if (!r->live_len[s])
            continue;
        r->live[s][r->live_len[s]] = '\0';
        live_line(r, s, r->live[s]);
        r->live_len[s] = 0;
    }
}

/* A shell.output event: its text, line by line, the last unended line held for its end. */
static void live_output(struct eph_cli_render *r, const json_t *data)
{
    const char *text = json_str(data, "text");
    int s = str_eq(json_str(data, "stream"), "stderr") ? 1 : 0;
    for (const char *p = text ? text : ""; *p; p++) {
        if (*p != '\n')
            r->live[s][r->live_len[s]++] = *p;
        if (*p == '\n' || r->live_len[s] == EPH_CLI_LIVE_LINE_MAX) {
            r->live[s][r->live_len[s]] = '\0';
            live_line(r, s, r->live[s]);
            r->live_len[s] = 0;
        }
    }
    fflush(r->out);
}

int eph_cli_render_event(struct eph_cli_render *r, const json_t *ev)
{
    if (!json_is_object(ev))
        return -EPROTO;
    json_t *seq = json_object_get(ev, "seq");
    if (json_is_integer(seq)) {
        json_int_t s = json_integer_value(seq);
        if (s <= r->last_seq)
            return 0; /* already shown: a resumed stream or an overlapping page */
        r->last_seq = s;
    }
    const char *source = json_str(ev, "source");
    const char *type = json_str(ev, "type");
    const char *message = json_str(ev, "message");
    if (str_eq(type, "shell.output")) {
        live_output(r, json_object_get(ev, "data"));
        r->printed++;
        return 0;
    }
    live_flush(r);
    const char *backend = json_str(json_object_get(ev, "data"), "backend");
    char label[EPH_CLI_LABEL_MAX];
    eph_cli_render_label(r, source, type, backend, message, label);

    char tbuf[32];
    json_t *t = json_object_get(ev, "t");
    double tv = json_number_value(t);
    if (json_is_number(t) && isfinite(tv) && tv >= 0 && tv < 1e9)
        snprintf(tbuf, sizeof(tbuf), "%7.2f", tv);
    else
        snprintf(tbuf, sizeof(tbuf), "%7s", "?");

    FILE *f = r->out;
    if (r->color)
        fprintf(f, C_DIM "%s" C_RESET "  %s%-16s" C_RESET "  ", tbuf, label_color(type, source),
                label);
    else
        fprintf(f, "%s  %-16s  ", tbuf, label);
    if (message)
        eph_cli_render_text(f, message, false, EPH_CLI_MESSAGE_MAX);
    else if (type)
        eph_cli_render_text(f, type, false, 200);
    fputc('\n', f);
    fflush(f);
    r->printed++;
    if (str_eq(type, "worker.destroyed"))
        r->final_seen = true;
    return 0;
}

int eph_cli_render_event_json(struct eph_cli_render *r, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *ev = json_loadb(text, len, 0, &jerr);
    if (!ev)
        return -EPROTO;
    int rc = eph_cli_render_event(r, ev);
    json_decref(ev);
    return rc;
}

/* The integer at obj.key, or -1 when it is missing or not an integer. */
static int64_t cost_field(const json_t *cost, const char *key)
{
    json_t *v = json_object_get(cost, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

int eph_cli_render_cost_line(const json_t *run, char *out, size_t outlen)
{
    json_t *cost = json_object_get(run, "cost");
    if (!json_is_object(cost))
        return -ENOENT;
    int64_t model = cost_field(cost, "model_micros");
    int64_t web = cost_field(cost, "web_micros");
    int64_t compute = cost_field(cost, "compute_micros");
    if (model < 0 && web < 0 && compute < 0)
        return -ENOENT;
    /* Shown so that they add up to the charge shown (common/money.h). */
    int64_t parts[3] = {model < 0 ? 0 : model, web < 0 ? 0 : web, compute < 0 ? 0 : compute};
    int64_t shown[3];
    eph_money_split(parts, 3, shown);
    char m[EPH_MONEY_FMT_MAX], w[EPH_MONEY_FMT_MAX], c[EPH_MONEY_FMT_MAX];
    if (model < 0) /* a sandbox: no model of ours */
        snprintf(out, outlen, "Web %s · Compute %s", eph_money_format(shown[1], w),
                 eph_money_format(shown[2], c));
    else
        snprintf(out, outlen, "Model %s · Web %s · Compute %s", eph_money_format(shown[0], m),
                 eph_money_format(shown[1], w), eph_money_format(shown[2], c));
    return 0;
}

void eph_cli_render_header(struct eph_cli_render *r, const json_t *run)
{
    const char *id = json_str(run, "id");
    const char *model = json_str(run, "model");
    FILE *f = r->out;
    if (r->color)
        fputs(C_BOLD, f);
    eph_cli_render_text(f, id ? id : "run", false, 64);
    if (r->color)
        fputs(C_RESET, f);
    if (model) {
        fputs(" · ", f);
        eph_cli_render_text(f, model, false, 200);
    }
    fputs("\n\n", f);
    fflush(f);
}

void eph_cli_render_result(struct eph_cli_render *r, const json_t *run)
{
    FILE *f = r->out;
    const char *result = json_str(run, "result");
    json_t *error = json_object_get(run, "error");
    fputc('\n', f);
    if (result && *result) {
        eph_cli_render_text(f, result, true, 0);
        if (result[strlen(result) - 1] != '\n')
            fputc('\n', f);
        fputc('\n', f);
    }
    if (json_is_object(error)) {
        const char *label = eph_cli_status_label(json_str(run, "status"));
        const char *msg = json_str(error, "message");
        const char *code = json_str(error, "code");
        if (r->color)
            fputs(C_RED, f);
        fputs(label ? label : "Error", f);
        if (r->color)
            fputs(C_RESET, f);
        fputs(": ", f);
        eph_cli_render_text(f, msg ? msg : code ? code : "no reason given", false, 1000);
        if (msg && code) {
            fputs(" (", f);
            eph_cli_render_text(f, code, false, 64);
            fputc(')', f);
        }
        fputs("\n\n", f);
    }
    char line[256];
    if (eph_cli_render_cost_line(run, line, sizeof(line)) == 0)
        fprintf(f, "%s\n", line);
    fflush(f);
}

int eph_cli_time_parse(const char *iso, int64_t *ms)
{
    if (!iso)
        return -EINVAL;
    int y, mo, d, h, mi, s, n = 0;
    if (sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &n) != 6 || n != 19)
        return -EINVAL;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 || y < 1970)
        return -EINVAL;
    const char *p = iso + n;
    int frac = 0;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3)
                frac = frac * 10 + (*p - '0');
        if (digits == 0)
            return -EINVAL;
        for (int k = digits; k < 3; k++)
            frac *= 10;
    }
    if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)
        return -EINVAL;
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = s};
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -EINVAL;
    *ms = (int64_t)t * 1000 + frac;
    return 0;
}

char *eph_cli_format_duration(int64_t ms, char *out, size_t outlen)
{
    if (ms < 0)
        ms = 0;
    if (ms < 1000)
        snprintf(out, outlen, "%lld ms", (long long)ms);
    else if (ms < 60000)
        snprintf(out, outlen, "%lld.%02lld s", (long long)(ms / 1000),
                 (long long)((ms % 1000) / 10));
    else if (ms < 3600000)
        snprintf(out, outlen, "%lld min %02lld s", (long long)(ms / 60000),
                 (long long)((ms / 1000) % 60));
    else
        snprintf(out, outlen, "%lld h %02lld min", (long long)(ms / 3600000),
                 (long long)((ms / 60000) % 60));
    return out;
}

char *eph_cli_render_cost_bar(int64_t charged, int64_t reserved, int cells, char *out,
                              size_t outlen)
{
    if (cells < 1)
        cells = 1;
    if (cells > 100)
        cells = 100;
    int filled = 0;
    if (reserved > 0 && charged > 0) {
        /* Rounded up in integers, and no more than full whatever a broken answer says. */
        if (charged >= reserved)
            filled = cells;
        else
            filled = (int)(((__int128)charged * cells + reserved - 1) / reserved);
    }
    size_t o = 0;
    out[0] = '\0';
    if (outlen < 3 + (size_t)cells * 3)
        return out;
    out[o++] = '[';
    for (int i = 0; i < cells; i++) {
        const char *c = i < filled ? "█" : "░";
        memcpy(out + o, c, 3);
        o += 3;
    }
    out[o++] = ']';
    out[o] = '\0';
    return out;
}
