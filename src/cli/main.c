/*
 * ephemeral - the command-line client of the Ephemeral API. See cli.h and docs/CLI.md.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"run", eph_cli_run},         {"get", eph_cli_get},
    {"list", eph_cli_list},       {"watch", eph_cli_watch},
    {"replay", eph_cli_replay},   {"cancel", eph_cli_cancel},
    {"balance", eph_cli_balance}, {"transcript", eph_cli_transcript},
    {"outputs", eph_cli_outputs}, {"sandbox", eph_cli_sandbox},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        eph_cli_usage(stderr, NULL);
        return EPH_CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        /* "ephemeral help run" is "ephemeral run --help". */
        eph_cli_usage(stdout, argc > 2 && strcmp(cmd, "help") == 0 ? argv[2] : NULL);
        return EPH_CLI_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
        puts(EPH_CLI_VERSION_LINE);
        return EPH_CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(cmd, commands[i].name) != 0)
            continue;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            fputs("ephemeral: cannot initialise libcurl\n", stderr);
            return EPH_CLI_EXIT_USAGE;
        }
        int code = commands[i].fn(argc - 1, argv + 1);
        curl_global_cleanup();
        /* A closed stdout (a full disk, a pipe gone) means the output was lost. */
        if (fflush(stdout) != 0 || ferror(stdout)) {
            fputs("ephemeral: cannot write the output\n", stderr);
            return EPH_CLI_EXIT_USAGE;
        }
        return code;
    }
    fprintf(stderr, "ephemeral: unknown command '%.100s'\n", cmd);
    eph_cli_usage(stderr, NULL);
    return EPH_CLI_EXIT_USAGE;
}
