//! Opening a store from a URL: `sqlite://path` (created if missing, feature
//! `sqlite`), `postgres://…[?schema=name]` (default schema `boxcar`, feature
//! `postgres`), `memory://`. A URL of a backend this build leaves out is
//! refused with the feature to enable.

use std::sync::Arc;

use super::memory::MemoryStore;
#[cfg(feature = "postgres")]
use super::postgres::{PostgresStore, DEFAULT_SCHEMA};
#[cfg(feature = "sqlite")]
use super::sqlite::SqliteStore;
use super::traced::TracedStore;
use super::{JobStore, StoreError};

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}

/// Splits `?schema=name` (or `&schema=name`) off a Postgres URL.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn split_schema(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.strip_prefix("schema=") {
            Some(s) => {
                schema = Some(s.to_string());
                false
            }
            None => !kv.is_empty(),
        })
        .collect();
    if rest.is_empty() {
        (base.to_string(), schema)
    } else {
        (format!("{base}?{}", rest.join("&")), schema)
    }
}

/// The error for a URL whose backend this build leaves out.
#[cfg(not(all(feature = "sqlite", feature = "postgres")))]
fn left_out(url: &str, feature: &str) -> StoreError {
    StoreError::BadUrl {
        url: redact(url),
        reason: format!(
            "this build of boxcar-queue has no {feature} backend: enable the cargo feature `{feature}`"
        ),
    }
}

/// Opens the store named by `url` without migrating it, wrapped in a
/// [`TracedStore`] (a `store.<method>` span per call).
///
/// # Errors
/// The URL is not understood or the database cannot be opened.
pub async fn open_store(url: &str) -> Result<Arc<dyn JobStore>, StoreError> {
    let store = open_untraced(url).await?;
    Ok(Arc::new(TracedStore::new(store)))
}

async fn open_untraced(url: &str) -> Result<Arc<dyn JobStore>, StoreError> {
    if url == "memory://" || url == "memory:" {
        return Ok(Arc::new(MemoryStore::new()));
    }
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        if path.is_empty() {
            return Err(StoreError::BadUrl {
                url: url.to_string(),
                reason: "give a file path, e.g. sqlite://boxcar.db".into(),
            });
        }
        #[cfg(feature = "sqlite")]
        return Ok(Arc::new(SqliteStore::open(path).await?));
        #[cfg(not(feature = "sqlite"))]
        return Err(left_out(url, "sqlite"));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let (base, schema) = split_schema(url);
            let schema = schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_string());
            return Ok(Arc::new(PostgresStore::connect(&base, &schema).await?));
        }
        #[cfg(not(feature = "postgres"))]
        return Err(left_out(url, "postgres"));
    }
    Err(StoreError::BadUrl {
        url: redact(url),
        reason: "expected sqlite://PATH, postgres://… or memory://".into(),
    })
}

/// Opens the store named by `url` and applies its migrations.
///
/// # Errors
/// As [`open_store`], or a migration failed.
pub async fn connect(url: &str) -> Result<Arc<dyn JobStore>, StoreError> {
    let store = open_store(url).await?;
    store.migrate().await?;
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_param_is_split_off() {
        assert_eq!(
            split_schema("postgres://u@h/db?schema=abc"),
            ("postgres://u@h/db".to_string(), Some("abc".to_string()))
        );
        assert_eq!(
            split_schema("postgres://u@h/db?sslmode=disable&schema=x"),
            (
                "postgres://u@h/db?sslmode=disable".to_string(),
                Some("x".to_string())
            )
        );
        assert_eq!(
            split_schema("postgres://h/db"),
            ("postgres://h/db".to_string(), None)
        );
    }

    #[test]
    fn password_is_redacted() {
        assert_eq!(redact("mysql://u:secret@h/db"), "mysql://…@h/db");
    }
}
