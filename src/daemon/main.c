/*
 * ephemerald - the Ephemeral server and its administration commands.
 */
#include <stdio.h>
#include <string.h>

#include "daemon/commands.h"

static void usage(FILE *f)
{
    fputs(
        "usage: ephemerald serve [--listen ADDR:PORT] [--db PATH] [--sandbox B] [--config FILE]\n"
        "                        [--max-concurrent-runs N]\n"
        "       ephemerald admin init [--org NAME] [--credit-micros N]\n"
        "       ephemerald admin key create --org NAME [--role admin|member]\n"
        "       ephemerald admin credit --org NAME --micros N\n"
        "       ephemerald admin connection add --org NAME --name N --base-url URL\n"
        "                            --methods GET,POST [--path-prefix P]... [--header 'N: V']...\n"
        "                            [--query 'name=value']...\n"
        "       ephemerald sandbox run [--backend B] [--memory-mib N] [--pids N] [--timeout S]\n"
        "                              [--json] -- COMMAND [ARG...]\n"
        "       ephemerald image build [--dir DIR]\n",
        f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0)
        return eph_cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "admin") == 0)
        return eph_cmd_admin(argc - 1, argv + 1);
    if (strcmp(cmd, "image") == 0)
        return eph_cmd_image(argc - 1, argv + 1);
    if (strcmp(cmd, "sandbox") == 0)
        return eph_cmd_sandbox(argc - 1, argv + 1);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "ephemerald: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
