//! The checks of the values a request carries, the same on every route: ids (run, thread,
//! resource, agent, tool call), texts and answers (sizes, no NUL).

use askloop_core::IdProblem;

use crate::error::ApiError;
use crate::state::AppState;

/// The longest tool call id accepted, bytes: providers make their own ids, some of several
/// hundred bytes, and every route takes what any provider may send.
pub(crate) const MAX_TOOL_CALL_ID_BYTES: usize = 4096;

/// Checks an id from a request (run, thread, resource, agent): the core's rule for ids
/// ([`IdProblem::of`]: not blank, no control characters, at most 256 bytes), or 400 naming the
/// field. Every route checks every id it is given with this (tool call ids with
/// [`check_tool_call_id`]), before anything else.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), ApiError> {
    match IdProblem::of(id) {
        None => Ok(()),
        Some(problem) => Err(ApiError::bad_request(format!("{field} {problem}"))),
    }
}

/// Checks a tool call id from a request, the same way on every route: the core's rule for ids
/// but up to [`MAX_TOOL_CALL_ID_BYTES`]; one error (400 `bad_request`) otherwise.
pub(crate) fn check_tool_call_id(id: &str) -> Result<(), ApiError> {
    match IdProblem::of(id) {
        None => Ok(()),
        Some(IdProblem::TooLong { bytes }) if bytes <= MAX_TOOL_CALL_ID_BYTES => Ok(()),
        Some(IdProblem::TooLong { bytes }) => Err(ApiError::bad_request(format!(
            "toolCallId is {bytes} bytes; at most {MAX_TOOL_CALL_ID_BYTES} are accepted"
        ))),
        Some(problem) => Err(ApiError::bad_request(format!("toolCallId {problem}"))),
    }
}

/// Checks a text from a request: at most `max` bytes (413), no NUL (stores reject it).
pub(crate) fn check_text(field: &str, text: &str, max: usize) -> Result<(), ApiError> {
    if text.len() > max {
        return Err(ApiError::too_large(format!(
            "{field} is {} bytes; at most {max} are accepted",
            text.len()
        )));
    }
    if text.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{field} must not contain NUL characters"
        )));
    }
    Ok(())
}

/// Checks an answer: its JSON text at most `answer_bytes` (413), no NUL in it.
pub(crate) fn check_answer(state: &AppState, answer: &serde_json::Value) -> Result<(), ApiError> {
    check_json(state, "the answer", answer)
}

/// Checks the arguments a person edited when approving a call, as an answer is checked: their
/// JSON text at most `answer_bytes` (413), no NUL in it. Whether they fit the tool is the
/// claim's to say (400 `invalid_args`).
pub(crate) fn check_edited_args(
    state: &AppState,
    args: &serde_json::Value,
) -> Result<(), ApiError> {
    check_json(state, "args", args)
}

/// Checks JSON a person gave (`what`, for the message): its text at most `answer_bytes` (413),
/// no NUL in it.
fn check_json(state: &AppState, what: &str, value: &serde_json::Value) -> Result<(), ApiError> {
    let text = value.to_string();
    if text.len() > state.limits.answer_bytes {
        return Err(ApiError::too_large(format!(
            "{what} is {} bytes of JSON; at most {} are accepted",
            text.len(),
            state.limits.answer_bytes
        )));
    }
    if text.contains("\\u0000") {
        return Err(ApiError::bad_request(format!(
            "{what} must not contain NUL characters"
        )));
    }
    Ok(())
}
