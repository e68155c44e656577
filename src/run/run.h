/*
 * run.h - the run record for the layers that say "run": it is a plain record of the store
 * (store/run_record.h), so that the store needs nothing of run/.
 */
#ifndef EPH_RUN_H
#define EPH_RUN_H

#include "store/run_record.h"

#endif
