/*
 * options.h - the options every server command shares (--db, --config, ...) and how the
 * configuration is assembled from them: defaults, then the config file, then the environment, then
 * the flags.
 */
#ifndef EPH_OPTIONS_H
#define EPH_OPTIONS_H

#include "daemon/config.h"

/* Parses argv (after the subcommand's own words) into cfg. Options it does not know are left for
 * the caller: *rest gets their indexes in argv... kept simple: unknown options are an error
 * unless listed in extra (NULL-terminated; each takes a value) and then stored in extra_values. */
int eph_options_load(struct eph_config *cfg, int argc, char **argv, int first,
                     const char *const *extra, const char **extra_values);

/* Creates (0700) the directories that hold a SQLite database path; nothing for a postgres:// URL.
 */
void eph_options_ensure_db_dir(const char *db);

#endif
