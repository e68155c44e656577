/*
 * request.h - `ephemeral run`'s arguments, and the request body they make.
 *
 * The body starts as the request file (a path, or "-" for standard input) and each flag given
 * overrides its field. --file and --connection replace the file's files and connections when given
 * at all, so what the command line says is exactly what the run may use. Files are read from LOCAL
 * and sent as content_base64 under PATH (default: LOCAL's base name). Checks that need no server
 * (a prompt and a budget are present, numbers parse, paths stay relative) are done here so a
 * mistake is a usage error before anything is sent; the server checks everything again.
 */
#ifndef EPH_CLI_REQUEST_H
#define EPH_CLI_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The API's limits on files, checked before reading more than they allow. */
#define EPH_CLI_FILES_MAX 100
#define EPH_CLI_FILES_BYTES_MAX ((size_t)10 << 20)
#define EPH_CLI_IDEMPOTENCY_KEY_MAX 255
#define EPH_CLI_TIMEOUT_MAX 3600
#define EPH_CLI_SANDBOX_TIMEOUT_MAX 86400
#define EPH_CLI_METADATA_MAX 16
#define EPH_CLI_OUTPUTS_MAX 32

struct eph_cli_run_opts {
    bool sandbox;             /* `ephemeral sandbox create`: no prompt, an idle timeout */
    const char *request_path; /* NULL, "-" or a file */
    const char *prompt;
    int shell; /* -1 not given, 0, 1 */
    int web;
    long timeout_seconds;      /* -1 not given */
    long idle_timeout_seconds; /* --idle-timeout (a sandbox), -1 not given */
    int64_t max_cost_micros;   /* -1 not given */
    const char *model;
    const char *image;  /* --image NAME (docs/IMAGES.md) */
    const char **files; /* "LOCAL[:PATH]" strings from argv */
    size_t nfiles;
    const char **connections;
    size_t nconnections;
    const char **web_allow; /* --web-allow DOMAIN, in order: web limited to these */
    size_t nweb_allow;
    bool zdr;
    const char *replay_of; /* --replay-of RUN */
    const char *idempotency_key;
    bool detach;
    bool json;
    const char **metadata; /* --metadata KEY=VALUE strings from argv */
    size_t nmetadata;
    const char **outputs; /* --output PATTERN strings from argv: files to bring back */
    size_t noutputs;
    const char *download; /* --download DIR: write the outputs there once the run ended */
};

/* Parses argv (argv[0] is "run"; the strings must outlive o). 0, -EINVAL with a lowercase message
 * in err for a usage error, -ENOMEM. Release o with eph_cli_run_opts_release() either way. */
int eph_cli_run_parse(int argc, char **argv, struct eph_cli_run_opts *o, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void eph_cli_run_opts_release(struct eph_cli_run_opts *o);
/* The same for `ephemeral sandbox create` (argv[0] is "create"): the options of run that a
 * sandbox has (not --prompt, --shell, --model, --replay-of, --output, --download, --detach), a
 * time limit up to a day, and --idle-timeout. eph_cli_run_body() then needs no prompt. */
int eph_cli_sandbox_parse(int argc, char **argv, struct eph_cli_run_opts *o, char *err,
                          size_t errlen) __attribute__((warn_unused_result));

/* Builds the request body: *body is a new reference the caller decrefs. stdin_f is read for "-".
 * 0; -EINVAL (usage: missing prompt or budget, bad file path, not a JSON object), -ENOENT/-EACCES/
 * -EISDIR (a file cannot be read), -EMSGSIZE (a file or the request over its cap), -ENOMEM; err
 * says which. */
int eph_cli_run_body(const struct eph_cli_run_opts *o, FILE *stdin_f, json_t **body, char *err,
                     size_t errlen) __attribute__((warn_unused_result));

/* A fresh random idempotency key in the UUID version 4 form, into out[37]. 0 or a negative errno.
 */
int eph_cli_idempotency_key(char out[37]) __attribute__((warn_unused_result));

/* Opens a regular file for reading (a FIFO or a device would read forever or mean a mistake):
 * 0 with the stream and its size, -EISDIR, -EINVAL (not a regular file) or -errno. */
int eph_cli_open_regular(const char *path, FILE **out, off_t *size);

/* The PATH checks of --file: relative, no "..", no empty or NUL-holding name. */
bool eph_cli_file_path_ok(const char *path);

#endif
