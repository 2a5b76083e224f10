-- Schema version 1: the format-1 schema as askloop's sqlx store made it (its migrations 0001
-- `runs` and 0002 `listing`), kept so that a new database goes through the same steps as an old
-- one. A database made by that store has these tables and `user_version` 0 (it recorded its
-- migrations in `_sqlx_migrations`); opening it marks it as version 1 and version 2 upgrades it.
--
-- `state` is the whole run as JSON (format 1); `thread_messages` is set when the run completes:
-- the JSON array of the messages the run added to its thread.
CREATE TABLE runs (
    id              TEXT PRIMARY KEY NOT NULL,
    thread_id       TEXT NOT NULL,
    resource_id     TEXT,
    agent_id        TEXT NOT NULL,
    status          TEXT NOT NULL,
    version         INTEGER NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    state           TEXT NOT NULL,
    thread_messages TEXT
);
CREATE INDEX runs_by_status ON runs (status, created_at_ms);
CREATE INDEX runs_by_thread ON runs (thread_id, created_at_ms);
CREATE INDEX runs_by_created ON runs (created_at_ms, id);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms);
