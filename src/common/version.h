/*
 * version.h - the version of Ephemeral's programs (ephemerald, ephemeral, ephemeral-sandbox), as
 * `--version` prints it. One number for the whole project: the programs and the API ship together.
 */
#ifndef EPH_COMMON_VERSION_H
#define EPH_COMMON_VERSION_H

#define EPH_VERSION "0.4.0"

#endif
