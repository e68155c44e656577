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

/* The default image's recipe, which every custom image starts from (src/daemon/images_cmd.c): the
 * host's release, its apt source files, the recipe key, mmdebstrap's options and hooks
 * (NULL-ended) and the packages. Release with eph_image_base_release(). */
struct eph_image_base {
    char key[17];
    char codename[64];
    char **sources;
    size_t nsources;
    const char *opts[24];
    const char *packages;
};
int eph_image_base_recipe(struct eph_image_base *b, char *why, size_t whylen);
void eph_image_base_release(struct eph_image_base *b);
/* `ephemerald image create|import|list|rm` and the build's own subcommands. */
int eph_cmd_images(int argc, char **argv);
/* This program's path (/proc/self/exe), for the builds it runs. */
const char *eph_self_exe(void);
/* The image service (src/image/service.h) for a configuration: its limits, the default recipe's
 * key, the server's state hidden from builds. */
struct eph_config;
struct eph_store;
struct eph_images;
int eph_images_for_config(const struct eph_config *cfg, struct eph_store *st,
                          struct eph_images **out, char *why, size_t whylen);

#endif
