/*
 * harden.c - the init hardens itself and its commands. See harden.h.
 *
 * Order: the supplementary groups and the bounding set first (they need CAP_SETGID and
 * CAP_SETPCAP), then the uids (which clear the effective set), then every remaining set emptied.
 * Last, no_new_privs and the filter, which the commands inherit: the filter allows what a
 * command's process still does between fork and exec (setresuid to worker, dup2, chdir, execve).
 * Nothing here reaches past the process: in a microVM, vm.c sets the guest kernel's sysctls before.
 */
#include "guest/harden.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guest/seccomp.h"

#define WORKER_ID 1000

static bool keeper;

bool eph_guest_harden_keeper(void)
{
    return keeper;
}

static int caps_empty(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) != 0)
        return -errno;
    /* Check it: a kernel that took the call and kept a capability is not one to serve on. */
    if (syscall(SYS_capget, &hdr, data) != 0)
        return -errno;
    for (int i = 0; i < 2; i++)
        if (data[i].effective || data[i].permitted || data[i].inheritable)
            return -EPERM;
    return 0;
}

static int become_keeper(const char **what)
{
    if (geteuid() != 0) {
        *what = "the keeper must start as root";
        return -EPERM;
    }
    gid_t worker = WORKER_ID;
    if (setgroups(1, &worker) != 0) {
        *what = "cannot set the groups";
        return -errno;
    }
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
            continue;
        if (errno == EINVAL)
            break; /* past the last capability this kernel knows */
        *what = "cannot empty the capability bounding set";
        return -errno;
    }
    /* A kernel without ambient capabilities has none to clear. */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
        *what = "cannot clear the ambient capabilities";
        return -errno;
    }
    if (setresgid(0, WORKER_ID, 0) != 0 || setresuid(0, WORKER_ID, 0) != 0) {
        *what = "cannot become the keeper (real and saved uid 0, effective 1000)";
        return -errno;
    }
    uid_t r, e, s;
    if (getresuid(&r, &e, &s) != 0 || r != 0 || e != WORKER_ID || s != 0) {
        *what = "the uids are not the keeper's";
        return -EPERM;
    }
    int rc = caps_empty();
    if (rc) {
        *what = "cannot empty the capability sets";
        return rc;
    }
    keeper = true;
    return 0;
}

int eph_guest_harden(const char **what)
{
    *what = "";
    int rc = become_keeper(what);
    if (rc)
        return rc;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        *what = "cannot set no_new_privs";
        return -errno;
    }
    rc = eph_guest_seccomp_load();
    if (rc)
        *what = "cannot load the seccomp filter";
    return rc;
}

int eph_guest_harden_child(void)
{
    if (!keeper)
        return 0;
    /* 1000 is the effective id already: dropping the real and saved 0 needs no capability. */
    if (setresgid(WORKER_ID, WORKER_ID, WORKER_ID) != 0 ||
        setresuid(WORKER_ID, WORKER_ID, WORKER_ID) != 0)
        return -errno;
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) != 0 || getresgid(&rg, &eg, &sg) != 0 || r != WORKER_ID ||
        e != WORKER_ID || s != WORKER_ID || rg != WORKER_ID || eg != WORKER_ID || sg != WORKER_ID)
        return -EPERM;
    return 0;
}
