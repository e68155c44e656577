/*
 * fileio.h - whole writes and copies on file descriptors, retried on EINTR and short writes.
 */
#ifndef EPH_FILEIO_H
#define EPH_FILEIO_H

#include <stddef.h>

/* Writes all len bytes. 0 or a negative errno (-EIO for a write that made no progress). */
int eph_fileio_write_all(int fd, const void *data, size_t len) __attribute__((warn_unused_result));
/* Copies everything from in (to its end) to out. Closes neither. 0 or a negative errno. */
int eph_fileio_copy_fd(int in, int out) __attribute__((warn_unused_result));

#endif
