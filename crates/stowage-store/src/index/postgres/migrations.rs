//! The PostgreSQL index's schema as numbered migrations, applied on open in one transaction
//! under an advisory lock, so instances starting together migrate once and a failed migration
//! leaves the previous version intact. `schema_migrations` records what was applied.

use stowage_core::Isolation;

/// Every migration this version knows, in order: (version, name, SQL run with the store's
/// schema first on the search path).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "artifacts", include_str!("migrations/0001_artifacts.sql")),
    (2, "shared safety", include_str!("migrations/0002_shared_safety.sql")),
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Brings `schema` up to [`SCHEMA_VERSION`] and checks the store's isolation. Errors are one
/// line, saying what to do.
pub(crate) async fn apply(client: &tokio_postgres::Client, schema: &str, isolation: Isolation) -> Result<(), String> {
    client.batch_execute("BEGIN").await.map_err(|e| super::describe(&e))?;
    let result = apply_in_transaction(client, schema, isolation).await;
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = client.batch_execute(end).await.map_err(|e| super::describe(&e));
    let applied = result?;
    ended?;
    if let Some(from) = applied {
        tracing::info!(schema, from, to = SCHEMA_VERSION, "migrated the PostgreSQL artifact index");
    }
    Ok(())
}

/// Returns the version migrated from, if anything was applied.
async fn apply_in_transaction(client: &tokio_postgres::Client, schema: &str, isolation: Isolation) -> Result<Option<i32>, String> {
    let pg = |e: tokio_postgres::Error| super::describe(&e);
    client.query_one("SELECT pg_advisory_xact_lock($1, hashtext($2))::text", &[&super::LOCK_MIGRATE, &schema]).await.map_err(pg)?;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET LOCAL search_path TO {schema}; \
             CREATE TABLE IF NOT EXISTS schema_migrations (version INT PRIMARY KEY, name TEXT NOT NULL, \
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        ))
        .await
        .map_err(pg)?;
    let current: i32 = client.query_one("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", &[]).await.map_err(pg)?.get(0);
    if current > SCHEMA_VERSION {
        return Err(too_new(schema, current));
    }
    for (version, name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > current) {
        client.batch_execute(sql).await.map_err(|e| format!("migration {version} ({name}): {}", super::describe(&e)))?;
        client.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", &[version, name]).await.map_err(pg)?;
    }
    let want = isolation.as_str();
    let row = client.query_opt("SELECT value FROM settings WHERE key = 'isolation'", &[]).await.map_err(pg)?;
    match row.map(|r| r.get::<_, String>(0)) {
        None => {
            client.execute("INSERT INTO settings (key, value) VALUES ('isolation', $1)", &[&want]).await.map_err(pg)?;
        }
        Some(have) if have == want => {}
        Some(have) => return Err(other_isolation(schema, &have, want)),
    }
    Ok((current < SCHEMA_VERSION).then_some(current))
}

/// What [`apply`] would refuse about an existing schema, found without changing anything
/// (`check-config`): a version newer than this build knows, or another isolation. Errors are
/// [`apply`]'s, word for word.
pub(crate) async fn check(client: &tokio_postgres::Client, schema: &str, isolation: Isolation) -> Result<(), String> {
    let pg = |e: tokio_postgres::Error| super::describe(&e);
    let versions = format!("{schema}.schema_migrations");
    let has_versions: bool = client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&versions]).await.map_err(pg)?.get(0);
    if has_versions {
        let current: i32 = client.query_one(&format!("SELECT COALESCE(MAX(version), 0) FROM {versions}"), &[]).await.map_err(pg)?.get(0);
        if current > SCHEMA_VERSION {
            return Err(too_new(schema, current));
        }
    }
    let row = client.query_opt(&format!("SELECT value FROM {schema}.settings WHERE key = 'isolation'"), &[]).await.map_err(pg)?;
    match row.map(|r| r.get::<_, String>(0)) {
        Some(have) if have != isolation.as_str() => Err(other_isolation(schema, &have, isolation.as_str())),
        _ => Ok(()),
    }
}

fn too_new(schema: &str, current: i32) -> String {
    format!(
        "schema {schema} is at version {current}, newer than this Stowage knows ({SCHEMA_VERSION}); run a newer Stowage or point [index] schema elsewhere"
    )
}

fn other_isolation(schema: &str, have: &str, want: &str) -> String {
    format!(
        "schema {schema} keys its records by {have} isolation, but this store is opened with {want} isolation; \
         set [store] isolate_sessions to match the other instances, or use another [index] schema"
    )
}
