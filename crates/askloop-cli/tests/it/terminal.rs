//! `askloop` on a terminal (a pseudo-terminal): questions are asked with prompts, answered with
//! keys, and the run goes on to its end in the same process.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use rustix::termios::{Winsize, tcsetwinsize};

use crate::support::{TestDir, answered, tool_results};

const DOWN: &str = "\x1b[B";
const ENTER: &str = "\r";
const SPACE: &str = " ";

/// The demo script of the README.
const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo.json");

/// A process whose stdin, stdout and stderr are one pseudo-terminal, and that terminal's other
/// end.
struct Terminal {
    child: Child,
    keys: File,
    output: mpsc::Receiver<Vec<u8>>,
    seen: String,
}

impl Terminal {
    fn spawn(dir: &TestDir, args: &[&str]) -> Self {
        Self::spawn_with(dir, args, &[])
    }

    /// As [`Terminal::spawn`], with environment variables `env` set.
    fn spawn_with(dir: &TestDir, args: &[&str], env: &[(&str, &str)]) -> Self {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let size = Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        tcsetwinsize(&master, size).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        let store = dir.store_url();
        let mut full = vec!["--store", store.as_str()];
        full.extend_from_slice(args);
        let mut command = dir.command(&full);
        command.envs(env.iter().copied());
        command
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let child = command.spawn().unwrap();
        // Close this process's copies of the terminal's process end.
        drop(command);
        let keys = File::from(master);
        let mut reader = keys.try_clone().unwrap();
        let (sender, output) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buffer = [0; 4096];
            // Reading fails (EIO) once the process has exited and closed the terminal.
            while let Ok(read @ 1..) = reader.read(&mut buffer) {
                if sender.send(buffer[..read].to_vec()).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            keys,
            output,
            seen: String::new(),
        }
    }

    /// Waits until the terminal shows `text` (after what earlier waits consumed).
    fn expect(&mut self, text: &str) {
        loop {
            if let Some(at) = self.seen.find(text) {
                self.seen.drain(..at + text.len());
                return;
            }
            match self.output.recv_timeout(Duration::from_secs(60)) {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(error) => panic!("{error} while waiting for {text:?}; shown: {:?}", self.seen),
            }
        }
    }

    /// Types keys.
    fn send(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
    }

    /// Waits for the process to exit and returns its exit status.
    fn wait(mut self) -> Option<i32> {
        self.child.wait().unwrap().code()
    }
}

#[test]
fn run_on_a_terminal_asks_with_select_and_multi_select_prompts() {
    let dir = TestDir::new();
    let spec = format!("scripted:{DEMO}");
    let mut terminal = Terminal::spawn(&dir, &["run", "--model", &spec, "Help me plan a trip"]);
    terminal.expect("Happy to help plan a trip!");
    terminal.expect("Where would you like to go?");
    terminal.expect("Reykjavik");
    terminal.send(&format!("{DOWN}{ENTER}"));
    terminal.expect("User answered: Kyoto");

    terminal.expect("What should the trip include?");
    terminal.expect("nightlife");
    // Nothing selected: the prompt refuses and stays.
    terminal.send(ENTER);
    terminal.expect("select at least one");
    terminal.send(&format!("{SPACE}{DOWN}{DOWN}{SPACE}{ENTER}"));
    terminal.expect("User answered: food, hiking");
    terminal.expect("Here is a three-day outline");
    assert_eq!(terminal.wait(), Some(0));

    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let state = dir.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(state["status"], "completed");
    assert_eq!(
        tool_results(&state)
            .iter()
            .map(|result| result["result"].clone())
            .collect::<Vec<_>>(),
        [answered("Kyoto"), answered("food, hiking")]
    );
}

#[test]
fn a_free_text_question_asks_again_until_the_answer_is_not_empty() {
    let dir = TestDir::new();
    let spec = dir.script(
        "name.json",
        r#"{"steps":[{"toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"What is your name?"}}]},{"text":"Nice to meet you."}]}"#,
    );
    let mut terminal = Terminal::spawn(&dir, &["run", "--model", &spec, "Hi"]);
    terminal.expect("What is your name?");
    terminal.send(ENTER);
    terminal.expect("the answer is empty");
    terminal.send(&format!("Ada{ENTER}"));
    terminal.expect("User answered: Ada");
    terminal.expect("Nice to meet you.");
    assert_eq!(terminal.wait(), Some(0));
}

