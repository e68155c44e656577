/*
 * output_record.h - the files a run brought back from its scratch directory (docs/API.md,
 * "Outputs"), as the store keeps them and the worker and the API hand them around. Plain data.
 */
#ifndef EPH_OUTPUT_RECORD_H
#define EPH_OUTPUT_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct eph_output {
    char *path;             /* relative to the scratch directory, checked (guest/protocol.h) */
    char type[8];           /* "file" or "symlink" */
    uint64_t size;          /* a file's bytes; 0 for a symlink */
    char sha256[65];        /* lowercase hex of the content; "" for a symlink */
    char *content_type;     /* a file's (outputs_type.h); NULL for a symlink */
    char *target;           /* a symlink's target, never followed; NULL for a file */
    unsigned char *content; /* a file's bytes when loaded; NULL in a listing and for a symlink */
    size_t len;
};

struct eph_outputs {
    struct eph_output *v;
    size_t n;
};

void eph_output_release(struct eph_output *o);
void eph_outputs_release(struct eph_outputs *o);
/* Appends a copy of the metadata of o (and its content when with_content). 0 or -ENOMEM. */
int eph_outputs_add(struct eph_outputs *all, const struct eph_output *o, bool with_content)
    __attribute__((warn_unused_result));

#endif
