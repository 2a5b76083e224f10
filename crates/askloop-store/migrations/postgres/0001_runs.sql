-- askloop's PostgreSQL schema (stored format 2), created in the first schema of `search_path`.
--
-- `runs`: one row per run. `head` is the state without its messages, as core's
-- `store::codec::encode_head` writes it (TEXT, so the text stays byte-identical to SQLite's); a
-- listing reads its summary (with the pending questions) from the head, never the messages.
-- `thread_id`, `resource_id`, `agent_id`, `status` and the times copy fields of the state
-- for filtering and listing. `version` is the compare-and-swap counter (1 after insert, +1 per
-- update; a lease renewal does not change it). `message_count` says how many rows of
-- `run_messages` the run has. The lease (who drives a running run, until when) lives only in its
-- two columns. `completion_seq` is set when the run completes, from `run_completion_seq`; a
-- thread's history is its completed runs' messages in that order.
--
-- `run_messages`: the run's own messages, one row each (codec text of one message), append-only.
-- Only the functions below write it, each after taking the run's row (so without a foreign key,
-- whose check would cost a lookup and a trigger per message).
--
-- Ids are compared byte-wise (COLLATE "C"), as the listing cursor and the other stores compare
-- them, whatever the database's collation.
CREATE TABLE runs (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    thread_id           TEXT COLLATE "C" NOT NULL,
    resource_id         TEXT COLLATE "C",
    agent_id            TEXT COLLATE "C" NOT NULL,
    status              TEXT NOT NULL,
    version             BIGINT NOT NULL,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    head                TEXT NOT NULL,
    message_count       INTEGER NOT NULL,
    lease_holder        TEXT,
    lease_expires_at_ms BIGINT,
    completion_seq      BIGINT
) WITH (fillfactor = 80); -- room for HOT updates: most commits change no indexed column

CREATE TABLE run_messages (
    run_id TEXT COLLATE "C" NOT NULL,
    seq    INTEGER NOT NULL,
    body   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- One sequence for the whole store. Completions of one thread take it under a lock on the
-- thread (see askloop_update_run), so within a thread it increases in commit order.
CREATE SEQUENCE run_completion_seq AS BIGINT;

-- Listing, newest first (created_at_ms, id), overall and per filter; the inbox is
-- `status = 'suspended'` on runs_by_status.
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_resource ON runs (resource_id, created_at_ms DESC, id DESC)
    WHERE resource_id IS NOT NULL;
-- A thread's runs: its history (completed runs in completion order) and its listing (a thread
-- has few runs; they are sorted by creation after the lookup).
CREATE INDEX runs_by_thread ON runs (thread_id, completion_seq);

-- Takes the next completion sequence for a run of `p_thread_id` completing in this transaction.
-- The transaction-scoped lock on the thread makes a second completion of the same thread wait
-- until the first commits before it takes its number, so a thread's completion sequences
-- increase in commit order (a reader never sees a run complete "before" one already visible).
CREATE FUNCTION askloop_next_completion(p_thread_id TEXT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('askloop thread ' || p_thread_id, 0));
    RETURN nextval('run_completion_seq');
END
$$;

-- Inserts a run at version 1 with its messages (`p_messages[i]` is message i - 1), its lease,
-- and a completion sequence if it is already completed. One statement, so all of it or nothing.
-- Returns 1 (the version); a taken id raises unique_violation.
CREATE FUNCTION askloop_insert_run(
    p_id TEXT, p_thread_id TEXT, p_resource_id TEXT, p_agent_id TEXT, p_status TEXT,
    p_created_at_ms BIGINT, p_updated_at_ms BIGINT, p_head TEXT, p_messages TEXT[], p_lease_holder TEXT, p_lease_expires_at_ms BIGINT, p_completed BOOLEAN
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runs (id, thread_id, resource_id, agent_id, status, version, created_at_ms,
                      updated_at_ms, head, message_count, lease_holder,
                      lease_expires_at_ms, completion_seq)
    VALUES (p_id, p_thread_id, p_resource_id, p_agent_id, p_status, 1, p_created_at_ms,
            p_updated_at_ms, p_head, cardinality(p_messages), p_lease_holder,
            p_lease_expires_at_ms,
            CASE WHEN p_completed THEN askloop_next_completion(p_thread_id) END);
    INSERT INTO run_messages (run_id, seq, body)
    SELECT p_id, m.ord - 1, m.body FROM unnest(p_messages) WITH ORDINALITY AS m (body, ord);
    RETURN 1;
END
$$;

-- The commit of a run: if its version is still `p_expected_version`, writes the head, status,
-- time and lease, appends the messages it does not have yet
-- (`p_messages[i]` is message `p_first_seq + i - 1`), bumps the version and, when the run
-- completes, gives it the next completion sequence. The row lock (FOR UPDATE) makes concurrent
-- commits naming the same version take turns: the first wins, the others see the new version.
-- Returns the new version; 0 when the version moved on (nothing written); -1 when there is no
-- such run; -2 when the messages sent start after the stored ones (nothing written; the caller
-- sends them all).
CREATE FUNCTION askloop_update_run(
    p_id TEXT, p_expected_version BIGINT, p_status TEXT, p_updated_at_ms BIGINT, p_head TEXT,
    p_first_seq INTEGER, p_messages TEXT[], p_lease_holder TEXT,
    p_lease_expires_at_ms BIGINT, p_completed BOOLEAN
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_version BIGINT;
    v_count INTEGER;
    v_thread_id TEXT;
    v_completion_seq BIGINT;
BEGIN
    SELECT version, message_count, thread_id, completion_seq
      INTO v_version, v_count, v_thread_id, v_completion_seq
      FROM runs WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    IF v_version <> p_expected_version THEN
        RETURN 0;
    END IF;
    IF p_first_seq > v_count THEN
        RETURN -2;
    END IF;
    IF p_completed AND v_completion_seq IS NULL THEN
        v_completion_seq := askloop_next_completion(v_thread_id);
    END IF;
    INSERT INTO run_messages (run_id, seq, body)
    SELECT p_id, p_first_seq + m.ord - 1, m.body
      FROM unnest(p_messages) WITH ORDINALITY AS m (body, ord)
     WHERE p_first_seq + m.ord - 1 >= v_count;
    UPDATE runs
       SET status = p_status,
           version = v_version + 1,
           updated_at_ms = p_updated_at_ms,
           head = p_head,
           message_count = GREATEST(v_count, p_first_seq + cardinality(p_messages)),
           lease_holder = p_lease_holder,
           lease_expires_at_ms = p_lease_expires_at_ms,
           completion_seq = v_completion_seq
     WHERE id = p_id;
    RETURN v_version + 1;
END
$$;
