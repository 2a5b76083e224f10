-- Runs: one row per run; `state` is the JSON run format (askloop_core::RunState, formatVersion 1).
-- `status`, `thread_id`, `resource_id`, `agent_id` and the times copy fields of `state` for
-- filtering; `version` is the compare-and-swap counter (1 after insert, +1 per update).
-- `thread_messages` is set when the run completes: the JSON array of the messages the run added
-- to its thread (askloop_core::Message); a thread's history is the concatenation of those of its
-- completed runs, in completion order.
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
