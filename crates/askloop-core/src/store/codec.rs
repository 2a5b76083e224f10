//! The stored form of runs, shared by every store: a [`RunState`] as JSON text (the format in
//! `crate::run`'s module docs), and a completed run's share of its thread as a JSON array of
//! messages.
//!
//! Decoding tells apart a state written by a newer askloop ([`StoreError::UnsupportedFormat`])
//! from damaged text ([`StoreError::Corrupt`]); encoding failures are [`StoreError::Encode`],
//! never reported as corruption.

use serde::Deserialize;

use crate::ids::RunId;
use crate::message::Message;
use crate::run::{RUN_FORMAT_VERSION, RunState, RunStatus};
use crate::store::StoreError;

/// The state as stored.
///
/// # Errors
/// [`StoreError::Encode`] if a value in it cannot be written as JSON.
pub fn encode_state(state: &RunState) -> Result<String, StoreError> {
    serde_json::to_string(state).map_err(|source| StoreError::Encode {
        run_id: state.run_id.clone(),
        source,
    })
}

/// Reads a stored state back.
///
/// # Errors
/// [`StoreError::UnsupportedFormat`] for a `formatVersion` this build does not read;
/// [`StoreError::Corrupt`] for anything else that is not a state of the current format.
pub fn decode_state(run_id: &RunId, text: &str) -> Result<RunState, StoreError> {
    #[derive(Deserialize)]
    struct FormatProbe {
        #[serde(rename = "formatVersion")]
        format_version: u32,
    }
    match serde_json::from_str::<RunState>(text) {
        Ok(state) if state.format_version == RUN_FORMAT_VERSION => Ok(state),
        Ok(state) => Err(StoreError::UnsupportedFormat {
            run_id: run_id.clone(),
            format_version: state.format_version,
        }),
        Err(source) => match serde_json::from_str::<FormatProbe>(text) {
            Ok(probe) if probe.format_version != RUN_FORMAT_VERSION => {
                Err(StoreError::UnsupportedFormat {
                    run_id: run_id.clone(),
                    format_version: probe.format_version,
                })
            }
            _ => Err(StoreError::Corrupt {
                run_id: run_id.clone(),
                source,
            }),
        },
    }
}

/// The messages a completed run adds to its thread, as stored; `None` unless the run is
/// completed.
///
/// # Errors
/// [`StoreError::Encode`].
pub fn encode_thread_share(state: &RunState) -> Result<Option<String>, StoreError> {
    if state.status != RunStatus::Completed {
        return Ok(None);
    }
    serde_json::to_string(state.run_messages())
        .map(Some)
        .map_err(|source| StoreError::Encode {
            run_id: state.run_id.clone(),
            source,
        })
}

/// Reads a completed run's thread share back.
///
/// # Errors
/// [`StoreError::Corrupt`].
pub fn decode_thread_share(run_id: &RunId, text: &str) -> Result<Vec<Message>, StoreError> {
    serde_json::from_str(text).map_err(|source| StoreError::Corrupt {
        run_id: run_id.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AgentId, ThreadId};

    fn state() -> RunState {
        RunState::new(
            RunId::new("r1"),
            ThreadId::new("t1"),
            None,
            AgentId::new("a"),
            None,
            vec![Message::user("hi")],
            0,
        )
    }

    #[test]
    fn states_round_trip() {
        let state = state();
        let text = encode_state(&state).unwrap();
        assert_eq!(decode_state(&RunId::new("r1"), &text).unwrap(), state);
    }

    #[test]
    fn a_newer_format_is_unsupported_not_corrupt() {
        let mut value = serde_json::to_value(state()).unwrap();
        value["formatVersion"] = 2.into();
        let error = decode_state(&RunId::new("r1"), &value.to_string()).unwrap_err();
        assert!(
            matches!(
                error,
                StoreError::UnsupportedFormat {
                    format_version: 2,
                    ..
                }
            ),
            "{error:?}"
        );
        value["newField"] = serde_json::json!({"x": 1});
        value["status"] = "archived".into();
        let error = decode_state(&RunId::new("r1"), &value.to_string()).unwrap_err();
        assert!(
            matches!(error, StoreError::UnsupportedFormat { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn damaged_text_is_corrupt() {
        for text in ["", "{", "[]", "{\"formatVersion\":1}", "null"] {
            let error = decode_state(&RunId::new("r1"), text).unwrap_err();
            assert!(
                matches!(error, StoreError::Corrupt { .. }),
                "{text}: {error:?}"
            );
        }
    }
}
