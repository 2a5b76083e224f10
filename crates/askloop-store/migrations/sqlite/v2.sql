-- Schema version 2 (run format 2): a run is a row of `runs` (its head and the columns listing
-- filters on) and its messages, one row each in `run_messages`, so a commit writes the head and
-- appends only the new messages. After this script the migration's hook copies every row of
-- `runs_v1` into the new tables (each state upgraded by askloop_core's `codec::upgrade_v1`;
-- completed runs get completion sequences in (updated_at_ms, rowid) order) and drops `runs_v1`.
ALTER TABLE runs RENAME TO runs_v1;
DROP INDEX IF EXISTS runs_by_status;
DROP INDEX IF EXISTS runs_by_thread;
DROP INDEX IF EXISTS runs_by_created;
DROP INDEX IF EXISTS runs_by_agent;
DROP TABLE IF EXISTS _sqlx_migrations;

-- `head`: the state without its messages (askloop_core `codec::encode_head`).
-- `message_count`: how many rows of `run_messages` the run has (seq 0 .. message_count - 1).
-- `pending`: the pending tool calls (JSON array of askloop_core `PendingToolCall`), NULL when
--   none: listing summaries read it instead of the head.
-- `version`: the compare-and-swap counter (1 after insert, +1 per update; lease renewals
--   leave it).
-- `lease_holder`, `lease_expires_at_ms`: who drives a running run and until when.
-- `completion_seq`: set once, when the run completes: one sequence for the whole store,
--   strictly increasing in commit order; a thread's history is in this order.
CREATE TABLE runs (
    id                  TEXT PRIMARY KEY NOT NULL,
    thread_id           TEXT NOT NULL,
    resource_id         TEXT,
    agent_id            TEXT NOT NULL,
    status              TEXT NOT NULL,
    version             INTEGER NOT NULL,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    head                TEXT NOT NULL,
    message_count       INTEGER NOT NULL,
    pending             TEXT,
    lease_holder        TEXT,
    lease_expires_at_ms INTEGER,
    completion_seq      INTEGER
);
-- One message of a run (askloop_core `codec::encode_message`), `seq` from 0.
CREATE TABLE run_messages (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    body   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- Listing, newest first (created_at_ms, then id), overall and by each filter.
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_thread ON runs (thread_id, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_resource ON runs (resource_id, created_at_ms DESC, id DESC);
-- Threads' histories, and the next completion sequence (the highest one).
CREATE INDEX runs_by_thread_completion ON runs (thread_id, completion_seq)
    WHERE completion_seq IS NOT NULL;
CREATE UNIQUE INDEX runs_by_completion ON runs (completion_seq)
    WHERE completion_seq IS NOT NULL;
