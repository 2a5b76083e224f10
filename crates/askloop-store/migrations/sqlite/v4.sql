-- Schema version 4: the change order. Every commit that changes a run's status, or that leaves
-- it suspended (what core's `store::notifies` names: whatever can change its pending
-- questions), stamps the run with the next value of one change sequence for the whole store
-- (`change_seq`: one more than the highest given, read in the writer's transaction; commits
-- take turns, so the values increase in commit order). A watcher keeps the highest value it has
-- seen and lists the runs stamped above it (`runs_by_change`), so it reads only what changed.
--
-- The rows of schema 3 are stamped in the order of their last change (`updated_at_ms`, then
-- their key), so the sequence starts above every one of them.
ALTER TABLE runs ADD COLUMN change_seq INTEGER;
UPDATE runs SET change_seq = ordered.seq
  FROM (SELECT scope, id,
               row_number() OVER (ORDER BY updated_at_ms, scope, id) AS seq
          FROM runs) AS ordered
 WHERE runs.scope = ordered.scope AND runs.id = ordered.id;
CREATE UNIQUE INDEX runs_by_change ON runs (change_seq) WHERE change_seq IS NOT NULL;
