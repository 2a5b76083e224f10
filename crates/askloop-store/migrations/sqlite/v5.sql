-- Schema version 5: the outbox. Every commit writes the events it causes (core's
-- `event::events_of_commit`) to `run_events` in its own transaction; deliverers fan each event
-- out to the webhook endpoints that want it (`webhook_deliveries`, one row per endpoint and
-- event: the unique key makes fanning out twice harmless), claim due deliveries with a lease
-- (`claim_holder`, `claim_until_ms`) and record every attempt (`attempts`, a JSON array).
CREATE TABLE run_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  scope TEXT NOT NULL,
  run_id TEXT NOT NULL,
  type TEXT NOT NULL,
  body TEXT NOT NULL,
  fanned_out INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX run_events_unfanned ON run_events (seq) WHERE fanned_out = 0;

CREATE TABLE webhook_deliveries (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  endpoint TEXT NOT NULL,
  event_seq INTEGER NOT NULL REFERENCES run_events (seq),
  scope TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending',
  next_attempt_ms INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL,
  claim_holder TEXT,
  claim_until_ms INTEGER,
  attempts TEXT NOT NULL DEFAULT '[]',
  UNIQUE (endpoint, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ms)
  WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_scope ON webhook_deliveries (scope, id);
