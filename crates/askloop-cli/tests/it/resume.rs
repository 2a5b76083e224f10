//! `askloop resume`: a second process answers, refusals leave the run as it was.

use serde_json::json;

use crate::support::{ASK_THEN_ANSWER, TestDir, answered, chunk_types, tool_results};

/// Two questions in one step: `c1` (free text) and `c2` (multi-select).
const TWO_QUESTIONS: &str = r#"{"steps":[
  {"toolCalls":[
    {"id":"c1","name":"ask_user","args":{"question":"Your name?"}},
    {"id":"c2","name":"ask_user","args":{"question":"Which days?","options":[{"label":"mon"},{"label":"tue"},{"label":"wed"}],"selectionMode":"multi_select"}}
  ]},
  {"text":"Booked."}
]}"#;

#[test]
fn issue_2_a_second_process_resumes_the_run_on_the_same_sqlite_file() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let run_id = dir.start_suspended(&spec);

    let out = dir
        .run(&["resume", &run_id, "--answer", "main", "--json"])
        .success();
    let lines = out.json_lines();
    assert_eq!(
        chunk_types(&lines),
        [
            "tool-call",
            "tool-result",
            "step-finish",
            "step-start",
            "text-delta",
            "step-finish",
            "finish"
        ]
    );
    assert_eq!(lines[0]["payload"]["toolCallId"], "c1");
    assert_eq!(lines[1]["payload"]["toolCallId"], "c1");
    assert_eq!(lines[1]["payload"]["result"], answered("main"));
    let finish = &lines[6]["payload"];
    assert_eq!(finish["output"]["text"], "Summary of the repo.");
    assert_eq!(finish["stepResult"]["reason"], "stop");

    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    assert_eq!(tool_results(&state)[0]["result"], answered("main"));
    assert_eq!(state["pending"], json!([]));
}

#[test]
fn an_invalid_answer_names_the_labels_and_leaves_the_run_suspended() {
    let dir = TestDir::new();
    dir.labels_only();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let run_id = dir.start_suspended(&spec);

    let out = dir.run(&["resume", &run_id, "--answer", "trunk"]).code(2);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr.starts_with("error: invalid answer"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(r#""main", "docs""#), "{}", out.stderr);
    assert!(out.stderr.contains(r#""trunk""#), "{}", out.stderr);

    let state = dir.show(&run_id);
    assert_eq!(state["status"], "suspended");
    assert_eq!(state["pending"][0]["toolCallId"], "c1");

    // --json changes nothing about a refusal: no chunk, one line on stderr.
    let json = dir
        .run(&["resume", &run_id, "--answer-json", "42", "--json"])
        .code(2);
    assert!(json.stdout.is_empty());
    assert!(json.stderr.contains("got a number"), "{}", json.stderr);
}

#[test]
fn unknown_run_ids_and_tool_call_ids_are_invalid_input() {
    let dir = TestDir::new();
    let out = dir.run(&["resume", "no-such-run", "--answer", "x"]).code(2);
    assert_eq!(
        out.stderr,
        format!(
            "error: run no-such-run not found in {} (there is no database there yet)\n",
            dir.store_url()
        )
    );

    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let run_id = dir.start_suspended(&spec);
    let out = dir
        .run(&[
            "resume",
            &run_id,
            "--answer",
            "main",
            "--tool-call-id",
            "c9",
        ])
        .code(2);
    assert!(
        out.stderr.contains("no pending tool call c9"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("pending: c1"), "{}", out.stderr);
}

#[test]
fn two_pending_questions_need_a_tool_call_id() {
    let dir = TestDir::new();
    dir.labels_only();
    let spec = dir.script("two.json", TWO_QUESTIONS);
    let run_id = dir.start_suspended(&spec);

    let out = dir.run(&["resume", &run_id, "--answer", "Ada"]).code(2);
    assert!(
        out.stderr.contains("2 pending tool calls"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("c1, c2"), "{}", out.stderr);
    assert!(out.stderr.contains("--tool-call-id"), "{}", out.stderr);
    assert_eq!(dir.show(&run_id)["pending"].as_array().unwrap().len(), 2);

    // A multi-select answer must name its labels (issue 10: one `--answer` is one label).
    let out = dir
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c2",
            "--answer",
            "mon, fri",
        ])
        .code(2);
    assert!(
        out.stderr.contains(r#""fri" is not one of the labels"#),
        "{}",
        out.stderr
    );

    let first = dir
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "Ada",
            "--json",
        ])
        .success();
    // The answered call again, its result, then every call still waiting (c2) again.
    assert_eq!(
        chunk_types(&first.json_lines()),
        ["tool-call", "tool-result", "tool-call-suspended"]
    );
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "suspended");
    assert_eq!(state["pending"][0]["toolCallId"], "c2");

    // Human mode: the run still waits on c2, and says so.
    let second = dir
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c2",
            "--answer-json",
            r#"["tue","mon"]"#,
        ])
        .success();
    assert_eq!(second.stdout, "Booked.\n");
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    let results = tool_results(&state);
    assert_eq!(results[0]["result"], answered("Ada"));
    assert_eq!(results[1]["result"], answered("tue, mon"));
}

