/*
 * config.h - reading the server's configuration (the struct is common/config.h): built-in defaults,
 * then the JSON config file, then the environment (EPHEMERALD_*), then flags — later sources win.
 * Defaults work with no file at all: SQLite under var/, the auto-chosen sandbox, the replay model
 * over examples/.
 */
#ifndef EPH_CONFIG_H
#define EPH_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

/* Fills cfg with the defaults. */
int eph_config_defaults(struct eph_config *cfg);
/* Merges a JSON config file; unknown keys are an error (typos must not pass silently). */
int eph_config_load_file(struct eph_config *cfg, const char *path, char *err, size_t errlen);
/* The same from len bytes in memory; name stands for the file in messages (the fuzz driver). */
int eph_config_load_buffer(struct eph_config *cfg, const char *data, size_t len, const char *name,
                           char *err, size_t errlen);
/* Merges EPHEMERALD_LISTEN, _DB, _SANDBOX, _LOG_FORMAT, _MAX_CONCURRENT_RUNS, ... */
int eph_config_load_env(struct eph_config *cfg, char *err, size_t errlen);
void eph_config_release(struct eph_config *cfg);
/* With no "models" in the configuration file: adds the real models of each provider whose key
 * variable (OPENAI_API_KEY, ANTHROPIC_API_KEY) is set, beside the replay model, and logs each
 * (key_models.c). 0 or -ENOMEM. */
int eph_config_add_key_models(struct eph_config *cfg) __attribute__((warn_unused_result));
/* Replaces a string field (copies value). */
int eph_config_set(char **field, const char *value);

#endif
