/*
 * argv.c - a command that needs no shell, split as the shell would split it. See argv.h.
 */
#include "guest/argv.h"

#include <stdbool.h>
#include <string.h>

/* dash's keywords and built-ins (Debian's /bin/sh): a command starting with one of these means
 * what the shell makes of it, which a program of the same name (echo, printf, test, kill, pwd)
 * does not always match. */
static const char *const shell_words[] = {
    "!",       "{",        "}",        "case",   "do",    "done",    "elif",   "else",
    "esac",    "fi",       "for",      "if",     "in",    "then",    "until",  "while",
    ".",       ":",        "[",        "alias",  "bg",    "break",   "cd",     "chdir",
    "command", "continue", "echo",     "eval",   "exec",  "exit",    "export", "false",
    "fc",      "fg",       "getopts",  "hash",   "jobs",  "kill",    "local",  "printf",
    "pwd",     "read",     "readonly", "return", "set",   "shift",   "test",   "times",
    "trap",    "true",     "type",     "ulimit", "umask", "unalias", "unset",  "wait",
};

static bool plain(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_./:@%+,=-", c) != NULL;
}

int eph_guest_argv_split(const char *command, char *buf, size_t buflen, char **argv)
{
    size_t len = strlen(command);
    if (len + 1 > buflen)
        return 0;
    int n = 0;
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        if (command[i] == ' ' || command[i] == '\t') {
            i++;
            continue;
        }
        if (n == EPH_GUEST_ARGV_MAX)
            return 0;
        argv[n++] = buf + w;
        for (; i < len && command[i] != ' ' && command[i] != '\t'; i++) {
            if (command[i] == '\0' || !plain(command[i]))
                return 0;
            buf[w++] = command[i];
        }
        buf[w++] = '\0';
    }
    argv[n] = NULL;
    if (n == 0 || strchr(argv[0], '='))
        return 0; /* nothing to run, or an assignment */
    for (size_t i = 0; i < sizeof(shell_words) / sizeof(shell_words[0]); i++)
        if (strcmp(argv[0], shell_words[i]) == 0)
            return 0;
    return n;
}
