/*
 * migrations.c - the one migration runner of both stores (migrations.h): each store gives its
 * steps, the order and the rule (apply what is not recorded) are here.
 */
#include "store/migrations.h"

#include "common/log.h"

int eph_migrations_run(const struct eph_migrator *mg, const struct eph_migration *list,
                       unsigned count)
{
    for (unsigned i = 0; i < count; i++) {
        const struct eph_migration *m = &list[i];
        int rc = mg->recorded(mg->db, m->version);
        if (rc < 0)
            return rc;
        if (rc == 1)
            continue;
        if (mg->begin && (rc = mg->begin(mg->db)))
            return rc;
        rc = mg->apply(mg->db, m);
        if (!rc && mg->commit)
            rc = mg->commit(mg->db);
        if (rc) {
            if (mg->rollback)
                mg->rollback(mg->db);
            return rc;
        }
        EPH_INFO("store", "applied migration %d (%s)", m->version, m->name);
    }
    return 0;
}
