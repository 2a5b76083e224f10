//! Issue 31 at the terminal: a bare run id names the one run with it, whatever its resource;
//! an id several resources use is refused naming them, and `--resource` picks one; a new message
//! to a thread whose turn runs is refused (exit 1) with the commands that end that turn.

use askloop_core::store::codec;
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, RunId, RunOptions, RunStore};
use askloop_store::{SqliteStore, Synchronous};
use serde_json::json;

use crate::support::{ASK_THEN_ANSWER, TestDir};

/// Starts, through the library on this test's store, a run of `resource` with the id `run_id`
/// that asks `ASK_THEN_ANSWER`'s question (model SPEC `spec`, so the CLI rebuilds the model).
async fn suspended_run_of(dir: &TestDir, spec: &str, resource: &str, run_id: &str) {
    let store = SqliteStore::open(&dir.path().join("runs.db"), Synchronous::Full)
        .await
        .unwrap();
    let path = spec.strip_prefix("scripted:").unwrap();
    let agent = Agent::builder("assistant")
        .model(ScriptedModel::from_file(path).unwrap())
        .model_spec(spec)
        .tool(AskUser::new())
        .store(store.clone())
        .build()
        .unwrap();
    let output = agent
        .stream_with(
            "Summarize my project",
            RunOptions::new().run_id(run_id).resource(resource),
        )
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(
        output.status,
        askloop_core::RunOutcome::Suspended { .. }
    ));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_bare_run_id_names_its_one_run_and_resource_picks_among_several() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    // Unique: the bare id works, and the commands printed name the resource.
    let unique = dir.run(&[
        "run",
        "--model",
        &spec,
        "--resource",
        "carol",
        "Summarize my project",
    ]);
    let unique = unique.success();
    assert!(
        unique.stdout.contains("--resource carol"),
        "{}",
        unique.stdout
    );
    let run_id = dir.run(&["runs", "list", "--json"]).success().json()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = dir.show(&run_id);
    assert_eq!(shown["resourceId"], "carol");
    dir.run(&["resume", &run_id, "--answer", "main"]).success();

    // Two resources with one run id: the bare id is refused naming them, for every command.
    suspended_run_of(&dir, &spec, "alice", "shared").await;
    suspended_run_of(&dir, &spec, "bob", "shared").await;
    for args in [
        &["resume", "shared", "--answer", "main"][..],
        &["approve", "shared"],
        &["decline", "shared"],
        &["runs", "show", "shared"],
        &["runs", "continue", "shared"],
        &["runs", "cancel", "shared"],
    ] {
        let refused = dir.run(args).code(2);
        for expected in ["alice", "bob", "--resource"] {
            assert!(
                refused.stderr.contains(expected),
                "{args:?}: {}",
                refused.stderr
            );
        }
    }
    // --resource picks one; the other stays as it was.
    let answered = dir
        .run(&[
            "resume",
            "shared",
            "--resource",
            "alice",
            "--answer",
            "main",
        ])
        .success();
    assert!(
        answered.stdout.contains("Summary of the repo."),
        "{}",
        answered.stdout
    );
    let alices = dir
        .run(&["runs", "show", "shared", "--resource", "alice", "--json"])
        .success()
        .json();
    assert_eq!(alices["status"], "completed");
    let bobs = dir
        .run(&["runs", "show", "shared", "--resource", "bob", "--json"])
        .success()
        .json();
    assert_eq!(bobs["status"], "suspended");
    dir.run(&["runs", "cancel", "shared", "--resource", "bob"])
        .success();
    let missing = dir
        .run(&["runs", "show", "shared", "--resource", "dave"])
        .code(2);
    assert!(missing.stderr.contains("not found"), "{}", missing.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_new_message_while_the_threads_turn_runs_is_refused() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    // A run of resource "team"'s thread "plan" left running (its process died, say).
    {
        let store = SqliteStore::open(&dir.path().join("runs.db"), Synchronous::Full)
            .await
            .unwrap();
        let running = codec::decode_state(
            &RunId::new("driver"),
            &json!({
                "formatVersion": 2, "runId": "driver", "threadId": "plan", "resourceId": "team",
                "agentId": "assistant", "model": spec, "status": "running", "historyThrough": null,
                "steps": 0, "pendingStep": null, "usage": {"inputTokens": 0, "outputTokens": 0},
                "error": null, "createdAtMs": 1, "updatedAtMs": 1,
                "messages": [{"role": "user", "text": "first"}],
            })
            .to_string(),
        )
        .unwrap();
        store.insert_run(&running, None).await.unwrap();
        store.close().await;
    }
    let refused = dir
        .run(&[
            "run",
            "--model",
            &spec,
            "--thread",
            "plan",
            "--resource",
            "team",
            "second",
        ])
        .code(1);
    for expected in [
        "thread plan has a turn running (run driver)",
        "runs cancel driver --resource team",
        "runs continue driver --resource team",
    ] {
        assert!(refused.stderr.contains(expected), "{}", refused.stderr);
    }
    let listed = dir.run(&["runs", "list", "--json"]).success().json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "nothing stored");
    // The same thread id of another resource is another thread.
    dir.run(&[
        "run",
        "--model",
        &spec,
        "--thread",
        "plan",
        "--resource",
        "elsewhere",
        "second",
    ])
    .success();
    // Once the turn ended, the thread takes the next message.
    dir.run(&["runs", "cancel", "driver"]).success();
    dir.run(&[
        "run",
        "--model",
        &spec,
        "--thread",
        "plan",
        "--resource",
        "team",
        "second",
    ])
    .success();
}
