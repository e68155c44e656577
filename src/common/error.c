#include "common/error.h"

#include <errno.h>
#include <string.h>

const char *eph_strerror(int rc)
{
    switch (-rc) {
    case 0:
        return "success";
    case EMSGSIZE:
        return "too large";
    case EPROTO:
        return "protocol error";
    case EDQUOT:
        return "budget exhausted";
    default:
        return strerror(rc < 0 ? -rc : rc);
    }
}
