/*
 * usage.c - the usage text of every command and the usage-error helpers the commands share.
 *
 * `ephemeral --help` prints every command's synopsis; `ephemeral CMD --help` (and `ephemeral help
 * CMD`) prints one command's synopsis and a line for each of its flags. docs/CLI.md is the long
 * form; a test checks that every flag the parsers accept is listed here.
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
    const char *synopsis;
    const char *flags; /* one "  --flag  what" line each, or NULL */
} usages[] = {
    {"run",
     "ephemeral run [request.json|-] [--prompt TEXT] [--shell|--no-shell] [--web|--no-web]\n"
     "              [--web-allow DOMAIN]... [--timeout SECONDS]\n"
     "              [--budget DOLLARS | --max-cost-micros N] [--model ID] [--image NAME]\n"
     "              [--file LOCAL[:PATH]]... [--connection NAME]... [--metadata KEY=VALUE]...\n"
     "              [--output PATTERN]... [--download DIR] [--zdr] [--idempotency-key KEY]\n"
     "              [--replay-of RUN_ID] [--detach] [--json]\n",
     "  request.json | -         the request body to start from (- reads standard input)\n"
     "  --prompt TEXT            the task\n"
     "  --shell, --no-shell      allow or forbid shell commands (default: on)\n"
     "  --web, --no-web          allow or forbid the web (default: off)\n"
     "  --web-allow DOMAIN       allow the web to DOMAIN only (*.example.com for subdomains)\n"
     "  --timeout SECONDS        the run's time limit, 1 to 3600\n"
     "  --budget DOLLARS         the hard budget, e.g. 0.04\n"
     "  --max-cost-micros N      the hard budget in micro-dollars\n"
     "  --model ID               a model the server offers (default: its default model)\n"
     "  --image NAME             the image the sandbox runs (default: default)\n"
     "  --file LOCAL[:PATH]      send LOCAL into the scratch directory as PATH\n"
     "  --connection NAME        let the run use the org's connection NAME\n"
     "  --metadata KEY=VALUE     a metadata pair of the run (up to 16)\n"
     "  --output PATTERN         bring back the files PATTERN names (*, ?, **; up to 32), then\n"
     "                           GET /v1/runs/ID/outputs lists them\n"
     "  --download DIR           once the run ended, write its outputs under DIR\n"
     "  --zdr                    zero data retention: nothing of the run's content is kept\n"
     "  --idempotency-key KEY    the request's idempotency key (default: a fresh one)\n"
     "  --replay-of RUN_ID       re-execute a finished run from its record\n"
     "  --detach                 print the run id and return at once\n"
     "  --json                   print the final run object (and errors) as JSON\n"},
    {"get", "ephemeral get RUN_ID [--json]\n",
     "  --json                   the run object as the server sent it\n"},
    {"list",
     "ephemeral list [--limit N] [--status S] [--after RUN_ID] [--metadata KEY=VALUE]...\n"
     "               [--json]\n",
     "  --limit N                at most N runs, 1 to 100 (default 20)\n"
     "  --status S               only runs of status S\n"
     "  --after RUN_ID           the page after RUN_ID (older runs)\n"
     "  --metadata KEY=VALUE     only runs whose metadata has KEY=VALUE (repeatable: all must "
     "match)\n"
     "  --json                   the list as the server sent it\n"},
    {"watch", "ephemeral watch RUN_ID\n", NULL},
    {"replay", "ephemeral replay RUN_ID\n", NULL},
    {"transcript", "ephemeral transcript RUN_ID > run.jsonl\n", NULL},
    {"outputs", "ephemeral outputs RUN_ID [--dir DIR]\n",
     "  --dir DIR                write each output file under DIR (never outside it, never\n"
     "                           through a symlink, never over a file); symlinks are listed "
     "only\n"},
    {"cancel", "ephemeral cancel RUN_ID [--json]\n",
     "  --json                   the run object the server answered\n"},
    {"balance", "ephemeral balance [--json]\n",
     "  --json                   the balance object as the server sent it\n"},
};

static const char exit_status[] =
    "Exit status: 0 success (run, watch: the run completed); 1 the run ended otherwise;\n"
    "             2 usage error; 3 server unreachable; 4 request refused (4xx);\n"
    "             5 server error (5xx, or an answer that is not the API's).\n";

void eph_cli_usage(FILE *f, const char *cmd)
{
    bool any = false;
    for (size_t i = 0; i < sizeof(usages) / sizeof(usages[0]); i++) {
        if (cmd && strcmp(cmd, usages[i].cmd) != 0)
            continue;
        fputs(any ? "       " : "usage: ", f);
        fputs(usages[i].synopsis, f);
        if (cmd && usages[i].flags) {
            fputs("\n", f);
            fputs(usages[i].flags, f);
            fputs("  --help                   this text\n", f);
        }
        any = true;
    }
    if (!cmd || !any)
        fputs("       ephemeral --version\n"
              "\nEnvironment: EPHEMERAL_URL (default " EPH_CLI_DEFAULT_URL
              "), EPHEMERAL_API_KEY.\n",
              f);
    if (cmd && any)
        fputs("\n", f);
    fputs(exit_status, f);
    if (!cmd)
        fputs("`ephemeral CMD --help` lists a command's flags. See ephemeral(1).\n", f);
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
    return EPH_CLI_EXIT_USAGE;
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
