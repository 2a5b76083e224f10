-- The change order. Every commit that changes a run's status, or that leaves it suspended (what
-- core's `store::notifies` names: whatever can change its pending questions), stamps the run
-- with the next value of one change sequence for the whole store (`change_seq`), and a watcher
-- lists the runs stamped above the highest value it has seen (`runs_by_change`), so it reads
-- only what changed.
--
-- The values must increase in COMMIT order, not only in the order they are taken: a reader that
-- sees a run stamped n must already see every run stamped below n, or a watcher that moved its
-- cursor to n would never see a smaller stamp that commits later. A SEQUENCE does not give that
-- (nextval is taken mid-transaction; a transaction holding 5 can commit after one holding 6 and
-- a reader listing "after 5" in between moves on to 6 and misses 5 for ever). So the values come
-- from a one-row counter updated in the stamping transaction: its row lock is held until that
-- transaction ends, so the next stamping transaction takes the next value only after the
-- previous one committed (or rolled back, freeing its value again). The price: commits that
-- stamp take turns from their stamp to their commit (the stamp is the last statement of
-- `askloop_update_run`, so that is the commit itself); a running run's own commits (steps, the
-- journal) and lease renewals do not stamp and never wait. The other exact design, stamping the
-- transaction id (xid8) and reading up to `pg_snapshot_xmin(pg_current_snapshot())`, never
-- waits, but its cursor is held back by any long transaction on the cluster, whose changes a
-- watcher would then read again on every listing; the inbox polls often, so exactness with an
-- empty answer when nothing changed was preferred.
--
-- Existing runs are stamped in the order of their last change, so the sequence starts above
-- every one of them.
ALTER TABLE runs ADD COLUMN change_seq BIGINT;
UPDATE runs SET change_seq = ordered.seq
  FROM (SELECT scope, id, row_number() OVER (ORDER BY updated_at_ms, scope, id) AS seq
          FROM runs) AS ordered
 WHERE runs.scope = ordered.scope AND runs.id = ordered.id;
CREATE UNIQUE INDEX runs_by_change ON runs (change_seq) WHERE change_seq IS NOT NULL;

CREATE TABLE askloop_change_counter (
    one  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    last BIGINT NOT NULL
);
INSERT INTO askloop_change_counter (last) SELECT COALESCE(MAX(change_seq), 0) FROM runs;

-- Stamps the row being written with the next change sequence (the counter's row stays locked
-- until the transaction ends).
CREATE FUNCTION askloop_stamp_change() RETURNS TRIGGER
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE askloop_change_counter SET last = last + 1 RETURNING last INTO NEW.change_seq;
    RETURN NEW;
END
$$;

-- An insert notifies unless the run is running; an update when the status changes or the run
-- stays suspended. Lease renewals set neither column and never fire.
CREATE TRIGGER runs_stamp_insert BEFORE INSERT ON runs
    FOR EACH ROW WHEN (NEW.status <> 'running') EXECUTE FUNCTION askloop_stamp_change();
CREATE TRIGGER runs_stamp_update BEFORE UPDATE OF status, head ON runs
    FOR EACH ROW WHEN (NEW.status <> OLD.status OR NEW.status = 'suspended')
    EXECUTE FUNCTION askloop_stamp_change();
