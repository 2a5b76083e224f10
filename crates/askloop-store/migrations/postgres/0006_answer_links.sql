-- Answer links. A link answers one waiting call (scope, run_id, tool_call_id) without an API
-- key; only the SHA-256 of its token is kept (`token_hash`, 64 hex digits, unique). A use is
-- taken by a conditional UPDATE of `used_at_ms` (NULL: unused), given back when the answer is
-- refused; `revoked_at_ms` is set by a revoke. Pruning deletes links expired, used or revoked
-- before a cutoff, a bounded batch at a time. `role` is the role the link acts with, `issuer`
-- the JSON of the Actor that issued it (NULL: unknown): an answer through the link acts as that
-- party under the approver policy.
CREATE TABLE answer_links (
    id BIGSERIAL PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    scope TEXT NOT NULL,
    run_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    role TEXT,
    issuer TEXT,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    used_at_ms BIGINT,
    revoked_at_ms BIGINT
);
CREATE INDEX answer_links_by_call ON answer_links (scope, run_id, tool_call_id);
CREATE INDEX answer_links_by_expiry ON answer_links (expires_at_ms);
