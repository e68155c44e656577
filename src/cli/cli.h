/*
 * cli.h - the commands of `ephemeral`, the command-line client of the Ephemeral API.
 *
 * Each command takes its own argv (argv[0] is the command's name) and returns the process exit
 * status, unlike the rest of the code base, because that status is the command's interface
 * (docs/CLI.md, "Exit status"):
 *   0  success (for run and watch: the run completed)
 *   1  the run ended in another terminal status (failed, timed_out, budget_exhausted, cancelled)
 *   2  a usage error: nothing was sent
 *   3  the server could not be reached (or the connection to it was lost)
 *   4  the server refused the request (a 4xx answer)
 *   5  the server failed (a 5xx answer, or an answer that is not what the API sends)
 *   6  no such sandbox            9  a file path the sandbox refused
 *   7  the sandbox has ended     10  no such file in the sandbox
 *   8  the sandbox is busy       11  a file too large (upload or download)
 * `ephemeral sandbox exec` exits with the command's own status once it ran.
 * Errors are printed to stderr as "ephemeral: …", in lowercase, never with the API key.
 */
#ifndef EPH_CLI_CLI_H
#define EPH_CLI_CLI_H

#include "cli/http.h"
#include "common/version.h"

enum {
    EPH_CLI_EXIT_OK = 0,
    EPH_CLI_EXIT_RUN_FAILED = 1,
    EPH_CLI_EXIT_USAGE = 2,
    EPH_CLI_EXIT_UNREACHABLE = 3,
    EPH_CLI_EXIT_REFUSED = 4,
    EPH_CLI_EXIT_SERVER = 5,
    EPH_CLI_EXIT_NO_SANDBOX = 6,
    EPH_CLI_EXIT_SANDBOX_ENDED = 7,
    EPH_CLI_EXIT_SANDBOX_BUSY = 8,
    EPH_CLI_EXIT_BAD_PATH = 9,
    EPH_CLI_EXIT_NO_FILE = 10,
    EPH_CLI_EXIT_TOO_LARGE = 11,
};

/* The client's version, printed by `ephemeral --version`. */
#define EPH_CLI_VERSION_LINE "ephemeral " EPH_VERSION

int eph_cli_run(int argc, char **argv);
int eph_cli_watch(int argc, char **argv);
int eph_cli_replay(int argc, char **argv);
int eph_cli_transcript(int argc, char **argv);
int eph_cli_outputs(int argc, char **argv);
struct eph_cli_http;
/* Lists run id's outputs and, with dir, writes them under it (outputs.c); an exit status. */
int eph_cli_outputs_fetch(struct eph_cli_http *h, const char *id, const char *dir);
int eph_cli_get(int argc, char **argv);
int eph_cli_list(int argc, char **argv);
int eph_cli_cancel(int argc, char **argv);
int eph_cli_balance(int argc, char **argv);

/* Shared by the commands (run.c, runs.c). */

/* Prints "ephemeral: MSG" and the command's usage line to stderr; returns EPH_CLI_EXIT_USAGE. */
int eph_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints the usage of one command (or all, cmd NULL) to f. */
void eph_cli_usage(FILE *f, const char *cmd);
/* Checks a run id given on the command line; prints a usage error when it is not one. */
int eph_cli_check_run_id(const char *cmd, const char *id);
/* The same for a sandbox id (sbx_ and 32 lowercase hex digits). */
int eph_cli_check_sandbox_id(const char *id);
/* The collection an id (checked) belongs to: "/v1/sandboxes" for sbx_…, else "/v1/runs". */
const char *eph_cli_collection(const char *id);
/* watch, get and list of runs, or (sandbox) of sandboxes: `ephemeral sandbox watch|get|list`
 * (run.c, runs.c). */
int eph_cli_watch_kind(int argc, char **argv, bool sandbox);
int eph_cli_get_kind(int argc, char **argv, bool sandbox);
int eph_cli_list_kind(int argc, char **argv, bool sandbox);
/* `ephemeral sandbox SUBCOMMAND …` (sandbox.c). */
int eph_cli_sandbox(int argc, char **argv);
/* GET /v1/runs/{id} with an optional Prefer: wait=N; 0 and the run object in *run (a new
 * reference), or a negative errno / positive HTTP status with the error reported on stderr. */
int eph_cli_fetch_run(struct eph_cli_http *h, const char *id, int wait_s, json_t **run);
struct eph_cli_run_opts;
/* `run` and `sandbox create` (sandbox): the arguments into o and the request body, then the POST
 * that creates it on a client of its own, with an Idempotency-Key (--idempotency-key, or a fresh
 * one, so that the one retry after a transport failure cannot create a second) and, wait_s > 0,
 * Prefer: wait=N. 0 with *id (in resp->json): o, h and resp are the caller's to release. -1 with
 * *code the exit status (--help, a usage error, a refusal: reported), everything released. */
int eph_cli_start(int argc, char **argv, bool sandbox, int wait_s, struct eph_cli_run_opts *o,
                  struct eph_cli_http *h, struct eph_cli_response *resp, const char **id,
                  int *code);
/* One request whose 200 or 202 answer is a JSON object, on a client of its own: printed as JSON
 * (--json, errors too) or by show. The exit status. */
int eph_cli_object_call(const char *method, const char *path, bool json,
                        void (*show)(const json_t *o, const char *id), const char *id);
/* Prints "ID STATUS" (cancel, sandbox rm). */
void eph_cli_show_status(const json_t *o, const char *id);
/* The value of "--name VALUE" or "--name=VALUE" at argv[*i] (moving *i past it), or NULL when
 * argv[*i] is not --name; sets *missing when --name has no value. */
const char *eph_cli_opt_value(int argc, char **argv, int *i, const char *name, bool *missing);
/* Prints j as pretty JSON on stdout (--json), flushed. */
void eph_cli_print_json(const json_t *j);
/* Sleeps ms milliseconds (restarting after signals). */
void eph_cli_sleep_ms(long ms);

#endif
