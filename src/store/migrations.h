/*
 * migrations.h - the schema, as an ordered list of versioned migrations. A migration is never
 * edited once it has landed: a change to the schema is a new entry at the end. Each store applies
 * the ones it has not applied yet at open, recording the version in schema_migrations, with the
 * one runner below (migrations.c). Versions need not be contiguous: a version is applied when it
 * is not recorded, whatever the others.
 */
#ifndef EPH_MIGRATIONS_H
#define EPH_MIGRATIONS_H

struct eph_migration {
    int version;
    const char *name;
    const char *sql;
};

/* What a store gives the runner: its connection and three steps. */
struct eph_migrator {
    void *db;
    /* 1 when the version is recorded, 0 when not, or -errno. */
    int (*recorded)(void *db, int version);
    /* Runs the migration's SQL and records its version, in one transaction with it. */
    int (*apply)(void *db, const struct eph_migration *m);
    /* Optional: a transaction of its own around each migration's apply (NULL: the caller holds
     * one around the whole run). */
    int (*begin)(void *db);
    int (*commit)(void *db);
    void (*rollback)(void *db);
};

/* Applies, in the list's order, each migration that is not recorded. 0, or the first error (the
 * failed migration's own transaction rolled back; those before it stay applied). */
int eph_migrations_run(const struct eph_migrator *mg, const struct eph_migration *list,
                       unsigned count);

extern const struct eph_migration eph_sqlite_migrations[];
extern const unsigned eph_sqlite_migrations_count;
extern const struct eph_migration eph_postgres_migrations[];
extern const unsigned eph_postgres_migrations_count;

#endif
