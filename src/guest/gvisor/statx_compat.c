/*
 * statx_compat.c - ephemeral-gvisor-compat.so, preloaded into every dynamically linked program of
 * a gvisor sandbox (through /etc/ld.so.preload, which only that backend fills in).
 *
 * The Sentry of the runsc that Debian 12 ships (0.0~20221219) refuses AT_NO_AUTOMOUNT in statx(2)
 * and fstatat(2) with EINVAL, and coreutils 9 passes it on every stat: `ls -l`, `stat`, `cp -a`...
 * all fail with "Invalid argument". The flag only stops the kernel from triggering an automount,
 * and nothing in a sandbox is ever automounted, so dropping it changes no result. glibc's own
 * statx falls back to fstatat with the same flag, so both entry points are wrapped.
 *
 * This is not a security boundary (a program can always make the system call itself); it is a
 * compatibility shim, built unsanitized and without the daemon's objects, and it must stay tiny.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf);
int fstatat(int dirfd, const char *path, struct stat *buf, int flags);
int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags);

__attribute__((visibility("default"))) int statx(int dirfd, const char *path, int flags,
                                                 unsigned int mask, struct statx *buf)
{
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}

__attribute__((visibility("default"))) int fstatat(int dirfd, const char *path, struct stat *buf,
                                                   int flags)
{
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}

/* On 64-bit Linux struct stat and struct stat64 are one layout, and both are newfstatat's. */
__attribute__((visibility("default"))) int fstatat64(int dirfd, const char *path,
                                                     struct stat64 *buf, int flags)
{
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}
