/*
 * cache.c - where images are kept, and running a program to its end: the part of the image
 * module that `ephemeral-sandbox` and `image build` link too (no store, no JSON). See image.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "image/image.h"

const char *eph_image_cache_root(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("EPHEMERAL_CACHE_DIR");
    if (env && *env)
        return env;
    if (geteuid() == 0)
        return "/var/cache/ephemeral";
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(path, sizeof(path), "%s/ephemeral", xdg);
    else
        snprintf(path, sizeof(path), "%s/.cache/ephemeral", home ? home : "/tmp");
    return path;
}

int eph_image_run(char *const argv[])
{
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "image-error: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    if (EPH_RETRY_EINTR(waitpid(pid, &status, 0)) < 0)
        return -errno;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}
