/*
 * run_row.h - the runs table's columns and their mapping to struct eph_run, once for both stores
 * (run_row.c). A store selects EPH_RUN_COLUMNS and hands each row to eph_run_from_row through its
 * own cursor; only the reading of one value is the store's.
 */
#ifndef EPH_RUN_ROW_H
#define EPH_RUN_ROW_H

#include <stddef.h>
#include <stdint.h>

#include "store/run_record.h"

/* In the order of enum eph_run_column (run_row.c); test_store_api checks that they agree. */
#define EPH_RUN_COLUMNS                                                                            \
    "id, org_id, status, model, prompt, files, connections, metadata, shell, web, zdr, "           \
    "timeout_seconds, created_at, started_at, finished_at, result, error_type, error_code, "       \
    "error_message, model_calls, input_tokens, output_tokens, shell_commands, web_requests, "      \
    "connection_requests, reserved_micros, model_micros, web_micros, compute_micros, "             \
    "charged_micros, released_micros, sandbox_backend, vcpus, memory_mib, log_expires_at, "        \
    "log_purged, node_id, lease_expires_at, web_allow, replay_of, divergences, model_attempts, "   \
    "image, image_digest, outputs, kind, idle_timeout_seconds"

/* One row of a store's result, read a column at a time. */
struct eph_row {
    const void *impl; /* the store's cursor */
    int row;          /* for stores whose results hold several rows */
    /* The column's text, NULL when it is NULL; valid until the next read of the row. */
    const char *(*text)(const struct eph_row *r, int col);
    /* The column as an integer, 0 when it is NULL. */
    int64_t (*i64)(const struct eph_row *r, int col);
};

/* Fills r (initialised here) from a row of SELECT EPH_RUN_COLUMNS: 0, or -ENOMEM when a text or
 * JSON field cannot be copied (r is then released: a run is read whole, never with a field missing
 * that a NULL column would mean). */
int eph_run_from_row(const struct eph_row *row, struct eph_run *r);
/* How many columns eph_run_from_row reads. */
size_t eph_run_column_count(void);

#endif
