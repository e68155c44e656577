/*
 * outputs.h - a run's outputs (docs/API.md, "Outputs"): the files its patterns name, collected
 * from the scratch directory through the guest protocol just before the sandbox is destroyed, so
 * that it is the same on every backend.
 *
 * The listing comes from list_files, which never follows a symlink; each file is then read with
 * read_file, which refuses one (a file swapped for a link between the two is skipped). Symlinks
 * are listed with their target and no content. At most max_files outputs and max_bytes bytes in
 * all; the rest are skipped with a reason. Everything is bounded: the listing's entries, the
 * skipped list, each read.
 */
#ifndef EPH_RUN_OUTPUTS_H
#define EPH_RUN_OUTPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "store/output_record.h"

struct eph_sandbox;

/* Entries asked of list_files, and skipped files named in the event (the rest are counted). */
#define EPH_OUTPUTS_LIST_MAX 10000u
#define EPH_OUTPUTS_SKIPPED_MAX 100u

struct eph_outputs_skip {
    char *path;
    uint64_t size;
    const char *reason; /* "max_files", "max_bytes", "changed", "read_error" */
};

struct eph_outputs_result {
    struct eph_outputs got; /* files (with content) and symlinks, by path */
    uint64_t bytes;
    struct eph_outputs_skip skipped[EPH_OUTPUTS_SKIPPED_MAX];
    size_t nskipped, skipped_total;
    bool listing_truncated; /* the scratch directory had more than the listing holds */
};

/* Collects the files of sb's scratch directory that match any of patterns (an array of strings,
 * each checked by eph_glob_pattern_error). 0 with res filled (release it), or a negative errno
 * when the listing could not be had (res is then empty). */
int eph_outputs_collect(struct eph_sandbox *sb, const json_t *patterns, unsigned max_files,
                        uint64_t max_bytes, struct eph_outputs_result *res)
    __attribute__((warn_unused_result));
void eph_outputs_result_release(struct eph_outputs_result *res);
/* The outputs.collected event's data: with_paths false (zero data retention) gives counts only. */
json_t *eph_outputs_event(const struct eph_outputs_result *res, bool with_paths);
/* A Content-Type for a path by its extension, from a fixed list of safe types; anything else
 * is application/octet-stream. */
const char *eph_outputs_content_type(const char *path);
/* Whether a browser may show a type inline (text and raster images; never HTML or SVG). */
bool eph_outputs_inline_type(const char *content_type);

#endif
