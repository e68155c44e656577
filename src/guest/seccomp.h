/*
 * seccomp.h - the sandbox's system-call filter, the same in every backend.
 *
 * The policy is in src/guest/seccomp_gen.c, compiled to BPF when Ephemeral is built.
 * Loaded by the namespaces jail into each sandbox's first process, and by ephemeral-init itself
 * under gvisor and microvm (guest/harden.c): every command of every backend runs under it.
 * Linked into the daemon and into the static init; neither links libseccomp.
 */
#ifndef EPH_GUEST_SECCOMP_H
#define EPH_GUEST_SECCOMP_H

/* Loads the filter into the calling thread (and so into everything it starts). no_new_privs must
 * already be set (or the caller hold CAP_SYS_ADMIN). 0 or a negative errno. */
int eph_guest_seccomp_load(void);

#endif
