/*
 * outputs.c - `ephemeral outputs RUN_ID [--dir DIR]`: a run's outputs (docs/API.md, "Outputs")
 * listed, and with --dir written under DIR.
 *
 * The paths come from the server, which had them from a sandbox: each is checked again (relative,
 * no "..", no empty component) and written component by component under DIR with openat and
 * O_NOFOLLOW, a new file with O_EXCL, so that nothing the list says can reach outside DIR, follow
 * a symlink there, or overwrite a file. A symlink output is listed, never made.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/http.h"
#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/text.h"

/* Opens path (checked) for writing under the directory dfd, making its parents; -errno. */
static int create_beneath(int dfd, const char *path)
{
    char buf[EPH_TEXT_PATH_MAX + 1];
    snprintf(buf, sizeof(buf), "%s", path);
    EPH_AUTOCLOSE int cur = dup(dfd);
    if (cur < 0)
        return -errno;
    char *p = buf;
    for (char *slash; (slash = strchr(p, '/')) != NULL; p = slash + 1) {
        *slash = '\0';
        if (mkdirat(cur, p, 0755) != 0 && errno != EEXIST)
            return -errno;
        int next = openat(cur, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            return -errno;
        close(cur);
        cur = next;
    }
    int fd = openat(cur, p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd < 0 ? -errno : fd;
}

/* GETs one output's bytes and writes them to a new file under dfd. */
static int download(struct eph_cli_http *h, const char *id, const char *path, int dfd)
{
    char esc[3 * EPH_TEXT_PATH_MAX + 1], url[sizeof(esc) + 96];
    /* Each byte but '/' and the unreserved ones percent-encoded, so the server sees the path
     * (checked: it fits). */
    if (eph_cli_http_escape_path(path, esc, sizeof(esc)))
        return -EMSGSIZE;
    snprintf(url, sizeof(url), "/v1/runs/%s/outputs/%s", id, esc);
    struct eph_cli_request rq = {.method = "GET", .path = url};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_do(h, &rq, &resp);
    if (rc || resp.status != 200) {
        eph_cli_http_report(h, &resp, rc);
        eph_cli_response_release(&resp);
        return rc ? rc : -EPROTO;
    }
    int fd = create_beneath(dfd, path);
    if (fd < 0) {
        fprintf(stderr, "ephemeral: cannot write '%.200s': %s\n", path, strerror(-fd));
        eph_cli_response_release(&resp);
        return fd;
    }
    rc = eph_fileio_write_all(fd, resp.body.data, resp.body.len);
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (rc)
        fprintf(stderr, "ephemeral: cannot write '%.200s': %s\n", path, strerror(-rc));
    eph_cli_response_release(&resp);
    return rc;
}

int eph_cli_outputs_fetch(struct eph_cli_http *h, const char *id, const char *dir)
{
    EPH_AUTOCLOSE int dfd = -1;
    if (dir && (dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        fprintf(stderr, "ephemeral: cannot open the directory '%.200s': %s\n", dir,
                strerror(errno));
        return EPH_CLI_EXIT_USAGE;
    }
    char path[96];
    snprintf(path, sizeof(path), "/v1/runs/%s/outputs", id);
    struct eph_cli_request rq = {.method = "GET", .path = path};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int code = EPH_CLI_EXIT_OK;
    int rc = eph_cli_http_do(h, &rq, &resp);
    json_t *data = rc == 0 && resp.status == 200 ? json_object_get(resp.json, "data") : NULL;
    if (rc || resp.status != 200) {
        eph_cli_http_report(h, &resp, rc);
        code = eph_cli_http_exit(h);
    } else if (!json_is_array(data)) {
        eph_cli_http_bad_answer(h, "json");
        code = eph_cli_http_exit(h);
    }
    size_t i;
    json_t *o;
    json_array_foreach(code == EPH_CLI_EXIT_OK ? data : NULL, i, o)
    {
        const char *p = json_string_value(json_object_get(o, "path"));
        const char *type = json_string_value(json_object_get(o, "type"));
        const char *why = p ? eph_text_file_path_error(p, strlen(p)) : "no path";
        if (why || !type) {
            /* Shown escaped: the text came from the sandbox. */
            fprintf(stderr, "ephemeral: skipped an output whose path is unsafe (%s)\n",
                    why ? why : "no type");
            code = EPH_CLI_EXIT_SERVER;
            continue;
        }
        char *shown = eph_text_utf8_sanitize(p, strlen(p));
        if (strcmp(type, "symlink") == 0) {
            printf("%s  symlink (not followed, not written)\n", shown ? shown : "?");
        } else {
            printf("%s  %lld bytes\n", shown ? shown : "?",
                   (long long)json_integer_value(json_object_get(o, "size")));
            if (dfd >= 0 && download(h, id, p, dfd) != 0)
                code = EPH_CLI_EXIT_SERVER;
        }
        free(shown);
    }
    eph_cli_response_release(&resp);
    return code;
}

int eph_cli_outputs(int argc, char **argv)
{
    const char *id = NULL, *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            eph_cli_usage(stdout, argv[0]);
            return EPH_CLI_EXIT_OK;
        } else if (strcmp(a, "--dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strncmp(a, "--dir=", 6) == 0) {
            dir = a + 6;
        } else if (a[0] == '-') {
            return eph_cli_usage_error(argv[0], "unknown option '%.100s'", a);
        } else if (!id) {
            id = a;
        } else {
            return eph_cli_usage_error(argv[0], "unexpected argument '%.200s'", a);
        }
    }
    if (!id)
        return eph_cli_usage_error(argv[0], "a run id is required");
    if (eph_cli_check_run_id(argv[0], id))
        return EPH_CLI_EXIT_USAGE;
    if (dir && !*dir)
        return eph_cli_usage_error(argv[0], "--dir must not be empty");
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    int code = eph_cli_outputs_fetch(&h, id, dir);
    eph_cli_http_release(&h);
    return code;
}
