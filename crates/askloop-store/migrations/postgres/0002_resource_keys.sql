-- Resources are namespaces. A run's key becomes (scope, id), where `scope` is its resource id
-- or '' for a run without one (never a resource id: askloop refuses blank ids), so the same
-- run id in two resources is two runs; a message's key is (scope, run_id, seq). Every thread
-- query is scoped the same way: a thread is (scope, thread_id). Existing rows are kept, each in
-- the scope of its resource (`resource_id` becomes `scope`).
--
-- One turn at a time per thread: a write that makes a run `running` while another run of its
-- (scope, thread_id) is running is refused, checked by the functions below under a
-- transaction lock on the thread (so two such writes take turns and the second sees the
-- first). Not a unique index: a database may already hold two running runs of one thread,
-- made by the race this rule closes; they may still end.
--
-- Completion sequences now also mark cancelled runs (they join their thread's history); runs
-- cancelled before this migration keep none.
ALTER TABLE runs RENAME COLUMN resource_id TO scope;
UPDATE runs SET scope = '' WHERE scope IS NULL;
ALTER TABLE runs ALTER COLUMN scope SET NOT NULL;
ALTER TABLE runs DROP CONSTRAINT runs_pkey;
ALTER TABLE runs ADD PRIMARY KEY (scope, id);

ALTER TABLE run_messages ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT '';
UPDATE run_messages m SET scope = r.scope FROM runs r WHERE r.id = m.run_id AND r.scope <> '';
ALTER TABLE run_messages ALTER COLUMN scope DROP DEFAULT;
ALTER TABLE run_messages DROP CONSTRAINT run_messages_pkey;
ALTER TABLE run_messages ADD PRIMARY KEY (scope, run_id, seq);

-- Listing, newest first (created_at_ms, id, scope), overall and per filter; a bare run id is
-- resolved through runs_by_id.
DROP INDEX runs_by_created;
DROP INDEX runs_by_status;
DROP INDEX runs_by_agent;
DROP INDEX runs_by_resource;
DROP INDEX runs_by_thread;
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, id DESC, scope DESC);
CREATE INDEX runs_by_status ON runs (status, created_at_ms DESC, id DESC, scope DESC);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms DESC, id DESC, scope DESC);
CREATE INDEX runs_by_resource ON runs (scope, created_at_ms DESC, id DESC);
CREATE INDEX runs_by_id ON runs (id);
-- A thread's runs: its history (ended runs in completion order) and its listing (a thread has
-- few runs; they are sorted by creation after the lookup).
CREATE INDEX runs_by_thread ON runs (scope, thread_id, completion_seq);
-- The running run of a thread (one turn at a time).
CREATE INDEX runs_running_by_thread ON runs (scope, thread_id) WHERE status = 'running';

DROP FUNCTION askloop_insert_run(TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, TEXT, TEXT[],
    TEXT, BIGINT, BOOLEAN);
DROP FUNCTION askloop_update_run(TEXT, BIGINT, TEXT, BIGINT, TEXT, INTEGER, TEXT[], TEXT,
    BIGINT, BOOLEAN);
DROP FUNCTION askloop_next_completion(TEXT);

-- Takes the transaction lock of the thread (`p_scope`, `p_thread_id`): completions of one
-- thread take their sequence under it (so a thread's sequences increase in commit order: a
-- reader never sees a run end "before" one already visible), and writes into `running` check
-- the thread's running run under it (so of two racing, the second sees the first). Two threads
-- whose lock keys collide only take turns.
CREATE FUNCTION askloop_lock_thread(p_scope TEXT, p_thread_id TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('askloop thread ' || p_scope || chr(31) || p_thread_id, 0));
END
$$;

