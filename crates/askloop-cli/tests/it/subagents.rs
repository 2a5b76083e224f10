//! Agent teams through the binary (issue 35): askloop.toml's `subagents` offer agents to a
//! supervisor as tools; a sub-agent's question or approval waits at the root run, is answered
//! there from another process by the composite call id (`PARENT_CALL~CHILD_CALL`), and the
//! whole tree goes on. Every scenario runs on SQLite and PostgreSQL (`subagent_tests!`).

use serde_json::{Value, json};

use crate::support::{Outcome, TestDir, answered, outcome, tool_results};

/// The supervisor delegates to the researcher (call `d1`), then answers with its finding.
const SUPERVISOR: &str = r#"{"steps":[
  {"text":"Delegating.","toolCalls":[{"id":"d1","name":"researcher","args":{"prompt":"Which repo matters?"}}]},
  {"text":"The team is done."}
]}"#;

/// The researcher asks the user (call `q1`), then reports.
const RESEARCHER: &str = r#"{"steps":[
  {"text":"Researching.\nOne question first.","toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Found it: main."}
]}"#;

/// One scenario's directory, store and what every command gets.
struct Team {
    dir: TestDir,
    store: String,
}

impl Team {
    /// A team on the store `make_store` gives, with askloop.toml `config`, whose `{NAME}`s are
    /// replaced by the SPECs of the scripts `scripts` names.
    fn new(
        make_store: impl FnOnce(&TestDir) -> String,
        config: &str,
        scripts: &[(&str, &str)],
    ) -> Self {
        let dir = TestDir::new();
        let store = make_store(&dir);
        let mut text = config.to_owned();
        for (name, script) in scripts {
            let spec = dir.script(&format!("{name}.json"), script);
            text = text.replace(&format!("{{{name}}}"), &spec);
        }
        dir.write("askloop.toml", &text);
        Self { dir, store }
    }

    /// The supervisor and the researcher of [`SUPERVISOR`] and [`RESEARCHER`].
    fn supervised(make_store: impl FnOnce(&TestDir) -> String) -> Self {
        Self::new(
            make_store,
            "[agents.supervisor]\nmodel = \"{supervisor}\"\ntools = []\nsubagents = [\"researcher\"]\n\
             [agents.researcher]\nmodel = \"{researcher}\"\ndescription = \"Finds facts.\"\n",
            &[("supervisor", SUPERVISOR), ("researcher", RESEARCHER)],
        )
    }

    /// `askloop --store STORE ARGS`, with the test tools.
    fn run(&self, args: &[&str]) -> Outcome {
        let mut full = vec!["--store", self.store.as_str()];
        full.extend_from_slice(args);
        let mut command = self.dir.command(&full);
        command.env("ASKLOOP_TEST_TOOLS", "1");
        outcome(command)
    }

    /// `runs show RUN --json`.
    fn show(&self, run_id: &str) -> Value {
        self.run(&["runs", "show", run_id, "--json"])
            .success()
            .json()
    }

