/*
 * seccomp.c - loading the system-call filter into a sandbox. See seccomp.h.
 *
 * The policy is in src/guest/seccomp_gen.c, compiled to BPF when Ephemeral is built
 * (the generated header below): a sandbox start does not compile it, and no Ephemeral program
 * links libseccomp. The merged program (the denylist and the allowlist as one) is loaded with one
 * system call; a kernel that refuses it (EINVAL) is given the two programs as libseccomp built
 * them, which the kernel combines to the same answers.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guest/seccomp.h"
#include "seccomp_bpf.h" /* generated: $(OBJ)/gen/seccomp_bpf.h */

#define LEN(a) ((unsigned short)(sizeof(a) / sizeof((a)[0])))

_Static_assert(sizeof(eph_ns_seccomp_merged) / sizeof(eph_ns_seccomp_merged[0]) <= BPF_MAXINSNS,
               "the seccomp program is longer than the kernel accepts");

int eph_guest_seccomp_load(void)
{
    /* The kernel copies the program and does not write to it. */
    struct sock_fprog merged = {LEN(eph_ns_seccomp_merged),
                                (struct sock_filter *)eph_ns_seccomp_merged};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &merged) == 0)
        return 0;
    if (errno != EINVAL)
        return -errno;
    const struct sock_fprog two[2] = {
        {LEN(eph_ns_seccomp_allow), (struct sock_filter *)eph_ns_seccomp_allow},
        {LEN(eph_ns_seccomp_deny), (struct sock_filter *)eph_ns_seccomp_deny},
    };
    for (int i = 0; i < 2; i++)
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &two[i]) != 0)
            return -errno;
    return 0;
}
