-- Listing: newest first (created_at_ms, id) overall and per agent, for run lists and the inbox.
CREATE INDEX runs_by_created ON runs (created_at_ms, id);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at_ms);
