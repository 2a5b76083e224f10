//! Shared test helpers: each protocol's recorded responses ([`Wire`]), mock servers, a store that
//! round-trips every run through JSON, and event collection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use askloop_core::model::{
    LanguageModel, ModelError, ModelEvent, ModelRequest, ModelSettings, ToolDefinition, Usage,
};
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser};
use askloop_providers::{ModelSpec, ProviderOptions, RetryPolicy, build_model};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Recorded responses of one protocol, in the wire format of the provider's API docs.
pub(crate) struct Fixtures {
    pub(crate) text: &'static str,
    pub(crate) tool_call: &'static str,
    pub(crate) parallel_tool_calls: &'static str,
    /// Two `ask_user` calls (`Which month?`, then `Window or aisle?` with two options) whose
    /// ids are both the placeholder `__ID__`.
    pub(crate) same_ids: &'static str,
    pub(crate) split_arguments: Option<&'static str>,
    pub(crate) final_text: &'static str,
    pub(crate) malformed: &'static str,
    pub(crate) junk_lines: Option<&'static str>,
    pub(crate) cut_after_text: &'static str,
    pub(crate) cut_before_content: &'static str,
    pub(crate) error_event: Option<&'static str>,
    pub(crate) error_auth: &'static str,
    pub(crate) error_bad_request: (u16, &'static str),
    pub(crate) error_retryable: (u16, &'static str),
}

/// One protocol: where it listens, what it needs, and what its fixtures should yield.
pub(crate) struct Wire {
    pub(crate) provider: &'static str,
    pub(crate) model: &'static str,
    pub(crate) path: &'static str,
    pub(crate) content_type: &'static str,
    pub(crate) base_url_var: &'static str,
    pub(crate) base_suffix: &'static str,
    pub(crate) key_var: Option<&'static str>,
    pub(crate) fixtures: Fixtures,
    pub(crate) text_usage: Usage,
    pub(crate) tool_call_usage: Usage,
    /// The id of the call in `tool_call` (Ollama's calls have generated ids).
    pub(crate) tool_call_id: Option<&'static str>,
    pub(crate) parallel_ids: Option<[&'static str; 2]>,
    /// The protocol's form of a tool definition.
    pub(crate) tool_json: fn(&ToolDefinition) -> Value,
    /// The protocol's `tool_choice` for `required` and for a named tool.
    pub(crate) required_choice: fn() -> Option<Value>,
    pub(crate) named_choice: fn(&str) -> Option<Value>,
}

pub(crate) const OPENAI: Wire = Wire {
    provider: "openai",
    model: "gpt-4o-mini",
    path: "/v1/chat/completions",
    content_type: "text/event-stream",
    base_url_var: "OPENAI_BASE_URL",
    base_suffix: "/v1",
    key_var: Some("OPENAI_API_KEY"),
    fixtures: Fixtures {
        text: include_str!("fixtures/openai/text.sse"),
        tool_call: include_str!("fixtures/openai/tool_call.sse"),
        parallel_tool_calls: include_str!("fixtures/openai/parallel_tool_calls.sse"),
        same_ids: include_str!("fixtures/openai/same_ids_tool_calls.sse"),
        split_arguments: Some(include_str!("fixtures/openai/split_arguments.sse")),
        final_text: include_str!("fixtures/openai/final_text.sse"),
        malformed: include_str!("fixtures/openai/malformed.sse"),
        junk_lines: Some(include_str!("fixtures/openai/junk_lines.sse")),
        cut_after_text: include_str!("fixtures/openai/cut_after_text.sse"),
        cut_before_content: include_str!("fixtures/openai/cut_before_content.sse"),
        error_event: Some(include_str!("fixtures/openai/error_event.sse")),
        error_auth: include_str!("fixtures/openai/error_401.json"),
        error_bad_request: (400, include_str!("fixtures/openai/error_400.json")),
        error_retryable: (429, include_str!("fixtures/openai/error_429.json")),
    },
    text_usage: Usage {
        input_tokens: 9,
        output_tokens: 12,
    },
    tool_call_usage: Usage {
        input_tokens: 82,
        output_tokens: 17,
    },
    tool_call_id: Some("call_DdmO9pD3xa9XTPNJ32zg2hcA"),
    parallel_ids: Some(["call_first", "call_second"]),
    tool_json: |tool| {
        json!({"type": "function", "function": {
            "name": tool.name, "description": tool.description,
            "parameters": tool.input_schema, "strict": false}})
    },
    required_choice: || Some(json!("required")),
    named_choice: |name| Some(json!({"type": "function", "function": {"name": name}})),
};

pub(crate) const ANTHROPIC: Wire = Wire {
    provider: "anthropic",
    model: "claude-sonnet-4-5",
    path: "/v1/messages",
    content_type: "text/event-stream",
    base_url_var: "ANTHROPIC_BASE_URL",
    base_suffix: "",
    key_var: Some("ANTHROPIC_API_KEY"),
    fixtures: Fixtures {
        text: include_str!("fixtures/anthropic/text.sse"),
        tool_call: include_str!("fixtures/anthropic/tool_call.sse"),
        parallel_tool_calls: include_str!("fixtures/anthropic/parallel_tool_calls.sse"),
        same_ids: include_str!("fixtures/anthropic/same_ids_tool_calls.sse"),
        split_arguments: Some(include_str!("fixtures/anthropic/split_arguments.sse")),
        final_text: include_str!("fixtures/anthropic/final_text.sse"),
        malformed: include_str!("fixtures/anthropic/malformed.sse"),
        junk_lines: Some(include_str!("fixtures/anthropic/junk_lines.sse")),
        cut_after_text: include_str!("fixtures/anthropic/cut_after_text.sse"),
        cut_before_content: include_str!("fixtures/anthropic/cut_before_content.sse"),
        error_event: Some(include_str!("fixtures/anthropic/error_event.sse")),
        error_auth: include_str!("fixtures/anthropic/error_401.json"),
        error_bad_request: (400, include_str!("fixtures/anthropic/error_400.json")),
        error_retryable: (429, include_str!("fixtures/anthropic/error_429.json")),
    },
    text_usage: Usage {
        input_tokens: 25,
        output_tokens: 15,
    },
    tool_call_usage: Usage {
        input_tokens: 472,
        output_tokens: 89,
    },
    tool_call_id: Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
    parallel_ids: Some(["toolu_first", "toolu_second"]),
    tool_json: |tool| {
        json!({"name": tool.name, "description": tool.description,
            "input_schema": tool.input_schema})
    },
    required_choice: || Some(json!({"type": "any"})),
    named_choice: |name| Some(json!({"type": "tool", "name": name})),
};

pub(crate) const OLLAMA: Wire = Wire {
    provider: "ollama",
    model: "llama3.2",
    path: "/api/chat",
    content_type: "application/x-ndjson",
    base_url_var: "OLLAMA_BASE_URL",
    base_suffix: "",
    key_var: None,
    fixtures: Fixtures {
        text: include_str!("fixtures/ollama/text.ndjson"),
        tool_call: include_str!("fixtures/ollama/tool_call.ndjson"),
        parallel_tool_calls: include_str!("fixtures/ollama/parallel_tool_calls.ndjson"),
        same_ids: include_str!("fixtures/ollama/same_ids_tool_calls.ndjson"),
        split_arguments: None,
        final_text: include_str!("fixtures/ollama/final_text.ndjson"),
        malformed: include_str!("fixtures/ollama/malformed.ndjson"),
        junk_lines: None,
        cut_after_text: include_str!("fixtures/ollama/cut_after_text.ndjson"),
        cut_before_content: include_str!("fixtures/ollama/cut_before_content.ndjson"),
        error_event: None,
        error_auth: include_str!("fixtures/ollama/error_401.json"),
        error_bad_request: (404, include_str!("fixtures/ollama/error_404.json")),
        error_retryable: (503, include_str!("fixtures/ollama/error_503.json")),
    },
    text_usage: Usage {
        input_tokens: 26,
        output_tokens: 282,
    },
    tool_call_usage: Usage {
        input_tokens: 122,
        output_tokens: 33,
    },
    tool_call_id: None,
    parallel_ids: None,
    tool_json: |tool| {
        json!({"type": "function", "function": {
            "name": tool.name, "description": tool.description,
            "parameters": tool.input_schema}})
    },
    required_choice: || None,
    named_choice: |_| None,
};

/// Retries that take milliseconds, not seconds.
pub(crate) fn fast_retry() -> RetryPolicy {
    RetryPolicy::new(3, Duration::from_millis(1), Duration::from_millis(5))
}

impl Wire {
    pub(crate) fn spec(&self) -> ModelSpec {
        ModelSpec::parse(&format!("{}:{}", self.provider, self.model)).unwrap()
    }

    /// Options pointing at `base` (a mock server's URI), with a test key and fast retries.
    pub(crate) fn options_for(&self, base: &str) -> ProviderOptions {
        let mut vars = vec![(
            self.base_url_var.to_owned(),
            format!("{base}{}", self.base_suffix),
        )];
        if let Some(key_var) = self.key_var {
            vars.push((key_var.to_owned(), "test-key".to_owned()));
        }
        ProviderOptions::with_vars(vars).with_retry(fast_retry())
    }

    pub(crate) fn options(&self, server: &MockServer) -> ProviderOptions {
        self.options_for(&server.uri())
    }

    pub(crate) async fn model(&self, server: &MockServer) -> Arc<dyn LanguageModel> {
        self.model_with(self.options(server)).await
    }

    pub(crate) async fn model_with(&self, options: ProviderOptions) -> Arc<dyn LanguageModel> {
        build_model(&self.spec(), &options).await.unwrap()
    }

    /// A successful streamed response with this body.
    pub(crate) fn ok(&self, body: &str) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_raw(body.as_bytes().to_vec(), self.content_type)
    }

    /// An error response with a JSON body.
    pub(crate) fn error(&self, status: u16, body: &str) -> ResponseTemplate {
        ResponseTemplate::new(status).set_body_raw(body.as_bytes().to_vec(), "application/json")
    }

    /// A mock server answering this protocol's endpoint with `responses` in turn (the last one
    /// repeats).
    pub(crate) async fn server(&self, responses: Vec<ResponseTemplate>) -> MockServer {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(self.path))
            .respond_with(Sequence::new(responses))
            .mount(&server)
            .await;
        server
    }
}

/// Answers with a list of responses in turn; the last one repeats.
pub(crate) struct Sequence {
    responses: Vec<ResponseTemplate>,
    next: AtomicUsize,
}

impl Sequence {
    pub(crate) fn new(responses: Vec<ResponseTemplate>) -> Self {
        assert!(!responses.is_empty());
        Self {
            responses,
            next: AtomicUsize::new(0),
        }
    }
}

impl Respond for Sequence {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        self.responses[index.min(self.responses.len() - 1)].clone()
    }
}