#[test]
fn issue35_a_sub_agents_question_is_asked_on_the_terminal_saying_who_asks() {
    let dir = TestDir::new();
    let supervisor = dir.script(
        "supervisor.json",
        r#"{"steps":[{"toolCalls":[{"id":"d1","name":"researcher","args":{"prompt":"Which repo?"}}]},{"text":"The team is done."}]}"#,
    );
    let researcher = dir.script(
        "researcher.json",
        r#"{"steps":[{"text":"Researching.","toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},{"text":"Found it: main."}]}"#,
    );
    dir.write(
        "askloop.toml",
        &format!(
            "[agents.supervisor]\nmodel = \"{supervisor}\"\ntools = []\nsubagents = [\"researcher\"]\n\
             [agents.researcher]\nmodel = \"{researcher}\"\n"
        ),
    );
    let mut terminal = Terminal::spawn(&dir, &["run", "--agent", "supervisor", "Go"]);
    terminal.expect("[researcher] Researching.");
    terminal.expect("Which repo?");
    terminal.expect("answers tool call d1~q1, asked by researcher");
    terminal.send(ENTER);
    terminal.expect("[researcher] « ask_user: User answered: main");
    terminal.expect("[researcher] Found it: main.");
    terminal.expect("The team is done.");
    assert_eq!(terminal.wait(), Some(0));
}

#[test]
fn escape_at_a_prompt_leaves_the_question_for_later_and_resume_asks_again() {
    let dir = TestDir::new();
    let spec = format!("scripted:{DEMO}");
    let mut terminal = Terminal::spawn(&dir, &["run", "--model", &spec, "Help me plan a trip"]);
    terminal.expect("Where would you like to go?");
    terminal.expect("Reykjavik");
    terminal.send("\x1b");
    // Esc leaves the question for later: inquire's "<canceled>" would read as a cancelled run.
    terminal.expect("<left for later>");
    // As without a terminal: the run waits, the command says how to answer, exit status 0
    // (Ctrl-C is the one that exits with 130).
    terminal.expect("is waiting for an answer");
    terminal.expect("answer with:");
    terminal.expect("--answer '<one label or your own words>'");
    assert_eq!(terminal.wait(), Some(0));

    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();
    assert_eq!(runs[0]["status"], "suspended");

    // `resume` without an answer asks the pending question on the terminal.
    let mut terminal = Terminal::spawn(&dir, &["resume", &run_id]);
    terminal.expect("Where would you like to go?");
    terminal.expect("Reykjavik");
    terminal.send(ENTER);
    terminal.expect("User answered: Lisbon");
    terminal.expect("What should the trip include?");
    terminal.expect("nightlife");
    terminal.send(&format!("{SPACE}{ENTER}"));
    terminal.expect("Here is a three-day outline");
    assert_eq!(terminal.wait(), Some(0));
    assert_eq!(dir.show(&run_id)["status"], "completed");
}

#[test]
fn issue7_fault12_terminal_prompts_name_the_call_they_answer() {
    let dir = TestDir::new();
    let spec = format!("scripted:{DEMO}");
    let mut terminal = Terminal::spawn(&dir, &["run", "--model", &spec, "Help me plan a trip"]);
    terminal.expect("Where would you like to go?");
    terminal.expect("answers tool call destination");
    terminal.send(ENTER);
    terminal.expect("What should the trip include?");
    terminal.expect("answers tool call interests");
    terminal.send(&format!("{SPACE}{ENTER}"));
    terminal.expect("Here is a three-day outline");
    assert_eq!(terminal.wait(), Some(0));
}

