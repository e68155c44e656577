/*
 * usage.c - the usage text of every command and the usage-error helpers the commands share.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "common/id.h"

static const struct {
    const char *cmd;
    const char *text;
} usages[] = {
    {"run",
     "ephemeral run [request.json|-] [--prompt TEXT] [--shell|--no-shell] [--web|--no-web]\n"
     "              [--timeout SECONDS] [--budget DOLLARS | --max-cost-micros N] [--model ID]\n"
     "              [--file LOCAL[:PATH]]... [--connection NAME]... [--web-allow DOMAIN]...\n"
     "              [--zdr]\n"
     "              [--idempotency-key KEY] [--replay-of RUN_ID] [--detach] [--json]\n"},
    {"get", "ephemeral get RUN_ID [--json]\n"},
    {"list", "ephemeral list [--limit N] [--status S] [--json]\n"},
    {"watch", "ephemeral watch RUN_ID\n"},
    {"replay", "ephemeral replay RUN_ID\n"},
    {"transcript", "ephemeral transcript RUN_ID > run.jsonl\n"},
    {"cancel", "ephemeral cancel RUN_ID\n"},
    {"balance", "ephemeral balance [--json]\n"},
};

void eph_cli_usage(FILE *f, const char *cmd)
{
    bool any = false;
    for (size_t i = 0; i < sizeof(usages) / sizeof(usages[0]); i++) {
        if (cmd && strcmp(cmd, usages[i].cmd) != 0)
            continue;
        fputs(any ? "       " : "usage: ", f);
        fputs(usages[i].text, f);
        any = true;
    }
    if (!cmd)
        fputs("\nEnvironment: EPHEMERAL_URL (default " EPH_CLI_DEFAULT_URL "), EPHEMERAL_API_KEY.\n"
              "Exit status: 0 completed, 1 the run ended otherwise, 2 usage or connection error.\n"
              "See ephemeral(1).\n",
              f);
}

int eph_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ephemeral: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    eph_cli_usage(stderr, cmd);
    return EPH_CLI_EXIT_ERROR;
}

int eph_cli_check_run_id(const char *cmd, const char *id)
{
    if (eph_id_is_run(id))
        return 0;
    /* The id goes into a URL path: only the exact form is accepted, so nothing else can. */
    fputs("ephemeral: not a run id: '", stderr);
    eph_cli_render_text(stderr, id, false, 80);
    fputs("' (expected run_ and 32 lowercase hex digits)\n", stderr);
    (void)cmd;
    return -EINVAL;
}
