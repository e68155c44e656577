/*
 * cli.h - the commands of `ephemeral`, the command-line client of the Ephemeral API.
 *
 * Each command takes its own argv (argv[0] is the command's name) and returns the process exit
 * status, unlike the rest of the code base, because that status is the command's interface:
 *   0  success (for run and watch: the run completed)
 *   1  the run ended in another terminal status (failed, timed_out, budget_exhausted, cancelled)
 *   2  a usage error, or the server could not be reached or refused the request
 * Errors are printed to stderr as "ephemeral: …", in lowercase, never with the API key.
 */
#ifndef EPH_CLI_CLI_H
#define EPH_CLI_CLI_H

#include "cli/http.h"

enum {
    EPH_CLI_EXIT_OK = 0,
    EPH_CLI_EXIT_RUN_FAILED = 1,
    EPH_CLI_EXIT_ERROR = 2,
};

int eph_cli_run(int argc, char **argv);
int eph_cli_watch(int argc, char **argv);
int eph_cli_replay(int argc, char **argv);
int eph_cli_transcript(int argc, char **argv);
int eph_cli_get(int argc, char **argv);
int eph_cli_list(int argc, char **argv);
int eph_cli_cancel(int argc, char **argv);
int eph_cli_balance(int argc, char **argv);

/* Shared by the commands (run.c, runs.c). */

/* Prints "ephemeral: MSG" and the command's usage line to stderr; returns EPH_CLI_EXIT_ERROR. */
int eph_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints the usage of one command (or all, cmd NULL) to f. */
void eph_cli_usage(FILE *f, const char *cmd);
/* Checks a run id given on the command line; prints a usage error when it is not one. */
int eph_cli_check_run_id(const char *cmd, const char *id);
/* GET /v1/runs/{id} with an optional Prefer: wait=N; 0 and the run object in *run (a new
 * reference), or a negative errno / positive HTTP status with the error reported on stderr. */
int eph_cli_fetch_run(struct eph_cli_http *h, const char *id, int wait_s, json_t **run);
/* Sleeps ms milliseconds (restarting after signals). */
void eph_cli_sleep_ms(long ms);

#endif
