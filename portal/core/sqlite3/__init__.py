"""SQLite as PostgreSQL bounds it: the database engine of standalone mode and of tests without
DATABASE_URL."""
