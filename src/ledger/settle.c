#include "ledger/settle.h"

/* What of want fits in *left; takes it from *left. */
static int64_t take(int64_t *left, int64_t want, bool *capped)
{
    if (want < 0)
        want = 0;
    if (want > *left) {
        *capped = true;
        want = *left;
    }
    *left -= want;
    return want;
}

void eph_ledger_split(int64_t reserved, int64_t model, int64_t web, int64_t compute,
                      struct eph_settlement *out)
{
    int64_t left = reserved < 0 ? 0 : reserved;
    *out = (struct eph_settlement){0};
    out->model = take(&left, model, &out->capped);
    out->web = take(&left, web, &out->capped);
    out->compute = take(&left, compute, &out->capped);
    out->charged = out->model + out->web + out->compute;
    out->released = left;
}
