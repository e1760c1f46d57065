//! Whether a database already holds exactly this build's migrations, told
//! from a read of sqlx's `_sqlx_migrations` table. A store that finds its
//! schema current skips the migrating path and its lock (SQLite's write
//! lock, Postgres' advisory lock): a process that holds that lock for long
//! — one stopped by SIGSTOP or a debugger in the middle of a write — must
//! not keep a command that only reads from opening the store.

use sqlx::migrate::Migrator;

/// One row of `_sqlx_migrations`: version, checksum, success.
pub(super) type Applied = (i64, Vec<u8>, bool);

/// The read of the applied migrations (the table is in the connection's
/// schema, or `schema.` given as the prefix).
pub(super) fn applied_query(prefix: &str) -> String {
    format!("SELECT version, checksum, success FROM {prefix}_sqlx_migrations")
}

/// Whether `applied` is exactly `migrator`'s up migrations, each applied
/// successfully with the same checksum. Anything else (a failed or unknown
/// version, a changed checksum, one missing) answers `false`: the caller
/// takes the migrating path, which applies or reports it.
pub(super) fn is_current(applied: &[Applied], migrator: &Migrator) -> bool {
    let wanted: Vec<(i64, &[u8])> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| (m.version, m.checksum.as_ref()))
        .collect();
    applied.len() == wanted.len()
        && applied.iter().all(|(version, checksum, success)| {
            *success && wanted.contains(&(*version, checksum.as_slice()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_applied(migrator: &Migrator) -> Vec<Applied> {
        migrator
            .iter()
            .map(|m| (m.version, m.checksum.to_vec(), true))
            .collect()
    }

    #[test]
    fn only_exactly_this_builds_migrations_are_current() {
        let migrator = sqlx::migrate!("../../migrations/sqlite");
        let applied = all_applied(&migrator);
        assert!(is_current(&applied, &migrator));
        assert!(!is_current(&[], &migrator), "nothing applied");
        assert!(!is_current(&applied[1..], &migrator), "one missing");
        let mut failed = applied.clone();
        failed[0].2 = false;
        assert!(!is_current(&failed, &migrator), "one failed");
        let mut changed = applied.clone();
        changed[0].1.push(0);
        assert!(!is_current(&changed, &migrator), "a checksum changed");
        let mut newer = applied.clone();
        newer.push((i64::MAX, Vec::new(), true));
        assert!(!is_current(&newer, &migrator), "a newer build's version");
    }
}
