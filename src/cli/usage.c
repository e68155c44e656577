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
    {"sandbox create",
     "ephemeral sandbox create [request.json|-] [--budget DOLLARS | --max-cost-micros N]\n"
     "              [--image NAME] [--timeout SECONDS] [--idle-timeout SECONDS]\n"
     "              [--web|--no-web] [--web-allow DOMAIN]... [--connection NAME]...\n"
     "              [--file LOCAL[:PATH]]... [--metadata KEY=VALUE]... [--zdr]\n"
     "              [--idempotency-key KEY] [--json]\n",
     "  request.json | -         the request body to start from (- reads standard input)\n"
     "  --budget DOLLARS         the hard budget, e.g. 0.05 (compute for its whole life, web)\n"
     "  --max-cost-micros N      the hard budget in micro-dollars\n"
     "  --image NAME             the image the sandbox runs (default: default)\n"
     "  --timeout SECONDS        its whole life, 1 to 86400 (default 300)\n"
     "  --idle-timeout SECONDS   ended after this long without a call, 1 to 86400 (default 300)\n"
     "  --web, --no-web          allow or forbid the web (default: off)\n"
     "  --web-allow DOMAIN       allow the web to DOMAIN only (*.example.com for subdomains)\n"
     "  --connection NAME        let the sandbox use the org's connection NAME\n"
     "  --file LOCAL[:PATH]      send LOCAL into the scratch directory as PATH\n"
     "  --metadata KEY=VALUE     a metadata pair of the sandbox (up to 16)\n"
     "  --zdr                    zero data retention: no command, output or file name is kept\n"
     "  --idempotency-key KEY    the request's idempotency key (default: a fresh one)\n"
     "  --json                   print the sandbox object (and errors) as JSON, not its id\n"},
    {"sandbox exec",
     "ephemeral sandbox exec SANDBOX_ID [--timeout SECONDS] [--cwd DIR] [--background]\n"
     "              (-- COMMAND [ARG]... | 'COMMAND STRING')\n",
     "  -- COMMAND [ARG]...      the words of one command, each quoted for /bin/sh\n"
     "  'COMMAND STRING'         one argument: a command line for /bin/sh -c\n"
     "  --timeout SECONDS        kill the command after this long (the server's limit at most)\n"
     "  --cwd DIR                run in DIR (relative to the scratch directory, or under /tmp)\n"
     "  --background             start it in the background and print its command id\n"},
    {"sandbox cp",
     "ephemeral sandbox cp LOCAL|- SANDBOX_ID:PATH\n"
     "       ephemeral sandbox cp SANDBOX_ID:PATH LOCAL|-\n",
     "  LOCAL                    a local file (downloading into a directory keeps the name)\n"
     "  -                        standard input (upload) or standard output (download)\n"
     "  SANDBOX_ID:PATH          relative to the scratch directory, or absolute under /tmp\n"},
    {"sandbox ls", "ephemeral sandbox ls SANDBOX_ID [DIR] [--json]\n",
     "  DIR                      a directory of the scratch directory (default: all of it)\n"
     "  --json                   the listing as the server sent it\n"},
    {"sandbox rm", "ephemeral sandbox rm SANDBOX_ID [--json]\n",
     "  --json                   the sandbox object the server answered\n"},
    {"sandbox list",
     "ephemeral sandbox list [--limit N] [--status S] [--after SANDBOX_ID]\n"
     "              [--metadata KEY=VALUE]... [--json]\n",
     "  --limit N                at most N sandboxes, 1 to 100 (default 20)\n"
     "  --status S               only sandboxes of status S (starting, ready, stopped,\n"
     "                           timed_out, budget_exhausted, failed)\n"
     "  --after SANDBOX_ID       the page after SANDBOX_ID (older sandboxes)\n"
     "  --metadata KEY=VALUE     only sandboxes whose metadata has KEY=VALUE (repeatable: all "
     "must match)\n"
     "  --json                   the list as the server sent it\n"},
    {"sandbox get", "ephemeral sandbox get SANDBOX_ID [--json]\n",
     "  --json                   the sandbox object as the server sent it\n"},
    {"sandbox watch", "ephemeral sandbox watch SANDBOX_ID\n", NULL},
};

static const char exit_status[] =
    "Exit status: 0 success (run, watch: the run completed); 1 the run ended otherwise;\n"
    "             2 usage error; 3 server unreachable; 4 request refused (4xx);\n"
    "             5 server error (5xx, or an answer that is not the API's).\n";
static const char sandbox_exit_status[] =
    "Sandboxes:   6 no such sandbox; 7 the sandbox has ended; 8 the sandbox is busy;\n"
    "             9 a path refused; 10 no such file; 11 a file too large.\n"
    "             sandbox exec: the command's own status once it ran (128+N: signal N).\n";

/* Whether usage entry i is shown for cmd: its own, or every sandbox one for "sandbox". */
static bool shown_for(const char *cmd, size_t i)
{
    if (strcmp(cmd, usages[i].cmd) == 0)
        return true;
    return strcmp(cmd, "sandbox") == 0 && strncmp(usages[i].cmd, "sandbox ", 8) == 0;
}

void eph_cli_usage(FILE *f, const char *cmd)
{
    bool any = false;
    for (size_t i = 0; i < sizeof(usages) / sizeof(usages[0]); i++) {
        if (cmd && !shown_for(cmd, i))
            continue;
        fputs(any ? "       " : "usage: ", f);
        fputs(usages[i].synopsis, f);
        if (cmd && usages[i].flags && strcmp(cmd, usages[i].cmd) == 0) {
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
    if (!cmd || strncmp(cmd, "sandbox", 7) == 0)
        fputs(sandbox_exit_status, f);
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

/* The id goes into a URL path: only the exact form is accepted, so nothing else can. */
static int check_id(const char *id, bool ok, const char *noun, const char *prefix)
{
    if (ok)
        return 0;
    fprintf(stderr, "ephemeral: not a %s id: '", noun);
    eph_cli_render_text(stderr, id, false, 80);
    fprintf(stderr, "' (expected %s and 32 lowercase hex digits)\n", prefix);
    return -EINVAL;
}

int eph_cli_check_run_id(const char *cmd, const char *id)
{
    (void)cmd;
    return check_id(id, eph_id_is_run(id), "run", "run_");
}

int eph_cli_check_sandbox_id(const char *id)
{
    return check_id(id, eph_id_is_sandbox(id), "sandbox", "sbx_");
}

const char *eph_cli_collection(const char *id)
{
    return eph_id_is_sandbox(id) ? "/v1/sandboxes" : "/v1/runs";
}
