/*
 * meter.c - metering at the byte. See meter.h.
 */
#include "broker/meter.h"

#include <errno.h>

#define MIB 1048576u

void eph_meter_init(struct eph_meter *m, uint64_t per_request, uint64_t per_mib)
{
    *m = (struct eph_meter){.per_request = per_request, .per_mib = per_mib};
}

int64_t eph_meter_bytes_cost(uint64_t bytes, uint64_t per_mib)
{
    unsigned __int128 num = (unsigned __int128)bytes * per_mib + (MIB - 1);
    unsigned __int128 cost = num / MIB;
    return cost > INT64_MAX ? INT64_MAX : (int64_t)cost;
}

int eph_meter_start(struct eph_meter *m, struct eph_budget *b, uint64_t now_ns)
{
    if (m->started)
        return 0;
    /* Checked and charged as one step: another stream, or a model attempt, may spend at once. */
    if (m->per_request > INT64_MAX ||
        !eph_budget_charge_web_all(b, now_ns, (int64_t)m->per_request)) {
        m->exhausted = true;
        return -EDQUOT;
    }
    m->charged += (int64_t)m->per_request;
    m->started = true;
    return 0;
}

size_t eph_meter_take(struct eph_meter *m, struct eph_budget *b, uint64_t now_ns, size_t n)
{
    if (n == 0)
        return 0;
    int64_t paid = eph_meter_bytes_cost(m->bytes, m->per_mib);
    if (!m->per_mib) {
        m->bytes += n;
        return n;
    }
    /* What the budget has left may shrink between the look and the charge (other streams, model
     * attempts and compute spend at the same time), so the charge is all or nothing and, when it
     * is refused, the bytes are counted again against what is left then. Each refusal means some
     * other spending happened; a count whose cost adds nothing is always accepted. */
    for (;;) {
        /* The most bytes in all whose cost fits in what is paid plus what is left:
         * ceil(B * p / M) <= paid + left  <=>  B <= floor((paid + left) * M / p). */
        int64_t left = eph_budget_available(b, now_ns);
        unsigned __int128 most =
            ((unsigned __int128)(uint64_t)paid + (uint64_t)left) * MIB / m->per_mib;
        unsigned __int128 room = most > m->bytes ? most - m->bytes : 0;
        size_t k = room < n ? (size_t)room : n;
        int64_t delta = eph_meter_bytes_cost(m->bytes + k, m->per_mib) - paid;
        if (delta > 0 && !eph_budget_charge_web_all(b, now_ns, delta))
            continue;
        if (k < n)
            m->exhausted = true;
        m->bytes += k;
        if (delta > 0)
            m->charged += delta;
        return k;
    }
}
