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
CREATE INDEX runs_by_created ON runs (created_at_ms);

-- The messages of each thread's completed runs, in order. Appended once per run, in the
-- transaction that completes it.
CREATE TABLE thread_messages (
    thread_id TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    run_id    TEXT NOT NULL,
    message   TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
CREATE INDEX thread_messages_by_run ON thread_messages (run_id);
