//! [`GenaiModel`]: a [`LanguageModel`] on one of genai's adapters, with bounded retries.

use async_trait::async_trait;
use futures::StreamExt;
use genai::adapter::AdapterKind;
use genai::resolver::{AuthData, Endpoint};
use genai::{Client, ModelIden, ServiceTarget, WebConfig};

use askloop_core::model::{LanguageModel, ModelError, ModelEvent, ModelEventStream, ModelRequest};

use crate::error::ProviderError;
use crate::events::EventAssembler;
use crate::failure::{CallContext, Failure, retry_message};
use crate::options::ProviderOptions;
use crate::protocol::Protocol;
use crate::request::{chat_options, chat_request};

/// The `tracing` target of the one WARN event each retry emits, whose message is a whole line
/// for a person: `model openai:gpt-4o-mini: rate limited (HTTP 429); retrying in 2.1 s (attempt
/// 2 of 4)`.
pub const RETRY_TARGET: &str = "askloop::retry";

/// A hosted model reached through genai, its adapter fixed by the SPEC's provider.
///
/// Holds no per-run state: every call sends the whole conversation, so a run suspended in one
/// process continues in another. A tool call in answer to a request that offers no tool
/// ([`ModelRequest::offers_tools`]) is yielded as [`ModelError::ToolNotOffered`], not passed on.
pub(crate) struct GenaiModel {
    protocol: Protocol,
    model: String,
    spec: String,
    client: Client,
    target: ServiceTarget,
    options: ProviderOptions,
}

impl GenaiModel {
    /// Builds the model: reads the key and base URL, fixes the adapter.
    ///
    /// # Errors
    /// [`ProviderError::MissingApiKey`], [`ProviderError::InvalidBaseUrl`],
    /// [`ProviderError::HttpClient`].
    pub(crate) fn new(
        protocol: Protocol,
        model: &str,
        options: &ProviderOptions,
    ) -> Result<Self, ProviderError> {
        let connection = protocol.connect(options)?;
        let web_config = WebConfig::default().with_connect_timeout(options.connect_timeout());
        let client = Client::builder()
            .with_web_config(web_config)
            .build()
            .map_err(|source| ProviderError::HttpClient {
                provider: protocol.name(),
                source: Box::new(source),
            })?;
        let adapter_kind: AdapterKind = protocol.adapter_kind();
        let target = ServiceTarget {
            endpoint: Endpoint::from_owned(connection.base_url),
            auth: connection
                .api_key
                .map_or(AuthData::None, AuthData::from_single),
            model: ModelIden::new(adapter_kind, model),
        };
        tracing::debug!(
            provider = protocol.name(),
            model,
            endpoint = target.endpoint.base_url(),
            "model built"
        );
        Ok(Self {
            protocol,
            model: model.to_owned(),
            spec: format!("{}:{model}", protocol.name()),
            client,
            target,
            options: options.clone(),
        })
    }
}

#[async_trait]
impl LanguageModel for GenaiModel {
    fn provider(&self) -> &str {
        self.protocol.name()
    }

    fn model_id(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        let offers_tools = request.offers_tools();
        let chat_request = chat_request(self.protocol, &request);
        let chat_options = chat_options(self.protocol, &self.model, &request, &self.options);
        let client = self.client.clone();
        let target = self.target.clone();
        let policy = self.options.retry().clone();
        let protocol = self.protocol;
        let spec = self.spec.clone();
        let stream = async_stream::stream! {
            let context = CallContext {
                provider: protocol.name(),
                model: &spec,
                key_variable: protocol.key_variable(),
            };
            let mut attempt: u32 = 1;
            loop {
                let mut emitted = 0usize;
                let failure = 'attempt: {
                    let response = match client
                        .exec_chat_stream(target.clone(), chat_request.clone(), Some(&chat_options))
                        .await
                    {
                        Ok(response) => response,
                        Err(error) => break 'attempt Failure::from_genai(error),
                    };
                    let mut events = response.stream;
                    let mut assembler = EventAssembler::new(protocol);
                    let mut received = 0usize;
                    loop {
                        match events.next().await {
                            Some(Ok(event)) => {
                                received += 1;
                                for event in assembler.push(event) {
                                    // A call of a tool the request did not offer is no answer.
                                    if let (false, ModelEvent::ToolCall(call)) = (offers_tools, &event) {
                                        tracing::debug!(model = %spec, tool = %call.name, "the model called a tool that was not offered");
                                        yield Err(ModelError::ToolNotOffered {
                                            model: spec.clone(),
                                            tool: call.name.clone(),
                                        });
                                        return;
                                    }
                                    emitted += 1;
                                    yield Ok(event);
                                }
                                if assembler.is_finished() {
                                    return;
                                }
                                if assembler.is_cut() {
                                    break 'attempt Failure::cut(received);
                                }
                            }
                            Some(Err(error)) => break 'attempt Failure::from_genai(error),
                            None => break 'attempt Failure::cut(received),
                        }
                    }
                };
                if failure.retryable && emitted == 0 && attempt < policy.max_attempts {
                    let delay = policy.delay(attempt, failure.retry_after);
                    tracing::debug!(model = %spec, attempt, error = %failure, "model call failed");
                    let message =
                        retry_message(&spec, &failure, delay, attempt + 1, policy.max_attempts);
                    tracing::warn!(target: RETRY_TARGET, "{message}");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                    continue;
                }
                tracing::debug!(model = %spec, attempt, error = %failure, "model call failed");
                yield Err(failure.into_model_error(&context, attempt, emitted));
                return;
            }
        };
        Ok(Box::pin(stream))
    }
}
