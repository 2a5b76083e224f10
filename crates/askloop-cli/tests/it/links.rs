//! `askloop runs link` (issue 34): the link it prints is answered through `askloop serve`
//! once; `--revoke` kills the call's links; the URL starts with `--base-url`, else
//! `[server] public_url`; a call that does not wait gets no link; an answer through a link
//! acts as the operator who made it (`cli:NAME`). On SQLite and PostgreSQL.

use serde_json::json;

use crate::serve::{Served, block_on, start_suspended, status};
use crate::support::{ASK_THEN_ANSWER, TestDir, outcome};

/// `askloop --store STORE ARGS` in `dir`.
fn askloop(dir: &TestDir, store: &str, args: &[&str]) -> crate::support::Outcome {
    let mut full = vec!["--store", store];
    full.extend_from_slice(args);
    outcome(dir.command(&full))
}

fn issue34_runs_link_prints_a_link_the_server_answers_once(dir: &TestDir, store: &str) {
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    dir.write(
        "askloop.toml",
        "[server]\npublic_url = \"https://askloop.example.com/\"\nanswer_link_max_hours = 2\n",
    );
    let served = Served::start(dir, store, &spec, &[], &[]);
    let client = reqwest::Client::new();
    block_on(async {
        let run_id = start_suspended(&served.base).await;
        // The default URL: [server] public_url.
        let listed = askloop(dir, store, &["runs", "link", &run_id]).success();
        assert!(
            listed
                .stdout
                .starts_with("https://askloop.example.com/answer/al_"),
            "{}",
            listed.stdout
        );
        assert!(listed.stderr.contains("--revoke"), "{}", listed.stderr);
        let first = askloop(
            dir,
            store,
            &[
                "runs",
                "link",
                &run_id,
                "--tool-call-id",
                "c1",
                "--base-url",
                &served.base,
                "--expires-in",
                "30m",
                "--role",
                "ops",
            ],
        )
        .success();
        let first = first.stdout.trim().to_owned();
        assert!(
            first.starts_with(&format!("{}/answer/al_", served.base)),
            "{first}"
        );
        assert_eq!(client.get(&first).send().await.unwrap().status(), 200);

        let revoked = askloop(dir, store, &["runs", "link", &run_id, "--revoke"]).success();
        assert!(
            revoked.stderr.contains("revoked 2 link(s) of tool call c1"),
            "{}",
            revoked.stderr
        );
        assert_eq!(client.get(&first).send().await.unwrap().status(), 410);

        let second = askloop(
            dir,
            store,
            &[
                "runs",
                "link",
                &run_id,
                "--base-url",
                &served.base,
                "--as",
                "linker",
            ],
        )
        .success();
        let second = second.stdout.trim().to_owned();
        let page = client.get(&second).send().await.unwrap();
        assert_eq!(page.status(), 200);
        assert!(page.text().await.unwrap().contains("Which repo?"));
        let answered = client
            .post(&second)
            .json(&json!({"resumeData": "main"}))
            .send()
            .await
            .unwrap();
        assert_eq!(answered.status(), 200);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while status(&served.base, &run_id).await != "completed" {
            assert!(
                std::time::Instant::now() < deadline,
                "the run did not complete"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        // The link acted as its issuer, the operator, through the link's route.
        let shown = askloop(dir, store, &["runs", "show", &run_id]).success();
        assert!(shown.stdout.contains("by cli:linker"), "{}", shown.stdout);
        assert!(shown.stdout.contains("(link "), "{}", shown.stdout);
        let again = client
            .post(&second)
            .json(&json!({"resumeData": "docs"}))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 410);

        let refused = askloop(
            dir,
            store,
            &["runs", "link", &run_id, "--tool-call-id", "c1"],
        );
        assert_ne!(refused.code, 0, "{}", refused.stderr);
        assert!(
            refused.stderr.contains("already answered"),
            "{}",
            refused.stderr
        );
    });
}

#[test]
fn issue34_runs_link_on_sqlite() {
    let dir = TestDir::new();
    let store = dir.store_url();
    issue34_runs_link_prints_a_link_the_server_answers_once(&dir, &store);
}

#[test]
fn issue34_runs_link_on_postgres() {
    let dir = TestDir::new();
    let store = crate::postgres::schema_url(&dir);
    issue34_runs_link_prints_a_link_the_server_answers_once(&dir, &store);
}
