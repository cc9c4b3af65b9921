-- Version 2: what keeps one misconfigured or dying instance from costing the fleet anything.
--
-- Blobs gc found missing (or the wrong size), and since when (unix ns): their records are
-- dropped only when a later sweep, past the grace period, still finds them missing.
CREATE TABLE missing_blobs (
    sha256           TEXT PRIMARY KEY,
    first_missing_at BIGINT NOT NULL
);

-- Blobs a put publishes at their content address before its record exists (uploads run
-- outside the fleet-wide lock), named here first: a put that fails, or an instance that dies,
-- leaves no blob that nothing names. The row goes once the record is written or the blob is
-- released. `instance` is the instance's liveness key (a session advisory lock it holds).
CREATE TABLE publishing (
    instance   INT NOT NULL,
    put_id     BIGINT NOT NULL,
    sha256     TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    PRIMARY KEY (instance, put_id)
);
