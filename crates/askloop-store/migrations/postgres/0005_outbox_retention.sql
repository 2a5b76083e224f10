-- The outbox's retention. `fanned_out_at_ms` is when an event was fanned out (NULL: not yet).
-- Pruning deletes, a bounded batch at a time, the events fanned out before a cutoff none of
-- whose deliveries is pending, with their deliveries (`webhook_deliveries_by_event` finds them).
-- Events fanned out before this migration get the creation time of their first delivery, 0 when
-- they had none (old enough to prune at once).
ALTER TABLE run_events ADD COLUMN fanned_out_at_ms BIGINT;
UPDATE run_events e
   SET fanned_out_at_ms = COALESCE(
         (SELECT MIN(d.created_at_ms) FROM webhook_deliveries d WHERE d.event_seq = e.seq), 0)
 WHERE e.fanned_out;
CREATE INDEX run_events_fanned ON run_events (fanned_out_at_ms, seq)
    WHERE fanned_out_at_ms IS NOT NULL;
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_seq);
