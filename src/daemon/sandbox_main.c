/*
 * ephemeral-sandbox - `ephemerald sandbox` as a program of its own.
 *
 * The same command, options and output as `ephemerald sandbox run` (sandbox_cmd.c), linked
 * statically (static-pie) with only what a sandbox needs (the sandbox backends, common/, jansson,
 * libsodium): no libcurl and its TLS, LDAP, SSH and HTTP/2 libraries, no libmicrohttpd, no SQLite,
 * and no dynamic loader at all. The loader binding those 39 libraries is ~6 ms of CPU before main()
 * (bench/PROFILE.md 1.2). Full RELRO (-z relro -z now) like every other binary.
 */
#include <stdio.h>
#include <string.h>

#include "common/version.h"
#include "daemon/commands.h"

int main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
        puts("ephemeral-sandbox " EPH_VERSION);
        return 0;
    }
    return eph_cmd_sandbox(argc, argv);
}
