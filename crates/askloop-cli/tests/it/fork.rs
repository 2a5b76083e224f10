//! `askloop runs fork` (issue 34): a run forked at an answered question goes on with the new
//! answer in a new run; the original is untouched; a refused fork creates nothing.

use serde_json::json;

use crate::support::{ASK_THEN_ANSWER, TestDir, answered, chunk_types, tool_results};

#[test]
fn issue34_runs_fork_goes_on_with_the_new_answer_and_leaves_the_original() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let run_id = dir.start_suspended(&spec);
    dir.run(&["resume", &run_id, "--answer", "main", "--json"])
        .success();
    let before = dir.show(&run_id);
    assert_eq!(before["status"], "completed");

    let refused = dir
        .run(&[
            "runs",
            "fork",
            &run_id,
            "--tool-call-id",
            "zz",
            "--answer",
            "docs",
        ])
        .code(2);
    assert!(
        refused.stderr.contains("has no question zz"),
        "{}",
        refused.stderr
    );
    let listed = dir.run(&["runs", "list", "--json"]).success().json();
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "a refused fork creates nothing: {listed}"
    );

    // The option's number reads as its label, as `resume` reads it.
    let out = dir
        .run(&[
            "runs",
            "fork",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "2",
            "--json",
        ])
        .success();
    let lines = out.json_lines();
    let types = chunk_types(&lines);
    assert_eq!(types[..2], ["tool-call", "tool-result"], "{lines:#?}");
    assert_eq!(types.last(), Some(&"finish"));
    assert_eq!(lines[1]["payload"]["result"], answered("docs"));
    let fork_id = lines[0]["runId"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, run_id);

    assert_eq!(dir.show(&run_id), before, "the original is untouched");
    let fork = dir.show(&fork_id);
    assert_eq!(fork["status"], "completed");
    assert_eq!(
        fork["forkedFrom"],
        json!({"runId": run_id, "toolCallId": "c1"})
    );
    assert_ne!(fork["threadId"], before["threadId"]);
    let results = tool_results(&fork);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["answer"], "docs");
    let shown = dir.run(&["runs", "show", &fork_id]).success();
    assert!(
        shown
            .stdout
            .contains(&format!("from run {run_id} at tool call c1")),
        "{}",
        shown.stdout
    );
}
