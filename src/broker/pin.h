/*
 * pin.h - one resolution, everywhere: what the broker hands libcurl so that a request connects to
 * exactly the address the guard checked (docs/BROKER.md).
 *
 * The URL curl gets is rebuilt from the parsed parts, its host in the one spelling the guard
 * checked (lowercase, no trailing dot, a literal in its canonical form), so that curl's
 * CURLOPT_RESOLVE entry for that host always matches and curl never asks a resolver itself. And
 * curl's socket is opened by a callback that compares the address curl is about to connect to
 * with the checked one and refuses any other, whatever curl would have done.
 */
#ifndef EPH_BROKER_PIN_H
#define EPH_BROKER_PIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "broker/addr.h"
#include "broker/http.h"
#include "common/buf.h"

/* Appends "http[s]://host[:port]" to out: the host as eph_host_parse() gives it (an IPv6 literal
 * in brackets), the port only when it is not the scheme's default. 0 or the buffer's error. */
int eph_pin_origin(struct eph_buf *out, bool https, const struct eph_http_authority *auth)
    __attribute__((warn_unused_result));
/* Appends the whole URL of a parsed absolute URI: the origin as above, the path, "?" and the
 * query when there is one (no fragment). */
int eph_pin_url(struct eph_buf *out, const struct eph_http_url *u)
    __attribute__((warn_unused_result));

/* One request's pin. */
struct eph_pin {
    struct eph_addr addr; /* the address checked */
    uint16_t port;
    struct curl_slist *resolve;
    bool refused; /* curl tried to connect elsewhere (and was stopped) */
};

/* Pins host:port to addr on a curl handle: the CURLOPT_RESOLVE entry and the socket callback.
 * 0 or -ENOMEM; release with eph_pin_release after curl_easy_cleanup. */
int eph_pin_apply(struct eph_pin *p, CURL *h, const struct eph_http_authority *auth,
                  const struct eph_addr *addr) __attribute__((warn_unused_result));
void eph_pin_release(struct eph_pin *p);

/* The socket callback itself (CURLOPT_OPENSOCKETFUNCTION, clientp the pin), exposed for the
 * tests: a socket for the pinned address and port, CURL_SOCKET_BAD for any other. */
curl_socket_t eph_pin_open_socket(void *clientp, curlsocktype purpose,
                                  struct curl_sockaddr *address);

#endif
