-- The change order without taking turns (issue 36). 0003 stamped every commit that notifies
-- from a one-row counter whose row lock was held until the commit ended, so those commits took
-- turns through their WAL flush: no group commit (64 runs in flight: ~230 cycles/s against
-- ~700 without the stamps). Now a stamp is the next value of a SEQUENCE, taken while holding a
-- shared transaction lock (an advisory lock, the "change lock"), and a reader of the change
-- order first takes that lock exclusively (`askloop_change_horizon`):
--
-- * Stamping commits never wait for each other (shared with shared), so their WAL flushes are
--   grouped again.
-- * The reader's exclusive lock waits until every transaction that holds a stamp has ended
--   (committed or rolled back); stamping transactions that come after it wait the few
--   microseconds the reader holds it (one indexed read of the highest stamp). At that instant no
--   stamp is in flight: every value taken so far is committed or gone, and every value taken
--   later is higher (a sequence only grows). So the highest stamp the reader then sees is a
--   horizon: a listing of the runs stamped above a cursor and at most the horizon misses
--   nothing below it, ever (a smaller stamp cannot commit later), which is what 0003's counter
--   gave. Readers list `change_seq <= horizon`; what committed above it is read next time.
-- * A crash loses nothing a reader moved past: stamps of a commit that waits for its flush
--   (`synchronous_commit` on, `Synchronous::Full`) are durable before they are visible, and the
--   sequence resumes after a crash above every value a flushed transaction took. (With
--   `synchronous_commit = off` a crash of the server may lose commits a reader saw, as before.)
--
-- The price moved to readers: a listing waits for the stamping commits in flight (one flush,
-- about a millisecond) and holds back new ones for that long. The inbox lists at most every
-- 20 ms (and every 5 s when idle), so at 64 runs in flight that costs a few percent at most.
-- The alternatives considered: stamping in a second, asynchronous transaction after the commit
-- (and by every reader first) costs a second statement and a second row version per commit,
-- and an asynchronous stamp lost in a crash can come back under a value a reader already
-- passed; stamping the transaction id (xid8) and reading up to
-- `pg_snapshot_xmin(pg_current_snapshot())` waits for no one, but any long transaction on the
-- cluster (a backup, a report) would hold every watcher's cursor back for its whole length.
-- One limit stays: the horizon is exact on the primary; a reader on a hot standby sees commits
-- in their WAL order, which the stamps no longer follow.
--
-- The lock's key is (hashtext('askloop change order'), the sequence's oid): one per schema, so
-- the stores of several schemas in one database do not wait for each other.
CREATE SEQUENCE askloop_change_seq AS BIGINT;
SELECT setval('askloop_change_seq', last + 1, false) FROM askloop_change_counter;
DROP TABLE askloop_change_counter;

-- Stamps the row being written with the next change sequence, under the change lock (shared;
-- held until the transaction ends). The lock comes first: a value is never taken without it.
CREATE OR REPLACE FUNCTION askloop_stamp_change() RETURNS TRIGGER
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1855818008, 'askloop_change_seq'::regclass::oid::int);
    NEW.change_seq := nextval('askloop_change_seq');
    RETURN NEW;
END
$$;

-- The change horizon: waits until no stamping transaction is in flight (the change lock,
-- exclusive, held until this statement's transaction ends), then returns the highest stamp
-- (0 when none): every stamp at most it is committed, every later one is higher. Its own
-- statement, so the listing that follows reads a snapshot taken after it.
CREATE FUNCTION askloop_change_horizon() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1855818008, 'askloop_change_seq'::regclass::oid::int);
    RETURN COALESCE((SELECT max(change_seq) FROM runs), 0);
END
$$;

-- The commit functions' events (0004's `askloop_write_events`) in PL/pgSQL: as a `LANGUAGE sql`
-- function PostgreSQL parsed and planned it again on every call (a non-inlined SQL function
-- keeps no plan across statements): a fifth of the server's time of an ask-and-resume cycle
-- (issue 36's profile). PL/pgSQL keeps the plan for the session. Same events, in order; a
-- commit without events inserts nothing.
CREATE OR REPLACE FUNCTION askloop_write_events(p_scope TEXT, p_id TEXT, p_types TEXT[], p_bodies TEXT[])
RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(p_types) > 0 THEN
        INSERT INTO run_events (scope, run_id, type, body)
        SELECT p_scope, p_id, e.type, e.body
          FROM unnest(p_types, p_bodies) WITH ORDINALITY AS e (type, body, ord)
         ORDER BY e.ord;
    END IF;
END
$$;