    /// `runs list ARGS --json`: the run ids and agents listed.
    fn list(&self, args: &[&str]) -> Vec<(String, String)> {
        let mut full = vec!["runs", "list", "--json"];
        full.extend_from_slice(args);
        let out = self.run(&full).success();
        out.json()
            .as_array()
            .unwrap()
            .iter()
            .map(|run| {
                (
                    run["runId"].as_str().unwrap().to_owned(),
                    run["agentId"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Starts a run of the supervisor with `--json`: its lines, which end waiting.
    fn start(&self) -> Vec<Value> {
        let out = self
            .run(&[
                "run",
                "--agent",
                "supervisor",
                "--json",
                "Which repo should I look at?",
            ])
            .success();
        out.json_lines()
    }
}

/// The `type`s of the lines after `start`, and the last line's `payload`.
fn last_payload(lines: &[Value]) -> &Value {
    &lines.last().unwrap()["payload"]
}

/// The waiting calls of a stored run: `(toolCallId, kind)`.
fn pending(state: &Value) -> Vec<(String, String)> {
    state["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| {
            (
                call["toolCallId"].as_str().unwrap().to_owned(),
                call["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The text of a stored run's last message.
fn last_text(state: &Value) -> Value {
    state["messages"].as_array().unwrap().last().unwrap()["parts"][0]["text"].clone()
}

/// The results of the calls `call` of a stored run.
fn results_of(state: &Value, call: &str) -> Vec<Value> {
    tool_results(state)
        .into_iter()
        .filter(|result| result["toolCallId"] == call)
        .map(|result| result["result"].clone())
        .collect()
}

pub fn ask_answered_through_the_root_from_another_process(make_store: fn(&TestDir) -> String) {
    let team = Team::supervised(make_store);
    let lines = team.start();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"subagent-chunk"), "{lines:#?}");
    let asked = last_payload(&lines);
    assert_eq!(lines.last().unwrap()["type"], "tool-call-suspended");
    assert_eq!(asked["toolCallId"], "d1~q1", "{asked:#}");
    assert_eq!(asked["subagent"]["path"], json!(["researcher"]));
    assert_eq!(asked["subagent"]["toolCallId"], "q1");
    let root = lines.last().unwrap()["runId"].as_str().unwrap().to_owned();
    let child = asked["subagent"]["runId"].as_str().unwrap().to_owned();
    assert_ne!(root, child);

    // The inbox is the root's: the default listing shows only it, `--parent` its child.
    assert_eq!(
        team.list(&[]),
        [(root.clone(), "supervisor".to_owned())],
        "only the root is listed"
    );
    assert_eq!(
        team.list(&["--parent", &root]),
        [(child.clone(), "researcher".to_owned())]
    );
    assert_eq!(team.list(&["--all"]).len(), 2);
    let state = team.show(&root);
    assert_eq!(pending(&state), [("d1~q1".to_owned(), "answer".to_owned())]);
    assert_eq!(state["children"][0]["runId"], child.as_str(), "{state:#}");
    assert_eq!(state["children"][0]["parentToolCallId"], "d1");

    // For people: who asked, and the command that answers it through the root.
    let human = team.run(&["runs", "show", &root]).success();
    assert!(human.stdout.contains("asked by researcher"), "{human:#?}");
    assert!(
        human.stdout.contains(&format!(
            "child     {child} suspended researcher (tool call d1)"
        )),
        "{human:#?}"
    );
    let child_show = team.run(&["runs", "show", &child]).success();
    assert!(
        child_show.stdout.contains(&format!(
            "parent    run {root} at tool call d1 (a sub-agent's run; its questions wait at root run {root})"
        )),
        "{child_show:#?}"
    );
    let listed = team.run(&["runs", "list"]).success();
    assert!(
        listed.stdout.contains("[researcher] Which repo?"),
        "{listed:#?}"
    );

    // The child itself is answered through its root only.
    let refused = team
        .run(&["resume", &child, "--tool-call-id", "q1", "--answer", "main"])
        .code(2);
    assert!(
        refused.stderr.contains("a sub-agent's run")
            && refused.stderr.contains(&format!("runs show {root}")),
        "{refused:#?}"
    );

    // Another process answers the root with the composite id: the child finishes, then the root.
    let out = team
        .run(&[
            "resume",
            &root,
            "--tool-call-id",
            "d1~q1",
            "--answer",
            "main",
        ])
        .success();
    assert!(out.stdout.contains("The team is done."), "{out:#?}");
    assert!(
        out.stderr.contains("  [researcher] Found it: main."),
        "the sub-agent's text, marked: {out:#?}"
    );
    let state = team.show(&root);
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(last_text(&state), "The team is done.");
    let delegated = results_of(&state, "d1");
    assert_eq!(delegated.len(), 1, "{state:#}");
    assert_eq!(delegated[0], "Found it: main.", "{state:#}");
    let child_state = team.show(&child);
    assert_eq!(child_state["status"], "completed", "{child_state:#}");
    assert_eq!(child_state["parent"]["runId"], root.as_str());
    assert_eq!(results_of(&child_state, "q1"), [answered("main")]);
}

pub fn ask_answered_with_the_printed_command(make_store: fn(&TestDir) -> String) {
    let team = Team::supervised(make_store);
    let store = team.store.clone();
    let out = team
        .run(&[
            "run",
            "--agent",
            "supervisor",
            "Which repo should I look at?",
        ])
        .success();
    assert!(out.stdout.contains("asked by researcher"), "{out:#?}");
    assert!(
        out.stderr.contains("  [researcher] Researching.")
            && out.stderr.contains("  [researcher] One question first."),
        "the sub-agent's lines, marked: {out:#?}"
    );
    let command = out
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("answer with: "))
        .unwrap_or_else(|| panic!("no command: {out:#?}"));
    assert!(command.contains("d1~q1"), "{command}");
    assert!(command.contains(&store), "{command}");
    let (command, placeholder) = command.split_once(" --answer ").unwrap();
    assert!(placeholder.starts_with("'<"), "{placeholder}");
    let pasted = outcome(team.dir.shell(&format!("{command} --answer main"))).success();
    assert!(pasted.stdout.contains("The team is done."), "{pasted:#?}");
    assert!(
        pasted
            .stderr
            .contains("  [researcher] « ask_user: User answered: main"),
        "{pasted:#?}"
    );
}

pub fn a_childs_approval_is_given_through_the_root(make_store: fn(&TestDir) -> String) {
    let team = Team::new(
        make_store,
        "[agents.supervisor]\nmodel = \"{supervisor}\"\ntools = []\nsubagents = [\"payer\"]\n\
         [agents.payer]\nmodel = \"{payer}\"\ntools = []\nrequire_approval = true\n",
        &[
            (
                "supervisor",
                r#"{"steps":[
                  {"toolCalls":[{"id":"d1","name":"payer","args":{"prompt":"Pay ACME 5 dollars."}}]},
                  {"text":"Payment handled."}]}"#,
            ),
            (
                "payer",
                r#"{"steps":[
                  {"toolCalls":[{"id":"p1","name":"test_pay","args":{"amount_cents":500,"to":"ACME"}}]},
                  {"text":"Paid."}]}"#,
            ),
        ],
    );
    let lines = team.start();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-approval", "{lines:#?}");
    assert_eq!(last["payload"]["toolCallId"], "d1~p1");
    assert_eq!(last["payload"]["subagent"]["path"], json!(["payer"]));
    let root = last["runId"].as_str().unwrap().to_owned();
    let human = team.run(&["runs", "show", &root]).success();
    assert!(
        human
            .stdout
            .contains("(asked by payer; approve or decline)"),
        "{human:#?}"
    );

    // The approval goes to the root (the only waiting approval: no id needed); the tool then
    // asks its own form, which waits at the root too.
    let out = team.run(&["approve", &root, "--json"]).success();
    let lines = out.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-suspended", "{lines:#?}");
    assert_eq!(last["payload"]["toolCallId"], "d1~p1");
    assert_eq!(
        pending(&team.show(&root)),
        [("d1~p1".to_owned(), "answer".to_owned())]
    );
    team.run(&[
        "resume",
        &root,
        "--tool-call-id",
        "d1~p1",
        "--answer-json",
        r#"{"amount_cents": 500, "confirmed": true, "speed": "standard"}"#,
    ])
    .success();
    let state = team.show(&root);
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(results_of(&state, "d1"), [json!("Paid.")]);
    let child = &team.list(&["--parent", &root])[0].0;
    let child_state = team.show(child);
    let audit = &tool_results(&child_state)[0]["audit"];
    assert_eq!(audit[0]["action"], "approve", "{child_state:#}");
    assert_eq!(audit[0]["by"], "cli:tester");
}

pub fn two_children_waiting_at_once_answered_in_reverse_order(make_store: fn(&TestDir) -> String) {
    let team = Team::new(
        make_store,
        "[agents.supervisor]\nmodel = \"{supervisor}\"\ntools = []\n\
         subagents = [\"researcher\", \"booker\"]\n\
         [agents.researcher]\nmodel = \"{researcher}\"\n[agents.booker]\nmodel = \"{booker}\"\n",
        &[
            (
                "supervisor",
                r#"{"steps":[
                  {"toolCalls":[
                    {"id":"d1","name":"researcher","args":{"prompt":"Which repo?"}},
                    {"id":"d2","name":"booker","args":{"prompt":"Book a room."}}]},
                  {"text":"Both done."}]}"#,
            ),
            ("researcher", RESEARCHER),
            (
                "booker",
                r#"{"steps":[
                  {"toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"Which day?"}}]},
                  {"text":"Booked for Monday."}]}"#,
            ),
        ],
    );
    let lines = team.start();
    let root = lines.last().unwrap()["runId"].as_str().unwrap().to_owned();
    let state = team.show(&root);
    let mut waiting = pending(&state);
    waiting.sort();
    assert_eq!(
        waiting,
        [
            ("d1~q1".to_owned(), "answer".to_owned()),
            ("d2~q1".to_owned(), "answer".to_owned())
        ],
        "{state:#}"
    );
    assert_eq!(team.list(&["--parent", &root]).len(), 2);

    // The second first: the booker finishes, the root still waits for the researcher.
    team.run(&[
        "resume",
        &root,
        "--tool-call-id",
        "d2~q1",
        "--answer",
        "Monday",
    ])
    .success();
    let state = team.show(&root);
    assert_eq!(state["status"], "suspended", "{state:#}");
    assert_eq!(pending(&state), [("d1~q1".to_owned(), "answer".to_owned())]);
    // The one call waiting now, answered by the run id alone: askloop says which it answered.
    let out = team.run(&["resume", &root, "--answer", "docs"]).success();
    assert!(
        out.stderr
            .contains("answered q1 of researcher: \"Which repo?\""),
        "{out:#?}"
    );
    let state = team.show(&root);
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(results_of(&state, "d1"), [json!("Found it: main.")]);
    assert_eq!(results_of(&state, "d2"), [json!("Booked for Monday.")]);
    assert_eq!(last_text(&state), "Both done.");
    for (child, _) in team.list(&["--parent", &root]) {
        assert_eq!(team.show(&child)["status"], "completed");
    }
}

pub fn cancel_of_the_root_cancels_the_waiting_child(make_store: fn(&TestDir) -> String) {
    let team = Team::supervised(make_store);
    let lines = team.start();
    let root = lines.last().unwrap()["runId"].as_str().unwrap().to_owned();
    let child = last_payload(&lines)["subagent"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    team.run(&["runs", "cancel", &root]).success();
    assert_eq!(team.show(&root)["status"], "cancelled");
    let child_state = team.show(&child);
    assert_eq!(child_state["status"], "cancelled", "{child_state:#}");
    assert!(pending(&child_state).is_empty(), "{child_state:#}");
    // Nothing waits anywhere: answers are refused.
    team.run(&[
        "resume",
        &root,
        "--tool-call-id",
        "d1~q1",
        "--answer",
        "main",
    ])
    .code(2);
}

/// Expands each scenario on one store: `subagent_tests!(NAME, |dir: &TestDir| URL)`.
macro_rules! subagent_tests {
    ($store:ident, $make_store:expr) => {
        mod $store {
            use crate::support::TestDir;

            fn store(dir: &TestDir) -> String {
                ($make_store)(dir)
            }

            #[test]
            fn issue35_ask_answered_through_the_root_from_another_process() {
                super::ask_answered_through_the_root_from_another_process(store);
            }

            #[test]
            fn issue35_ask_answered_with_the_printed_command() {
                super::ask_answered_with_the_printed_command(store);
            }

            #[test]
            fn issue35_a_childs_approval_is_given_through_the_root() {
                super::a_childs_approval_is_given_through_the_root(store);
            }

            #[test]
            fn issue35_two_children_waiting_at_once_answered_in_reverse_order() {
                super::two_children_waiting_at_once_answered_in_reverse_order(store);
            }

            #[test]
            fn issue35_cancel_of_the_root_cancels_the_waiting_child() {
                super::cancel_of_the_root_cancels_the_waiting_child(store);
            }

            #[test]
            fn issue35_kill_during_the_childs_model_call_then_recover_the_root() {
                let crash = crate::crash::Crash::new(store);
                super::kill_during_the_childs_model_call_then_recover_the_root(&crash);
            }
        }
    };
}

subagent_tests!(sqlite, |dir: &TestDir| dir.store_url());
subagent_tests!(postgres, |dir: &TestDir| crate::postgres::schema_url(dir));

/// A process answering the researcher's question through the root is killed during the
/// researcher's next model call; `runs recover` (which lists the root only) continues the root,
/// whose call of the researcher takes the child over once its lease ran out: the answered
/// question is not asked again, and the tree completes.
pub fn kill_during_the_childs_model_call_then_recover_the_root(crash: &crate::crash::Crash) {
    let dir = crash.dir();
    let supervisor = dir.script("supervisor.json", SUPERVISOR);
    let researcher = dir.script("researcher.json", RESEARCHER);
    crash.config(&format!(
        "[agents.supervisor]\nmodel = \"{supervisor}\"\ntools = []\nsubagents = [\"researcher\"]\n\
         [agents.researcher]\nmodel = \"{researcher}\"\n"
    ));
    let out = crash
        .run(&["run", "--agent", "supervisor", "--json", "Which repo?"])
        .success();
    let lines = out.json_lines();
    let root = lines.last().unwrap()["runId"].as_str().unwrap().to_owned();
    let child = lines.last().unwrap()["payload"]["subagent"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The first model call of the answering process is the researcher's (its second step).
    crash.kill_at(
        &[
            "resume",
            &root,
            "--tool-call-id",
            "d1~q1",
            "--answer",
            "main",
        ],
        "model-stream#1",
    );
    assert_eq!(crash.show(&root)["status"], "running");
    assert_eq!(crash.show(&child)["status"], "running");
    crash.wait_for_expiry(&root);
    crash.wait_for_expiry(&child);
    let listed = crash.run(&["runs", "recover", "--list"]).success();
    assert!(listed.stdout.contains(&root), "{listed:#?}");
    assert!(
        !listed.stdout.contains(&child),
        "a child is recovered through its root: {listed:#?}"
    );
    let out = crash.run(&["runs", "recover"]).success();
    assert!(
        !out.stdout.contains("Which repo?"),
        "the answered question is not asked again: {out:#?}"
    );
    let state = crash.show(&root);
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(results_of(&state, "d1"), [json!("Found it: main.")]);
    let child_state = crash.show(&child);
    assert_eq!(child_state["status"], "completed", "{child_state:#}");
    assert_eq!(
        results_of(&child_state, "q1"),
        [answered("main")],
        "the child's question was answered once: {child_state:#}"
    );
    assert!(pending(&crash.show(&root)).is_empty());
}

#[test]
fn issue35_sub_agents_nested_too_deep_or_in_a_cycle_are_config_errors() {
    let dir = TestDir::new();
    let spec = dir.script("s.json", crate::support::JUST_TEXT);
    let chain = |ids: &[&str]| {
        let mut text = format!("model = \"{spec}\"\n");
        for pair in ids.windows(2) {
            text.push_str(&format!(
                "[agents.{}]\nsubagents = [\"{}\"]\n",
                pair[0], pair[1]
            ));
        }
        text.push_str(&format!("[agents.{}]\n", ids[ids.len() - 1]));
        text
    };
    // Three levels below the root run: fine.
    dir.write("askloop.toml", &chain(&["l0", "l1", "l2", "l3"]));
    dir.run(&["run", "--agent", "l0", "hi"]).success();
    // Four: refused before anything runs, naming the path.
    dir.write("askloop.toml", &chain(&["l0", "l1", "l2", "l3", "l4"]));
    let out = dir.run(&["run", "--agent", "l1", "hi"]).code(2);
    assert!(
        out.stderr.contains(
            "agents.l0.subagents: sub-agents nest 4 levels deep (l0 → l1 → l2 → l3 → l4), \
             more than the limit of 3"
        ),
        "{out:#?}"
    );
    dir.write(
        "askloop.toml",
        &format!(
            "model = \"{spec}\"\n[agents.a]\nsubagents = [\"b\"]\n[agents.b]\nsubagents = [\"a\"]\n\
             [agents.c]\nsubagents = [\"ghost\"]\n"
        ),
    );
    let out = dir.run(&["run", "--agent", "c", "hi"]).code(2);
    assert!(
        out.stderr
            .contains("agents.a.subagents: sub-agents form a cycle: a → b → a"),
        "{out:#?}"
    );
    assert!(
        out.stderr
            .contains("agents.c.subagents: unknown agent \"ghost\""),
        "{out:#?}"
    );
}