#[cfg(feature = "test-hooks")]
#[test]
fn a_custom_typed_tool_prompts_from_its_resume_schema() {
    const BACKSPACE: &str = "\x7f";
    let dir = TestDir::new();
    let spec = dir.script(
        "pay.json",
        r#"{"steps":[{"toolCalls":[{"id":"p1","name":"test_pay","args":{"amount_cents":500,"to":"ACME"}}]},{"text":"Paid."}]}"#,
    );
    let mut terminal = Terminal::spawn_with(
        &dir,
        &["run", "--model", &spec, "Pay ACME"],
        &[("ASKLOOP_TEST_TOOLS", "1")],
    );
    // An object: its question, then one prompt per property, required ones first.
    terminal.expect("Pay 500 cents to ACME?");
    // A number with the schema's limits: refused with the reason, asked again.
    terminal.expect("amount_cents (The amount, typed again.)");
    terminal.expect("an integer ≥ 0; answers tool call p1");
    terminal.send(&format!("-5{ENTER}"));
    terminal.expect("minimum of 0");
    terminal.send(&format!("{BACKSPACE}{BACKSPACE}50{ENTER}"));
    // A boolean: a confirm.
    terminal.expect("confirmed (Whether to pay.)");
    terminal.send(&format!("y{ENTER}"));
    // A documented enum: a select showing each choice's description.
    terminal.expect("speed (How fast.)");
    terminal.expect("express - Today, for a fee.");
    terminal.send(&format!("{DOWN}{ENTER}"));
    // An optional text: enter leaves it out.
    terminal.expect("note (A note for the payee.)");
    terminal.send(ENTER);
    // The tool refuses another amount than the one asked: said, and asked again.
    terminal.expect("is not the amount to pay (500); try again");
    terminal.expect("amount_cents");
    terminal.send(&format!("500{ENTER}"));
    terminal.expect("confirmed");
    terminal.send(&format!("y{ENTER}"));
    terminal.expect("speed");
    terminal.send(&format!("{DOWN}{ENTER}"));
    terminal.expect("note");
    terminal.send(&format!("thanks{ENTER}"));
    terminal.expect("Paid.");
    assert_eq!(terminal.wait(), Some(0));

    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let state = dir.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(state["status"], "completed");
    assert_eq!(
        tool_results(&state)[0]["result"],
        serde_json::json!({"paid": 500, "to": "ACME", "speed": "express", "note": "thanks"})
    );
}

#[test]
fn issue34_an_approval_on_a_terminal_can_edit_the_arguments() {
    const BACKSPACE: &str = "\x7f";
    let dir = TestDir::new();
    dir.write(
        "askloop.toml",
        "[agents.assistant]\nrequire_approval = true\n",
    );
    let spec = dir.script(
        "pay.json",
        r#"{"steps":[{"toolCalls":[{"id":"p1","name":"test_pay","args":{"amount_cents":500,"to":"ACME"}}]},{"text":"Paid."}]}"#,
    );
    let mut terminal = Terminal::spawn_with(
        &dir,
        &["run", "--model", &spec, "Pay ACME"],
        &[("ASKLOOP_TEST_TOOLS", "1")],
    );
    let original = r#"{"amount_cents":500,"to":"ACME"}"#;
    let erase = BACKSPACE.repeat(original.len());
    // Edited arguments that do not fit the tool: said, and asked again; nothing ran.
    terminal.expect("allow it?");
    terminal.expect("Edit the arguments, then allow");
    terminal.send(&format!("{DOWN}{ENTER}"));
    terminal.expect("Arguments (JSON), approved as edited:");
    terminal.send(&format!(
        "{erase}{{\"amount_cents\":\"lots\",\"to\":\"ACME\"}}{ENTER}"
    ));
    terminal.expect("invalid arguments for test_pay call p1");
    terminal.expect("try again");
    terminal.expect("allow it?");
    terminal.send(&format!("{DOWN}{ENTER}"));
    terminal.expect("Arguments (JSON), approved as edited:");
    terminal.send(&format!(
        "{erase}{{\"amount_cents\":300,\"to\":\"Globex\"}}{ENTER}"
    ));
    // The tool ran with them: it asks about 300 cents to Globex. Esc leaves that for later.
    terminal.expect("Pay 300 cents to Globex?");
    terminal.expect("amount_cents");
    terminal.send("\x1b");
    assert_eq!(terminal.wait(), Some(0));
    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let state = dir.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(
        state["pending"][0]["payload"]["question"], "Pay 300 cents to Globex?",
        "{state:#}"
    );
}

/// Whether the terminal is in raw mode (no line editing, no echo), as the process sees it (on
/// Linux the terminal's other end reads the process end's settings).
fn raw_mode(terminal: &Terminal) -> bool {
    use rustix::termios::{LocalModes, tcgetattr};
    let modes = tcgetattr(&terminal.keys).unwrap().local_modes;
    !modes.contains(LocalModes::ICANON) && !modes.contains(LocalModes::ECHO)
}

