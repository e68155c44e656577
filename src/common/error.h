/*
 * error.h - error codes. Functions return 0 or a negative errno value; eph_strerror() names it.
 * A few errno values have a fixed meaning across the project:
 *   -EMSGSIZE  input over its size cap          -EPROTO    a peer broke the protocol
 *   -ETIMEDOUT a deadline passed                -ECANCELED the run was cancelled
 *   -EDQUOT    the budget cannot cover it       -ENOENT    no such object
 */
#ifndef EPH_ERROR_H
#define EPH_ERROR_H

const char *eph_strerror(int rc);

#endif
