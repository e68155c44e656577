/*
 * caps.c - capabilities and the last locks before exec.
 *
 * In its new user namespace the child holds every capability (of that namespace only). They go in
 * two steps: the bounding and ambient sets and the securebits while CAP_SETPCAP is still there,
 * then, once the child is worker, the permitted, effective and inheritable sets. Changing uid does
 * not clear them here (the old uid, host root, is not root of the new namespace), so the empty
 * capset is what does. no_new_privs makes sure no exec can give anything back (set-uid files,
 * file capabilities), and is what lets an unprivileged process load the seccomp filter.
 */
#include <errno.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

int eph_ns_caps_drop_bounding(void)
{
    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
            if (errno == EINVAL)
                break; /* past the last capability this kernel knows */
            return -errno;
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        return -errno;
    /* No root semantics for uid 0 and no way to raise ambient capabilities, locked, should anything
     * inside ever get to uid 0 of this namespace (it is not even mapped). */
    unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                         SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                         SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0)
        return -errno;
    return 0;
}

int eph_ns_caps_drop_all(void)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) != 0)
        return -errno;
    return 0;
}

int eph_ns_caps_lock(int parent_fd)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -errno;
    /* A session of its own: no controlling terminal, so no TIOCSTI into the server's tty, and no
     * job-control signals from it. */
    if (setsid() < 0)
        return -errno;
    /* Set last: any change of credentials clears it. It follows our parent thread: the one that
     * cloned us, or with the launcher's CLONE_PARENT the server's thread that forked it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
        return -errno;
    /* The parent may have died before the line above: then the sync socket has hung up. */
    struct pollfd pfd = {.fd = parent_fd, .events = 0};
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR)))
        return -ESRCH;
    return 0;
}
