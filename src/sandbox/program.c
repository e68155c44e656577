/*
 * program.c - finding a backend's host program on $PATH (program.h).
 */
#include "sandbox/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void eph_sandbox_find_program(const char *env_var, const char *name, char *out, size_t outlen)
{
    out[0] = '\0';
    const char *env = getenv(env_var);
    if (env && env[0] == '/') {
        if (access(env, X_OK) == 0)
            snprintf(out, outlen, "%s", env);
        return;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = &EPH_SANDBOX_SPAWN_PATH[5];
    size_t namelen = strlen(name);
    while (*path) {
        size_t n = strcspn(path, ":");
        /* Only absolute directories: a relative one would depend on the server's cwd. */
        if (n > 0 && path[0] == '/' && n + 1 + namelen < outlen) {
            char cand[4096];
            if (n + 1 + namelen < sizeof(cand)) {
                memcpy(cand, path, n);
                snprintf(cand + n, sizeof(cand) - n, "/%s", name);
                struct stat st;
                if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
                    snprintf(out, outlen, "%s", cand);
                    return;
                }
            }
        }
        path += n;
        if (*path == ':')
            path++;
    }
}
