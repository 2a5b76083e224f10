//! Every stored format version, from fixture files: format 1 is upgraded on read, format 2
//! reads and re-encodes to the same JSON, a newer format is refused.

use askloop_core::store::codec::{
    decode_run, decode_state, encode_head, encode_message, encode_state, upgrade_v1,
};
use askloop_core::{RunId, RunStatus, StoreError};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

fn run_id(text: &str) -> RunId {
    let value: Value = serde_json::from_str(text).unwrap();
    RunId::new(value["runId"].as_str().unwrap())
}

#[test]
fn format1_runs_are_upgraded_keeping_their_history_apart() {
    let text = fixture("format1-suspended-with-history.json");
    let state = decode_state(&run_id(&text), &text).unwrap();
    assert_eq!(state, upgrade_v1(&run_id(&text), &text).unwrap());
    assert_eq!(state.status(), RunStatus::Suspended);
    assert_eq!(state.messages().len(), 2, "own messages only");
    assert_eq!(state.legacy_history().map(<[_]>::len), Some(2));
    assert_eq!(state.history_through(), None);
    assert_eq!(state.pending_tool_calls()[0].tool_call_id.as_str(), "c1");
    let encoded: Value = serde_json::from_str(&encode_state(&state).unwrap()).unwrap();
    assert_eq!(encoded["formatVersion"], 2);
    assert!(encoded.get("historyLen").is_none());
    // Re-reading the upgraded state gives it back.
    assert_eq!(
        decode_state(state.run_id(), &encoded.to_string()).unwrap(),
        state
    );

    let text = fixture("format1-completed.json");
    let state = decode_state(&run_id(&text), &text).unwrap();
    assert_eq!(state.status(), RunStatus::Completed);
    assert_eq!(state.messages().len(), 2);
    assert_eq!(
        state.legacy_history().map(<[_]>::len),
        Some(0),
        "an upgraded run keeps an (empty) history of its own, never the thread's later runs"
    );
}

#[test]
fn format1_resume_data_becomes_camel_case_and_stays_visible() {
    let text = fixture("format1-resuming.json");
    let state = decode_state(&run_id(&text), &text).unwrap();
    let unfinished = state.unfinished_calls();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].tool_call_id.as_str(), "g1");
    assert_eq!(unfinished[0].answer, Some(json!({"approved": true})));
    let encoded = encode_state(&state).unwrap();
    assert!(encoded.contains("\"resumeData\""), "{encoded}");
    assert!(!encoded.contains("resume_data"), "{encoded}");
    // A format-1 text stored as a head (before any migration) reads the same.
    assert_eq!(decode_run(state.run_id(), &text, [""; 0]).unwrap(), state);
}

#[test]
fn format2_fixtures_read_and_encode_to_the_same_json() {
    for name in [
        "format2-suspended.json",
        "format2-journal.json",
        "format2-completed.json",
    ] {
        let text = fixture(name);
        let state = decode_state(&run_id(&text), &text).unwrap();
        let original: Value = serde_json::from_str(&text).unwrap();
        let encoded: Value = serde_json::from_str(&encode_state(&state).unwrap()).unwrap();
        assert_eq!(encoded, original, "{name}");
        // Head and messages apart, as the stores keep them.
        let head = encode_head(&state).unwrap();
        assert!(!head.contains("\"messages\""), "{name}");
        let messages: Vec<String> = state
            .messages()
            .iter()
            .map(|message| encode_message(state.run_id(), message).unwrap())
            .collect();
        assert_eq!(
            decode_run(state.run_id(), &head, &messages).unwrap(),
            state,
            "{name}"
        );
    }
    let journal = fixture("format2-journal.json");
    let state = decode_state(&run_id(&journal), &journal).unwrap();
    let unfinished = state.unfinished_calls();
    assert_eq!(
        unfinished
            .iter()
            .map(|call| call.tool_call_id.as_str())
            .collect::<Vec<_>>(),
        ["g1", "k1"]
    );
    assert_eq!(unfinished[1].started_at_ms, Some(1_796_007_600_400));
}

#[test]
fn a_newer_format_is_refused() {
    for name in ["format2-suspended.json", "format1-completed.json"] {
        let mut value: Value = serde_json::from_str(&fixture(name)).unwrap();
        value["formatVersion"] = 3.into();
        let text = value.to_string();
        for error in [
            decode_state(&run_id(&text), &text).unwrap_err(),
            decode_run(&run_id(&text), &text, [""; 0]).unwrap_err(),
        ] {
            assert!(
                matches!(
                    error,
                    StoreError::UnsupportedFormat {
                        format_version: 3,
                        ..
                    }
                ),
                "{name}: {error:?}"
            );
        }
    }
}