/// The JSON bodies of every request the server received, in order.
pub(crate) async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|request| serde_json::from_slice(&request.body).unwrap())
        .collect()
}

/// The `ask_user` tool definition, as an agent gives it to the model.
pub(crate) fn ask_user_definition() -> ToolDefinition {
    let agent = Agent::builder("definitions")
        .model(ScriptedModel::from_steps(Vec::new()))
        .tool(AskUser::new())
        .build()
        .unwrap();
    agent.tool_definitions()[0].clone()
}

/// A first-step request: instructions, one user message, the `ask_user` tool.
pub(crate) fn request(settings: ModelSettings) -> ModelRequest {
    ModelRequest::new(vec![askloop_core::model::Message::user("Plan my trip")])
        .with_system("You plan trips.")
        .with_tools(vec![ask_user_definition()])
        .with_settings(settings)
}

/// Streams one model call to its end: the events, and the error that ended it, if any.
pub(crate) async fn collect(
    model: &dyn LanguageModel,
    request: ModelRequest,
) -> (Vec<ModelEvent>, Option<ModelError>) {
    let mut events = Vec::new();
    let mut stream = match model.stream(request).await {
        Ok(stream) => stream,
        Err(error) => return (events, Some(error)),
    };
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => return (events, Some(error)),
        }
    }
    (events, None)
}

/// The text of all text deltas.
pub(crate) fn text_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::TextDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The complete tool calls.
pub(crate) fn calls_of(events: &[ModelEvent]) -> Vec<askloop_core::model::ToolCall> {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .collect()
}

/// A server on 127.0.0.1 that answers every request with the start of a chunked streamed
/// response and then drops the connection. Returns its base URI and a request counter.
pub(crate) async fn dropping_server(
    content_type: &'static str,
    first_part: &'static str,
) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                read_request(&mut socket).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{first_part}\r\n",
                    first_part.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.flush().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                // Dropped without the final chunk: the connection is cut mid-stream.
            });
        }
    });
    (format!("http://{address}"), hits)
}

/// Reads one HTTP request (headers and a `content-length` body).
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(read) = socket.read(&mut chunk).await else {
            return;
        };
        if read == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&buffer).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                return;
            }
        }
    }
}