/// Sends `signal` (a `kill` name) to the process.
fn signal(terminal: &Terminal, signal: &str) {
    let status = std::process::Command::new("kill")
        .args(["-s", signal, &terminal.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_signal_at_a_prompt_restores_the_terminal_and_exits_with_its_status() {
    for (name, status) in [("TERM", 143), ("HUP", 129)] {
        let dir = TestDir::new();
        let spec = dir.script("ask.json", crate::support::ASK_THEN_ANSWER);
        let mut terminal = Terminal::spawn(&dir, &["run", "--model", &spec, "Hi"]);
        terminal.expect("Which repo?");
        terminal.expect("answers tool call c1");
        assert!(raw_mode(&terminal), "the prompt reads keys in raw mode");
        signal(&terminal, name);
        let raw_after = {
            let code = terminal.child.wait().unwrap().code();
            assert_eq!(code, Some(status), "SIG{name}");
            raw_mode(&terminal)
        };
        assert!(!raw_after, "SIG{name} left the terminal in raw mode");
        // The question stays open for `resume`.
        let runs = dir.run(&["runs", "list", "--json"]).success().json();
        assert_eq!(runs[0]["status"], "suspended");
    }
}

#[test]
fn chat_ends_on_ctrl_c_or_a_signal_with_its_status_and_how_to_continue() {
    let dir = TestDir::new();
    let spec = dir.script("text.json", crate::support::JUST_TEXT);
    // Ctrl-C at the prompt (a key in raw mode): 130.
    let mut terminal = Terminal::spawn(&dir, &["chat", "--model", &spec, "--resource", "acme"]);
    terminal.expect("you:");
    terminal.send("\x03");
    terminal.expect("continue this conversation with `");
    terminal.expect("--resource acme");
    assert_eq!(terminal.wait(), Some(130));

    // SIGTERM at the prompt: 143, the same hint, and the terminal restored.
    let mut terminal = Terminal::spawn(&dir, &["chat", "--model", &spec, "--resource", "acme"]);
    terminal.expect("you:");
    signal(&terminal, "TERM");
    terminal.expect("continue this conversation with `");
    terminal.expect("--resource acme");
    let code = terminal.child.wait().unwrap().code();
    assert_eq!(code, Some(143));
    assert!(!raw_mode(&terminal));
}

/// A birthday message whose pick-one question's options miss the answer.
const SISTER: &str = r#"{"steps":[
  {"text":"Let me ask one thing first.","toolCalls":[{"id":"name","name":"ask_user","args":{
    "question":"What is your sister's name?","options":[{"label":"Alice"},{"label":"Bob"}]}}]},
  {"text":"Happy birthday, dear sister!"}
]}"#;

#[test]
fn issue33_the_status_line_comes_first_and_a_pick_one_takes_my_own_words() {
    let dir = TestDir::new();
    let spec = dir.script("sister.json", SISTER);
    let mut terminal = Terminal::spawn(
        &dir,
        &[
            "run",
            "--model",
            &spec,
            "Write a birthday message for my sister",
        ],
    );
    // The status line, with the phase and the time waited, before the model's first token.
    terminal.expect("Loading the model… 0s");
    terminal.expect("Reading the prompt… ");
    terminal.expect("Let me ask one thing first.");
    terminal.expect("What is your sister's name?");
    terminal.expect("Bob");
    terminal.expect("Type my own answer");
    terminal.send(&format!("{DOWN}{DOWN}{ENTER}"));
    terminal.expect("Your answer:");
    // Blank is refused; then the person's own words go to the model, marked as such.
    terminal.send(ENTER);
    terminal.expect("it is empty");
    terminal.send(&format!("Maria{ENTER}"));
    terminal.expect("User answered: Maria (in their own words, not one of the options)");
    terminal.expect("Happy birthday, dear sister!");
    assert_eq!(terminal.wait(), Some(0));

    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let state = dir.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(state["status"], "completed");
    let results = tool_results(&state);
    assert_eq!(results[0]["answer"], serde_json::json!({"other": "Maria"}));
}

#[test]
fn issue33_a_pick_several_takes_labels_and_my_own_words() {
    let dir = TestDir::new();
    let spec = format!("scripted:{DEMO}");
    let mut terminal = Terminal::spawn(&dir, &["run", "--model", &spec, "Help me plan a trip"]);
    terminal.expect("Where would you like to go?");
    terminal.expect("Type my own answer");
    terminal.send(ENTER);
    terminal.expect("What should the trip include?");
    terminal.expect("Type my own answer");
    // The first label and the last item, "Type my own answer".
    terminal.send(&format!("{SPACE}\x1b[A{SPACE}{ENTER}"));
    terminal.expect("Your answer:");
    terminal.send(&format!("onsen baths{ENTER}"));
    terminal.expect("onsen baths (in their own words, not one of the options)");
    terminal.expect("Here is a three-day outline");
    assert_eq!(terminal.wait(), Some(0));
    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let state = dir.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(
        tool_results(&state)[1]["answer"],
        serde_json::json!(["food", {"other": "onsen baths"}])
    );
}
