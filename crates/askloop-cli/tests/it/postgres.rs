//! The `askloop` binary on PostgreSQL: 20 processes racing to resume one call, 50 times over
//! (the crash tests run on PostgreSQL too, through `crash_tests!` in `crash.rs`).
//!
//! Each test gets a fresh schema of the database at `ASKLOOP_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/test`), named in the store URL's `search_path`. A schema
//! carries its test directory's path as its comment; creating one drops those whose directory
//! is gone (their test ended), so schemas do not pile up. Without a reachable PostgreSQL these
//! tests fail; they never skip.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Connection};

use crate::support::{ASK_THEN_ANSWER, TestDir, answered, tool_results};

/// The prefix of the schemas these tests make.
const SCHEMA_PREFIX: &str = "askloop_cli_test_";

/// The test database's URL.
fn database_url() -> String {
    std::env::var("ASKLOOP_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Runs `future` on a runtime of its own (these tests are synchronous).
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Creates a fresh schema for the test in `dir` and returns the store URL that uses it;
/// first drops the schemas of tests whose directory is gone.
pub fn schema_url(dir: &TestDir) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "{SCHEMA_PREFIX}{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let url = database_url();
    block_on(async {
        let mut admin = match PgConnection::connect(&url).await {
            Ok(connection) => connection,
            Err(error) => panic!(
                "these tests need PostgreSQL at {url} (set ASKLOOP_TEST_POSTGRES to another \
                 database): {error}"
            ),
        };
        let schemas: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT nspname::text, obj_description(oid, 'pg_namespace') FROM pg_namespace \
             WHERE starts_with(nspname, $1)",
        )
        .bind(SCHEMA_PREFIX)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        for (stale, test_dir) in schemas {
            if test_dir.is_some_and(|path| !std::path::Path::new(&path).exists()) {
                // Another test process may be dropping it too.
                let _ = sqlx::raw_sql(AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS \"{stale}\" CASCADE"
                )))
                .execute(&mut admin)
                .await;
            }
        }
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA \"{name}\"")))
            .execute(&mut admin)
            .await
            .unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "COMMENT ON SCHEMA \"{name}\" IS '{}'",
            dir.path().display().to_string().replace('\'', "''")
        )))
        .execute(&mut admin)
        .await
        .unwrap();
        admin.close().await.unwrap();
    });
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{name}")
}

/// 20 `askloop resume` processes answer the same pending call (by id) at once; 50 times over,
/// exactly one wins: it alone finishes the run, and the run holds its answer only. The others
/// are refused (a conflict, the run in progress elsewhere, or already answered) or, sending
/// the winner's answer after the win, told that it was already answered with it.
#[test]
fn twenty_processes_racing_to_resume_one_call_have_exactly_one_winner_fifty_times() {
    const PROCESSES: usize = 20;
    const ROUNDS: usize = 50;
    let dir = TestDir::new();
    let store = schema_url(&dir);
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let command = |args: &[&str]| {
        let mut full = vec!["--store", store.as_str()];
        full.extend_from_slice(args);
        dir.command(&full)
    };
    for round in 0..ROUNDS {
        let started = command(&["run", "--json", "--model", &spec, "Summarize my project"])
            .output()
            .unwrap();
        assert!(started.status.success(), "{started:?}");
        let last: Value = serde_json::from_str(
            String::from_utf8(started.stdout)
                .unwrap()
                .lines()
                .last()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(last["type"], "tool-call-suspended", "{last}");
        let run_id = last["runId"].as_str().unwrap().to_owned();

        let children: Vec<_> = (0..PROCESSES)
            .map(|index| {
                let answer = if index % 2 == 0 { "main" } else { "docs" };
                let child = command(&[
                    "resume",
                    &run_id,
                    "--tool-call-id",
                    "c1",
                    "--answer",
                    answer,
                    "--json",
                ])
                .spawn()
                .unwrap();
                (answer, child)
            })
            .collect();
        let outcomes: Vec<(&str, i32, String, String)> = children
            .into_iter()
            .map(|(answer, child)| {
                let output = child.wait_with_output().unwrap();
                (
                    answer,
                    output.status.code().unwrap_or(-1),
                    String::from_utf8(output.stdout).unwrap(),
                    String::from_utf8(output.stderr).unwrap(),
                )
            })
            .collect();
        let winners: Vec<_> = outcomes
            .iter()
            .filter(|(_, _, stdout, _)| stdout.contains(r#""type":"finish""#))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:#?}");
        let winner = winners[0].0;
        assert_eq!(winners[0].1, 0, "round {round}: {outcomes:#?}");
        for (answer, code, stdout, stderr) in &outcomes {
            if stdout.contains(r#""type":"finish""#) {
                continue;
            }
            let refused = (*code == 1
                && (stderr.contains("was applied first; this one changed nothing")
                    || stderr.contains("another process")))
                || (*code == 2 && stderr.contains("already answered"))
                || (*code == 0 && *answer == winner && stderr.contains("already answered"));
            assert!(
                refused,
                "round {round}: a loser ({answer}) exited {code}: {stderr}"
            );
        }

        let shown = command(&["runs", "show", &run_id, "--json"])
            .output()
            .unwrap();
        assert!(shown.status.success(), "{shown:?}");
        let state: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(state["status"], "completed", "round {round}");
        let results = tool_results(&state);
        assert_eq!(results.len(), 1, "round {round}: {results:#?}");
        assert_eq!(results[0]["result"], answered(winner), "round {round}");
    }
}
