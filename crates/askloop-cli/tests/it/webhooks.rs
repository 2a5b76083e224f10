//! Webhooks survive a kill (issue 34): a process killed with SIGKILL right after the commit that
//! raised a question (its event is in the store's outbox, nothing was sent) leaves the event to
//! the next deliverer: `askloop runs sweep` delivers it, then the later events of the run, each
//! once, each with its own `webhook-id`, exactly the committed ones.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::crash::Crash;
use crate::support::ASK_THEN_ANSWER;

/// A Standard Webhooks secret (base64 of 24 bytes).
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiver got: each request's `webhook-id` and body, in order.
pub type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// A receiver on loopback (plain HTTP/1.1, one request per connection): records each request's
/// `webhook-id` and body, answers 204.
fn receiver() -> (Received, String) {
    receiver_silent_for(0)
}

/// A receiver as [`receiver`] that records its first `silent` requests but never answers them
/// (their connections stay open): a sender waits on them until its timeout, or its death.
pub fn receiver_silent_for(silent: usize) -> (Received, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = received.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut id) = (0usize, String::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(value) = lower.strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap();
                }
                if lower.starts_with("webhook-id:") {
                    id = line["webhook-id:".len()..].trim().to_owned();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let count = {
                let mut log = log.lock().unwrap();
                log.push((id, serde_json::from_slice(&body).unwrap()));
                log.len()
            };
            if count <= silent {
                held.push(stream);
                continue;
            }
            let _ = stream.write_all(
                b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    (received, url)
}

pub fn types(received: &[(String, Value)]) -> Vec<String> {
    received
        .iter()
        .map(|(_, body)| body["type"].as_str().unwrap().to_owned())
        .collect()
}

pub fn issue34_events_committed_before_a_kill_are_delivered_once(crash: &Crash) {
    let (received, url) = receiver();
    crash.config(&format!(
        "[[webhooks]]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n"
    ));
    let spec = crash.script(ASK_THEN_ANSWER);
    crash.kill_at(&["run", "--model", &spec, "Summarize"], "after-commit#1");
    let run_id = crash.only_run();
    assert!(
        received.lock().unwrap().is_empty(),
        "nothing is sent by `run`"
    );
    crash.run(&["runs", "sweep"]).success();
    assert_eq!(types(&received.lock().unwrap()), ["question.raised"]);
    crash
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "main",
        ])
        .success();
    crash.run(&["runs", "sweep"]).success();
    crash.run(&["runs", "sweep"]).success();
    let received = received.lock().unwrap().clone();
    assert_eq!(
        types(&received),
        ["question.raised", "question.answered", "run.completed"]
    );
    let mut ids: Vec<&str> = received.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "one webhook-id per event, each sent once");
    for (id, body) in &received {
        assert_eq!(body["id"].as_str(), Some(id.as_str()));
        assert_eq!(body["data"]["runId"].as_str(), Some(run_id.as_str()));
    }
    let listed = crash
        .run(&["webhooks", "list", "--json"])
        .success()
        .json_lines();
    assert_eq!(listed.len(), 3, "{listed:#?}");
    assert!(
        listed
            .iter()
            .all(|delivery| delivery["status"] == "delivered")
    );
}
