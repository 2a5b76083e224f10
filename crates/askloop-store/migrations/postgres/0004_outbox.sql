-- The outbox. Every commit writes the events it causes (core's `event::events_of_commit`) to
-- `run_events` in its own statement: `askloop_insert_run_with_events` and
-- `askloop_update_run_with_events` call the commit functions of 0002 and write the events only
-- when the commit succeeded, so a refused compare-and-swap writes none and a committed change
-- never lacks its events. Deliverers fan each event out to the webhook endpoints that want it
-- (`webhook_deliveries`, one row per endpoint and event: the unique key makes fanning out twice,
-- in any number of processes, harmless), claim due deliveries with a lease (`FOR UPDATE SKIP
-- LOCKED`: of several processes each delivery goes to one) and record every attempt
-- (`attempts`, a JSON array).
CREATE TABLE run_events (
    seq        BIGSERIAL PRIMARY KEY,
    scope      TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    type       TEXT NOT NULL,
    body       TEXT NOT NULL,
    fanned_out BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX run_events_unfanned ON run_events (seq) WHERE NOT fanned_out;

CREATE TABLE webhook_deliveries (
    id              BIGSERIAL PRIMARY KEY,
    endpoint        TEXT NOT NULL,
    event_seq       BIGINT NOT NULL REFERENCES run_events (seq),
    scope           TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending',
    next_attempt_ms BIGINT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    claim_holder    TEXT,
    claim_until_ms  BIGINT,
    attempts        JSONB NOT NULL DEFAULT '[]',
    UNIQUE (endpoint, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_ms)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_scope ON webhook_deliveries (scope, id);

-- Appends a commit's events (types and bodies, in order) for run (`p_scope`, `p_id`).
CREATE FUNCTION askloop_write_events(p_scope TEXT, p_id TEXT, p_types TEXT[], p_bodies TEXT[])
RETURNS VOID
LANGUAGE sql AS $$
    INSERT INTO run_events (scope, run_id, type, body)
    SELECT p_scope, p_id, e.type, e.body
      FROM unnest(p_types, p_bodies) WITH ORDINALITY AS e (type, body, ord)
     ORDER BY e.ord;
$$;

-- `askloop_insert_run`, and the events when it inserted.
CREATE FUNCTION askloop_insert_run_with_events(
    p_scope TEXT, p_id TEXT, p_thread_id TEXT, p_agent_id TEXT, p_status TEXT,
    p_created_at_ms BIGINT, p_updated_at_ms BIGINT, p_head TEXT, p_messages TEXT[],
    p_lease_holder TEXT, p_lease_expires_at_ms BIGINT, p_ended BOOLEAN,
    p_event_types TEXT[], p_event_bodies TEXT[]
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome BIGINT;
BEGIN
    v_outcome := askloop_insert_run(p_scope, p_id, p_thread_id, p_agent_id, p_status,
        p_created_at_ms, p_updated_at_ms, p_head, p_messages, p_lease_holder,
        p_lease_expires_at_ms, p_ended);
    IF v_outcome > 0 THEN
        PERFORM askloop_write_events(p_scope, p_id, p_event_types, p_event_bodies);
    END IF;
    RETURN v_outcome;
END
$$;

-- `askloop_update_run`, and the events when it committed (a new version).
CREATE FUNCTION askloop_update_run_with_events(
    p_scope TEXT, p_id TEXT, p_expected_version BIGINT, p_status TEXT, p_updated_at_ms BIGINT,
    p_head TEXT, p_first_seq INTEGER, p_messages TEXT[], p_lease_holder TEXT,
    p_lease_expires_at_ms BIGINT, p_ended BOOLEAN,
    p_event_types TEXT[], p_event_bodies TEXT[]
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome BIGINT;
BEGIN
    v_outcome := askloop_update_run(p_scope, p_id, p_expected_version, p_status,
        p_updated_at_ms, p_head, p_first_seq, p_messages, p_lease_holder,
        p_lease_expires_at_ms, p_ended);
    IF v_outcome > 0 THEN
        PERFORM askloop_write_events(p_scope, p_id, p_event_types, p_event_bodies);
    END IF;
    RETURN v_outcome;
END
$$;
