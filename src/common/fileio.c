#include "common/fileio.h"

#include <errno.h>
#include <unistd.h>

#include "common/cleanup.h"

int eph_fileio_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t w = EPH_RETRY_EINTR(write(fd, p, len));
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int eph_fileio_copy_fd(int in, int out)
{
    char buf[65536];
    for (;;) {
        ssize_t n = EPH_RETRY_EINTR(read(in, buf, sizeof(buf)));
        if (n <= 0)
            return n < 0 ? -errno : 0;
        int rc = eph_fileio_write_all(out, buf, (size_t)n);
        if (rc)
            return rc;
    }
}
