-- Version 1: one row per (owner, artifact id), as in the SQLite index. Times are unix
-- nanoseconds (BIGINT) so every backend compares them as plain integers; `source` is the
-- JSON text as given (TEXT, not JSONB, which would reorder its keys).
CREATE TABLE artifacts (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_key   TEXT NOT NULL,
    id          TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size        BIGINT NOT NULL,
    tenant_id   TEXT,
    user_id     TEXT,
    session_id  TEXT,
    trace_id    TEXT,
    mime_type   TEXT,
    filename    TEXT,
    source      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT,
    last_access BIGINT NOT NULL,
    UNIQUE (owner_key, id)
);
-- Operator lookups by id, gc's "is this blob still used", budgets by scope, expiry sweeps.
CREATE INDEX artifacts_id ON artifacts (id);
CREATE INDEX artifacts_sha256 ON artifacts (sha256);
CREATE INDEX artifacts_scope ON artifacts (tenant_id, user_id, session_id, trace_id);
CREATE INDEX artifacts_expires_at ON artifacts (expires_at) WHERE expires_at IS NOT NULL;

-- Settings the whole store shares; `isolation` decides what owner_key means.
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
