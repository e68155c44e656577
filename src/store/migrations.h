/*
 * migrations.h - the schema, as an ordered list of versioned migrations. A migration is never
 * edited once it has landed: a change to the schema is a new entry at the end. Each store applies
 * the ones it has not applied yet at open, each in its own transaction, recording the version in
 * schema_migrations.
 */
#ifndef EPH_MIGRATIONS_H
#define EPH_MIGRATIONS_H

struct eph_migration {
    int version;
    const char *name;
    const char *sql;
};

extern const struct eph_migration eph_sqlite_migrations[];
extern const unsigned eph_sqlite_migrations_count;
extern const struct eph_migration eph_postgres_migrations[];
extern const unsigned eph_postgres_migrations_count;

#endif
