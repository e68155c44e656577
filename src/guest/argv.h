/*
 * argv.h - a command that needs no shell, as the words /bin/sh would have made of it.
 *
 * Every command runs as `/bin/sh -c COMMAND`: one more exec per command, which a sandbox pays in
 * full (about half a millisecond on namespaces, ten under gVisor's ptrace platform). For a
 * command that is nothing but plain words - letters, digits and _ . / : @ % + , = - separated by
 * spaces or tabs, whose first word is neither a shell keyword nor a built-in, nor an assignment -
 * the shell would only split it on those blanks and exec the first word found in PATH: the init
 * does that itself (init.c). Anything else (a quote, a $, a glob, a redirection, a pipe, a ;, a
 * newline, a ~, a backslash, `cd`, `echo`, `x=1 y`) goes to the shell exactly as before, and so
 * does a command whose direct exec fails, so that a missing or unrunnable program is reported by
 * the shell in its own words.
 *
 * Pure code with no allocation, shared with the host's unit tests.
 */
#ifndef EPH_GUEST_ARGV_H
#define EPH_GUEST_ARGV_H

#include <stddef.h>

/* The most words a command split here may have; more goes to the shell. */
#define EPH_GUEST_ARGV_MAX 64

/* Splits command into argv[0..n) (NULL-terminated; argv has room for EPH_GUEST_ARGV_MAX + 1)
 * with the words copied into buf (buflen bytes): n >= 1, or 0 when the command needs the shell
 * (or does not fit buf). */
int eph_guest_argv_split(const char *command, char *buf, size_t buflen, char **argv);

#endif
