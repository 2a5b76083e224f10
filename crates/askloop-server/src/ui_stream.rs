//! The AI SDK's UI message stream (npm `ai` 7.x, what `useChat` and its `DefaultChatTransport`
//! speak): the header that marks its responses.

/// The header that marks a UI message stream response, and its value.
pub(crate) const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");
