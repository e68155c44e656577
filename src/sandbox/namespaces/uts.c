/*
 * uts.c - the UTS namespace (hostname "sandbox") and, by its mere creation at clone(), the IPC
 * namespace: System V objects and POSIX message queues of the host and of other sandboxes are
 * out of reach, and the sandbox's own die with it.
 */
#include <errno.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

int eph_ns_uts_setup(void)
{
    static const char name[] = "sandbox";
    if (sethostname(name, sizeof(name) - 1) != 0)
        return -errno;
    if (setdomainname("(none)", 6) != 0)
        return -errno;
    return 0;
}