#[test]
fn invalid_answer_json_is_refused_before_anything_happens() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let run_id = dir.start_suspended(&spec);
    let out = dir
        .run(&["resume", &run_id, "--answer-json", "[main"])
        .code(2);
    assert!(
        out.stderr.contains("--answer-json is not valid JSON"),
        "{}",
        out.stderr
    );
    let out = dir.run(&["resume", &run_id]).code(2);
    assert!(out.stderr.contains("no answer given"), "{}", out.stderr);
    assert_eq!(dir.show(&run_id)["status"], "suspended");
}

#[test]
fn resuming_twice_is_refused() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let run_id = dir.start_suspended(&spec);
    dir.run(&["resume", &run_id, "--answer", "docs"]).success();
    let out = dir.run(&["resume", &run_id, "--answer", "main"]).code(2);
    assert!(
        out.stderr.contains("is completed, not suspended"),
        "{}",
        out.stderr
    );
    let out = dir
        .run(&[
            "resume",
            &run_id,
            "--answer",
            "main",
            "--tool-call-id",
            "c1",
        ])
        .code(2);
    assert!(out.stderr.contains("already answered"), "{}", out.stderr);
    assert_eq!(tool_results(&dir.show(&run_id)).len(), 1);
}

#[test]
fn the_recorded_model_spec_works_from_another_directory_and_model_overrides_it() {
    let dir = TestDir::new();
    dir.write("scripts/ask.json", ASK_THEN_ANSWER);
    let store = dir.store_url();
    let mut start = dir.command(&[
        "--store",
        &store,
        "run",
        "--json",
        "--model",
        "scripted:scripts/ask.json",
        "Hi",
    ]);
    start.current_dir(dir.path());
    let started = crate::support::outcome(start).success();
    let run_id = started.json_lines()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        dir.show(&run_id)["model"],
        format!("scripted:{}", dir.path().join("scripts/ask.json").display()).as_str()
    );

    // Another directory: the relative path was recorded as an absolute one.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let mut resume = dir.command(&["--store", &store, "resume", &run_id, "--answer", "main"]);
    resume.current_dir(&elsewhere);
    let out = crate::support::outcome(resume).success();
    assert_eq!(out.stdout, "Summary of the repo.\n");

    // --model overrides the recorded SPEC.
    let run_id = dir.start_suspended(&dir.script("ask2.json", ASK_THEN_ANSWER));
    let other = dir.script(
        "other.json",
        r#"{"steps":[{"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"?","options":[{"label":"main"}]}}]},{"text":"From the other script."}]}"#,
    );
    let out = dir
        .run(&["resume", &run_id, "--answer", "main", "--model", &other])
        .success();
    assert_eq!(out.stdout, "From the other script.\n");
}

