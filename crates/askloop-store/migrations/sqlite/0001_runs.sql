-- Runs: one row per run; `state` is the JSON run format (askloop_core::RunState, formatVersion 1).
-- The other columns copy fields of `state` for filtering, and `version` is the compare-and-swap
-- counter (1 after insert, +1 per update).
CREATE TABLE runs (
    id            TEXT PRIMARY KEY NOT NULL,
    thread_id     TEXT NOT NULL,
    resource_id   TEXT,
    agent_id      TEXT NOT NULL,
    status        TEXT NOT NULL,
    version       INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    state         TEXT NOT NULL
);
CREATE INDEX runs_by_status ON runs (status, created_at_ms);
CREATE INDEX runs_by_thread ON runs (thread_id, created_at_ms);

-- The messages each completed run added to its thread (a JSON array of askloop_core::Message),
-- one row per run, numbered in completion order. Written once, in the statement group that
-- completes the run.
CREATE TABLE thread_runs (
    run_id    TEXT PRIMARY KEY NOT NULL,
    thread_id TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    messages  TEXT NOT NULL
);
CREATE UNIQUE INDEX thread_runs_by_thread ON thread_runs (thread_id, seq);
