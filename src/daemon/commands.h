/*
 * commands.h - the subcommands of ephemerald. Each takes the arguments after its name (argv[0] is
 * the subcommand's name) and returns the process exit status.
 */
#ifndef EPH_COMMANDS_H
#define EPH_COMMANDS_H

#include <stddef.h>

int eph_cmd_serve(int argc, char **argv);
int eph_cmd_admin(int argc, char **argv);
int eph_cmd_image(int argc, char **argv);
/* ephemerald sandbox run [--backend B] [--memory-mib N] [--pids N] [--timeout S] [--json] -- CMD */
int eph_cmd_sandbox(int argc, char **argv);

/* Path of the ephemeral-init binary: $EPHEMERAL_INIT, else beside /proc/self/exe. Returns a static
 * buffer. */
const char *eph_default_init_path(void);
/* Default image directory: $EPHEMERAL_IMAGE, else "var/images/default". */
const char *eph_default_image_path(void);

/* The cache key of the image recipe on this host (16 hex digits and a NUL): `image build` keeps
 * the image it builds under images/KEY/rootfs of the cache, with the key in images/KEY/complete.
 * 0, or a negative errno with a reason in why. */
int eph_image_recipe_hash(char hash[17], char *why, size_t whylen);

#endif
