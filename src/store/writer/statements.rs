//! The shapes of the writer's multi-row statements: their placeholders
//! (each engine's), their `VALUES` lists, and the chunks a batch's rows
//! are cut into.

use sqlx::AnyConnection;

use crate::store::Engine;

/// Most rows one statement writes (the runs insert binds 29 values a row,
/// well within SQLite's 32,766 variables).
const MAX_ROWS_PER_STATEMENT: usize = 256;

/// How a statement's placeholders are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Placeholders {
    /// `?`, numbered by position: SQLite. (Its `$N` would do too, but
    /// SQLite looks each named parameter up in a list, which made binding a
    /// statement of thousands quadratic: 7% of the writer under load.)
    Positional,
    /// `$1`, `$2`, ...: PostgreSQL.
    Numbered,
}

impl Placeholders {
    pub(in crate::store) fn of(connection: &AnyConnection) -> Self {
        match Engine::of_connection(connection) {
            Engine::Postgres => Self::Numbered,
            Engine::Sqlite => Self::Positional,
        }
    }
}

/// `head`, then `VALUES` with `rows` rows of `columns` placeholders each,
/// then `tail`.
pub(in crate::store) fn values_statement(
    placeholders: Placeholders,
    head: &str,
    rows: usize,
    columns: usize,
    tail: &str,
) -> String {
    use std::fmt::Write as _;
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * columns * 6 + 8);
    sql.push_str(head);
    sql.push_str("VALUES ");
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..columns {
            let separator = if column == 0 { "" } else { ", " };
            match placeholders {
                Placeholders::Positional => {
                    sql.push_str(separator);
                    sql.push('?');
                }
                Placeholders::Numbered => {
                    let _ = write!(sql, "{separator}${}", row * columns + column + 1);
                }
            }
        }
        sql.push(')');
    }
    sql.push_str(tail);
    sql
}

/// Cuts `rows` into chunks whose lengths are powers of two, at most
/// [`MAX_ROWS_PER_STATEMENT`]: whatever a batch holds, each kind of statement
/// comes in at most a few shapes, which the connection's statement cache
/// keeps prepared.
pub(in crate::store) fn chunks<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let length = MAX_ROWS_PER_STATEMENT.min(1 << rest.len().ilog2());
        let (chunk, tail) = rest.split_at(length);
        rest = tail;
        Some(chunk)
    })
}