-- Whether another run than `p_id` of the thread (`p_scope`, `p_thread_id`) is running, under
-- the thread's lock (taken here; held until the transaction ends).
CREATE FUNCTION askloop_thread_busy(p_scope TEXT, p_thread_id TEXT, p_id TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM askloop_lock_thread(p_scope, p_thread_id);
    RETURN EXISTS (SELECT 1 FROM runs
                    WHERE scope = p_scope AND thread_id = p_thread_id
                      AND status = 'running' AND id <> p_id);
END
$$;

-- Inserts a run at version 1 with its messages (`p_messages[i]` is message i - 1), its lease,
-- and a completion sequence if it has already ended (`p_ended`). One statement, so all of it
-- or nothing. Returns 1 (the version), or -3 when the run is running and another run of its
-- thread is (nothing written); a taken key raises unique_violation.
CREATE FUNCTION askloop_insert_run(
    p_scope TEXT, p_id TEXT, p_thread_id TEXT, p_agent_id TEXT, p_status TEXT,
    p_created_at_ms BIGINT, p_updated_at_ms BIGINT, p_head TEXT, p_messages TEXT[],
    p_lease_holder TEXT, p_lease_expires_at_ms BIGINT, p_ended BOOLEAN
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_completion_seq BIGINT;
BEGIN
    IF p_status = 'running' AND askloop_thread_busy(p_scope, p_thread_id, p_id) THEN
        RETURN -3;
    END IF;
    IF p_ended THEN
        PERFORM askloop_lock_thread(p_scope, p_thread_id);
        v_completion_seq := nextval('run_completion_seq');
    END IF;
    INSERT INTO runs (scope, id, thread_id, agent_id, status, version, created_at_ms,
                      updated_at_ms, head, message_count, lease_holder,
                      lease_expires_at_ms, completion_seq)
    VALUES (p_scope, p_id, p_thread_id, p_agent_id, p_status, 1, p_created_at_ms,
            p_updated_at_ms, p_head, cardinality(p_messages), p_lease_holder,
            p_lease_expires_at_ms, v_completion_seq);
    INSERT INTO run_messages (scope, run_id, seq, body)
    SELECT p_scope, p_id, m.ord - 1, m.body
      FROM unnest(p_messages) WITH ORDINALITY AS m (body, ord);
    RETURN 1;
END
$$;

-- The commit of a run: if its version is still `p_expected_version`, writes the head, status,
-- time and lease, appends the messages it does not have yet
-- (`p_messages[i]` is message `p_first_seq + i - 1`), bumps the version and, when the run
-- ends (`p_ended`: completed or cancelled), gives it the next completion sequence. The row
-- lock (FOR UPDATE) makes concurrent commits naming the same version take turns: the first
-- wins, the others see the new version. Returns the new version; 0 when the version moved on
-- (nothing written); -1 when there is no such run; -2 when the messages sent start after the
-- stored ones (nothing written; the caller sends them all); -3 when the run becomes running
-- while another run of its thread is (nothing written).
CREATE FUNCTION askloop_update_run(
    p_scope TEXT, p_id TEXT, p_expected_version BIGINT, p_status TEXT, p_updated_at_ms BIGINT,
    p_head TEXT, p_first_seq INTEGER, p_messages TEXT[], p_lease_holder TEXT,
    p_lease_expires_at_ms BIGINT, p_ended BOOLEAN
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_version BIGINT;
    v_count INTEGER;
    v_thread_id TEXT;
    v_status TEXT;
    v_completion_seq BIGINT;
BEGIN
    SELECT version, message_count, thread_id, status, completion_seq
      INTO v_version, v_count, v_thread_id, v_status, v_completion_seq
      FROM runs WHERE scope = p_scope AND id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    IF v_version <> p_expected_version THEN
        RETURN 0;
    END IF;
    IF p_first_seq > v_count THEN
        RETURN -2;
    END IF;
    IF p_status = 'running' AND v_status <> 'running'
       AND askloop_thread_busy(p_scope, v_thread_id, p_id) THEN
        RETURN -3;
    END IF;
    IF p_ended AND v_completion_seq IS NULL THEN
        PERFORM askloop_lock_thread(p_scope, v_thread_id);
        v_completion_seq := nextval('run_completion_seq');
    END IF;
    INSERT INTO run_messages (scope, run_id, seq, body)
    SELECT p_scope, p_id, p_first_seq + m.ord - 1, m.body
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
     WHERE scope = p_scope AND id = p_id;
    RETURN v_version + 1;
END
$$;