#[test]
fn answers_take_one_set_of_forms_and_the_model_gets_exact_labels() {
    let dir = TestDir::new();
    dir.labels_only();
    let spec = dir.script("two.json", TWO_QUESTIONS);
    let run_id = dir.start_suspended(&spec);
    let resume = |args: &[&str]| {
        let mut full = vec!["resume", run_id.as_str()];
        full.extend_from_slice(args);
        full.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>()
    };
    let args = resume(&["--tool-call-id", "c2", "--answer", "Fri"]);
    let refused = dir
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .code(2);
    assert!(
        refused.stderr.contains(
            r#"invalid answer for ask_user call c2: "Fri" is not one of the labels "mon", "tue", "wed" or their numbers 1 to 3"#
        ),
        "{}",
        refused.stderr
    );
    // --answer repeated for a multi-select: a label in another case, a number.
    let args = resume(&["--tool-call-id", "c2", "--answer", "TUE", "--answer", "1"]);
    dir.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .success();
    // A long free text from stdin: its trailing newline is not part of the answer.
    let long = format!("{}\nend", "a".repeat(200_000));
    let args = resume(&["--tool-call-id", "c1", "--answer-file", "-"]);
    dir.run_with_input(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &format!("{long}\n"),
    )
    .success();
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    let results = tool_results(&state);
    assert_eq!(results[0]["result"], answered(&long));
    assert_eq!(results[1]["result"], answered("tue, mon"));
}

#[test]
fn an_answer_file_is_read_without_its_final_newline() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let run_id = dir.start_suspended(&spec);
    let file = dir.write("answer.txt", "DOCS\n");
    let file = file.to_str().unwrap();
    dir.run(&["resume", &run_id, "--answer-file", file])
        .success();
    assert_eq!(
        tool_results(&dir.show(&run_id))[0]["result"],
        answered("docs")
    );
    let missing = dir
        .run(&["resume", &run_id, "--answer-file", "/nonexistent/answer"])
        .code(2);
    assert!(
        missing.stderr.contains("--answer-file /nonexistent/answer"),
        "{}",
        missing.stderr
    );
}

/// One pick-one question taking own words, with seven options, two alike ignoring case.
const SEVEN_OPTIONS: &str = r#"{"steps":[
  {"toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"Which?","options":[
    {"label":"alpha"},{"label":"beta"},{"label":"gamma"},{"label":"Gamma"},{"label":"delta"},
    {"label":"epsilon"},{"label":"zeta"}]}}]},
  {"text":"Done."}
]}"#;

#[test]
fn issue33_findings_a_number_out_of_range_a_blank_answer_and_the_call_state_first() {
    let dir = TestDir::new();
    let spec = dir.script("seven.json", SEVEN_OPTIONS);
    let run_id = dir.start_suspended(&spec);
    let resume = |answer: &str| {
        dir.run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "q1",
            "--answer",
            answer,
        ])
    };
    // A: a number that is no option's number is refused, saying how to give it as own words.
    let out = resume("99").code(2);
    assert!(
        out.stderr
            .contains("there is no option 99: the options are 1 to 7"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(r#"--answer-json '{"other":"99"}'"#),
        "{}",
        out.stderr
    );
    // B: a blank answer is empty, and own words are welcome.
    for blank in ["", "   ", "\t"] {
        let out = resume(blank).code(2);
        assert!(out.stderr.contains("the answer is empty"), "{}", out.stderr);
        assert!(
            out.stderr.contains("own words are welcome"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(dir.show(&run_id)["status"], "suspended");
    // C: once answered, an ambiguous label is refused as already answered.
    dir.run(&[
        "resume",
        &run_id,
        "--tool-call-id",
        "q1",
        "--answer-json",
        r#"{"other":"99"}"#,
    ])
    .success();
    assert_eq!(tool_results(&dir.show(&run_id)).len(), 1);
    let out = resume("GAMMA").code(2);
    assert!(out.stderr.contains("already answered"), "{}", out.stderr);
    assert!(!out.stderr.contains("matches several"), "{}", out.stderr);
    // D: the own words again as plain text are the same answer.
    resume("99").success();
}
