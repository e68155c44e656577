/*
 * program.h - the host programs a backend runs (runsc, QEMU), found once and started with a
 * fixed environment (program.c).
 */
#ifndef EPH_SANDBOX_PROGRAM_H
#define EPH_SANDBOX_PROGRAM_H

#include <stddef.h>

/* The only environment a backend's host program gets: a fixed PATH, nothing of the server's. */
#define EPH_SANDBOX_SPAWN_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* The program to run: $env_var when it is an absolute path to an executable (the operator's
 * choice, taken as it is), else the first regular executable file called name in a directory of
 * $PATH (EPH_SANDBOX_SPAWN_PATH's when unset). out is "" when there is none. */
void eph_sandbox_find_program(const char *env_var, const char *name, char *out, size_t outlen);

#endif
