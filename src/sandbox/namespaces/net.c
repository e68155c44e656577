/*
 * net.c - the network namespace: empty but for a loopback that is up.
 *
 * A fresh network namespace has only `lo`, down, and no route anywhere: nothing outside is
 * reachable, the host's loopback included (it is another namespace's), and there is no DNS
 * server to ask. Bringing `lo` up lets programs talk to themselves (a test server and its
 * client). The broker's tunnel, when a run has web access, will arrive through the guest
 * protocol, not through a network device.
 */
#include <errno.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/namespaces/namespaces.h"

int eph_ns_net_setup(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    int rc = 0;
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
        rc = -errno;
    } else {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)
            rc = -errno;
    }
    close(fd);
    return rc;
}
