/*
 * webhooks.h - signed webhooks (docs/WEBHOOKS.md): the rule an endpoint's URL must pass, the
 * event a run's settlement queues, the signature, and the senders that deliver what is due.
 *
 * A settlement queues its event in the store, in the settlement's own transaction
 * (eph_webhook_event_make, then store run_finish); the senders, threads of their own, claim due
 * deliveries from the store, send each to an address that passed the SSRF rule (pinned, so that
 * curl connects nowhere else), and record the outcome of every attempt. A run's settlement never
 * waits for a delivery.
 */
#ifndef EPH_RUN_WEBHOOKS_H
#define EPH_RUN_WEBHOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "broker/addr.h"
#include "broker/guard.h"
#include "common/config.h"
#include "store/store.h"

struct eph_service;

/* The longest endpoint URL accepted. */
#define EPH_WEBHOOK_URL_MAX 2048
/* "whsec_" and 48 hex digits (24 random bytes), with its NUL. */
#define EPH_WEBHOOK_SECRET_LEN 55
/* t=<digits>,v1=<64 hex> with its NUL. */
#define EPH_WEBHOOK_SIGNATURE_MAX 96

/* The event types a webhook may ask for: a run's terminal statuses, in that order, then
 * "sandbox.ended". NULL-ended. */
extern const char *const eph_webhook_event_types[];
bool eph_webhook_event_type_known(const char *type);

/* Whether url may be an endpoint, where it points now: 0 with the address curl is pinned to (out,
 * may be NULL); -EINVAL for a URL that is not http:// or https://, carries userinfo or is not a
 * valid URL, is longer than EPH_WEBHOOK_URL_MAX; -EACCES for an address that is not public and not
 * in webhooks.allow_private_cidrs; -EPERM for one of the server's own sockets (own, may be NULL);
 * -ENOENT when the host does not resolve. why says which, in a sentence for an API error. */
int eph_webhook_check_url(const struct eph_config *cfg, const struct eph_guard_own *own,
                          const char *url, struct eph_addr *out, char *why, size_t whylen)
    __attribute__((warn_unused_result));

/* A new secret, "whsec_" and 48 random hex digits, into out. */
void eph_webhook_secret_new(char out[EPH_WEBHOOK_SECRET_LEN]);

/* The Ephemeral-Signature header's value for body sent at unix time t: "t=T,v1=HEX", HEX the
 * HMAC-SHA256 keyed with the secret's text of "T.BODY". */
void eph_webhook_sign(const char *secret, int64_t t, const char *body, size_t len,
                      char out[EPH_WEBHOOK_SIGNATURE_MAX]);

/* The event of a run that settles as r says (its status terminal): into ev (its id new, its type
 * the status's, or "sandbox.ended" for a sandbox, created now) and *body (malloc'd; ev->body
 * points to it), with run_object as its data (the API's form of the run or sandbox), without
 * prompt or result for a zero-data-retention run. 0, or -ENOMEM. */
int eph_webhook_event_make(json_t *run_object, const struct eph_run *r,
                           struct eph_webhook_event *ev, char **body)
    __attribute__((warn_unused_result));

/* The delay before retry number `attempts` (1: the first) of a delivery: base_ms doubled for each
 * attempt before it, at most an hour, and a random part of it taken off (jitter, up to a half)
 * so that the retries of many deliveries do not come at once. */
int64_t eph_webhook_retry_delay_ms(unsigned base_ms, unsigned attempts);

/* The senders: started after the store, stopped before it is closed. NULL when they cannot start
 * (logged). kick wakes them to look for due deliveries now (after a settlement). */
struct eph_webhooks;
struct eph_webhooks *eph_webhooks_start(struct eph_service *svc);
void eph_webhooks_kick(struct eph_webhooks *w);
void eph_webhooks_stop(struct eph_webhooks *w);

#endif
