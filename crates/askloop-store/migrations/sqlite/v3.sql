-- Schema version 3: resources are namespaces. A run's key is (scope, id), where `scope` is
-- its resource id or '' for a run without one (never a resource id: askloop refuses blank
-- ids), so the same run id in two resources is two runs; a message's key is (scope, run_id,
-- seq). Every thread query is scoped the same way: a thread is (scope, thread_id).
-- The rows of schema 2 are copied as they are, each into the scope of its resource.
--
-- One turn at a time per thread: the writer refuses, in the transaction of the write, a write
-- that makes a run `running` while another run of its (scope, thread_id) is running; the
-- partial index `runs_running_by_thread` makes that check one index lookup. (Not a unique
-- index: a database of schema 2 may already hold two running runs of one thread, made by the
-- race this rule closes; they may still end.)
--
-- Completion sequences now also mark cancelled runs (they join their thread's history); runs
-- cancelled under schema 2 keep none.
ALTER TABLE runs RENAME TO runs_v2;
ALTER TABLE run_messages RENAME TO run_messages_v2;
DROP INDEX IF EXISTS runs_by_created;
DROP INDEX IF EXISTS runs_by_status;
DROP INDEX IF EXISTS runs_by_agent;
DROP INDEX IF EXISTS runs_by_thread;
DROP INDEX IF EXISTS runs_by_resource;
DROP INDEX IF EXISTS runs_by_thread_completion;
DROP INDEX IF EXISTS runs_by_completion;

-- The columns are those of schema 2 (see v2.sql), `resource_id` becoming `scope`.
CREATE TABLE runs (
    scope               TEXT NOT NULL,
    id                  TEXT NOT NULL,
    thread_id           TEXT NOT NULL,
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
    completion_seq      INTEGER,
    PRIMARY KEY (scope, id)
);
CREATE TABLE run_messages (
    scope  TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    body   TEXT NOT NULL,
    PRIMARY KEY (scope, run_id, seq)
) WITHOUT ROWID;

INSERT INTO runs (scope, id, thread_id, agent_id, status, version, created_at_ms,
                  updated_at_ms, head, message_count, pending, lease_holder,
                  lease_expires_at_ms, completion_seq)
SELECT coalesce(resource_id, ''), id, thread_id, agent_id, status, version, created_at_ms,
       updated_at_ms, head, message_count, pending, lease_holder, lease_expires_at_ms,
       completion_seq
  FROM runs_v2;
INSERT INTO run_messages (scope, run_id, seq, body)
SELECT coalesce(r.resource_id, ''), m.run_id, m.seq, m.body
  FROM run_messages_v2 m JOIN runs_v2 r ON r.id = m.run_id;
DROP TABLE run_messages_v2;
DROP TABLE runs_v2;

-- Listing, newest first (created_at_ms, then id, then scope), overall and by each filter; a
-- bare run id is resolved through runs_by_id.
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, id DESC, scope DESC);
CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, id DESC, scope DESC);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms DESC, id DESC, scope DESC);
CREATE INDEX runs_by_thread ON runs (thread_id, created_at_ms DESC, id DESC, scope DESC);
CREATE INDEX runs_by_resource ON runs (scope, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_id ON runs (id, created_at_ms DESC, scope DESC);
-- Threads' histories, and the next completion sequence (the highest one).
CREATE INDEX runs_by_thread_completion ON runs (scope, thread_id, completion_seq)
    WHERE completion_seq IS NOT NULL;
CREATE UNIQUE INDEX runs_by_completion ON runs (completion_seq)
    WHERE completion_seq IS NOT NULL;
-- The running run of a thread (one turn at a time).
CREATE INDEX runs_running_by_thread ON runs (scope, thread_id) WHERE status = 'running';
