/*
 * pin.c - the URL and the pin handed to libcurl. See pin.h.
 */
#include "broker/pin.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"

int eph_pin_origin(struct eph_buf *out, bool https, const struct eph_http_authority *auth)
{
    bool v6 = auth->host.literal && auth->host.addr.family == AF_INET6;
    int r = eph_buf_appendf(out, v6 ? "%s://[%s]" : "%s://%s", https ? "https" : "http",
                            auth->host.name);
    if (!r && auth->port != (https ? 443 : 80))
        r = eph_buf_appendf(out, ":%u", auth->port);
    return r;
}

int eph_pin_url(struct eph_buf *out, const struct eph_http_url *u)
{
    int r = eph_pin_origin(out, u->https, &u->auth);
    if (!r)
        r = eph_buf_append(out, u->path, u->path_len);
    if (!r && u->query)
        r = eph_buf_appendf(out, "?%.*s", (int)u->query_len, u->query);
    return r;
}

int eph_pin_apply(struct eph_pin *p, CURL *h, const struct eph_http_authority *auth,
                  const struct eph_addr *addr)
{
    memset(p, 0, sizeof(*p));
    p->addr = *addr;
    p->port = auth->port;
    if (!auth->host.literal) {
        /* The host as eph_pin_origin wrote it into the URL, so the entry always matches. A
         * literal needs none: curl connects to it as it is. */
        char line[EPH_HOST_NAME_MAX + EPH_ADDR_STRLEN + 16], astr[EPH_ADDR_STRLEN];
        eph_addr_format(addr, astr);
        int n = snprintf(line, sizeof(line), addr->family == AF_INET6 ? "%s:%u:[%s]" : "%s:%u:%s",
                         auth->host.name, auth->port, astr);
        if (n < 0 || (size_t)n >= sizeof(line))
            return -ENOMEM;
        p->resolve = curl_slist_append(NULL, line);
        if (!p->resolve)
            return -ENOMEM;
    }
    if (p->resolve)
        curl_easy_setopt(h, CURLOPT_RESOLVE, p->resolve);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, eph_pin_open_socket);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, p);
    return 0;
}

void eph_pin_release(struct eph_pin *p)
{
    curl_slist_free_all(p->resolve);
    p->resolve = NULL;
}

curl_socket_t eph_pin_open_socket(void *clientp, curlsocktype purpose,
                                  struct curl_sockaddr *address)
{
    struct eph_pin *p = clientp;
    struct eph_addr a;
    const struct sockaddr *sa = &address->addr;
    uint16_t port = 0;
    bool ok = purpose == CURLSOCKTYPE_IPCXN && eph_addr_from_sockaddr(sa, &a) == 0;
    if (ok)
        port = sa->sa_family == AF_INET
                   ? ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port)
                   : ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
    ok = ok && port == p->port && a.family == p->addr.family &&
         memcmp(a.bytes, p->addr.bytes, a.family == AF_INET ? 4 : 16) == 0;
    if (!ok) {
        p->refused = true;
        EPH_WARN("broker", "curl tried to connect to an address the guard did not check: refused");
        return CURL_SOCKET_BAD;
    }
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}
