#include "common/config.h"

#include <string.h>

const struct eph_model_config *eph_config_model(const struct eph_config *cfg, const char *id)
{
    for (size_t i = 0; i < cfg->nmodels; i++)
        if (strcmp(cfg->models[i].id, id) == 0)
            return &cfg->models[i];
    return NULL;
}
