//! `askloop`: run agents whose tools ask a person, answer their questions inline or later (from
//! another process), and list, inspect and continue runs.
//!
//! This binary is the one place in the workspace that picks concrete types: the store from
//! `--store` / `ASKLOOP_STORE` (`askloop-store`), the model from a model SPEC ([`model`]), and
//! the agent from `askloop.toml` or the built-in `assistant` ([`agent`]). Errors are `anyhow`
//! here only; [`exit`] turns them into one line on stderr and an exit status.

mod agent;
mod catalogue;
mod cli;
mod command_line;
mod commands;
mod config;
mod context;
mod env;
mod exit;
mod format;
mod interrupt;
mod model;
mod output;
mod prompt;
#[cfg(all(test, feature = "local"))]
mod quality;
mod registry;
mod session;
mod status;
mod test_hook;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, KeysCommand, ModelCommand, RunsCommand, WebhooksCommand};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let otlp = init_tracing();
    let result = run(cli);
    status::stop();
    let code = match result {
        Ok(code) => code,
        Err(error) => exit::report(&error),
    };
    if let Some(provider) = otlp {
        // Flushes the spans still batched (the runtime is gone: the exporter blocks here).
        if let Err(error) = provider.shutdown() {
            tracing::warn!(%error, "could not flush the OTLP span export");
        }
    }
    code
}

/// Logs go to stderr. With `RUST_LOG` set, as `tracing`'s usual lines filtered by it; without,
/// only warnings and errors (of askloop and its libraries, genai's per-request errors and
/// rmcp's "response error" warnings aside), each as one line for people: `warning: MESSAGE`.
///
/// With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, the spans
/// of askloop's crates at INFO and above (`run`, `step`, `model call`, `tool call`, the
/// server's `run task`) are also exported over OTLP/HTTP protobuf, `service.name` `askloop`
/// (the other standard `OTEL_*` variables apply: headers, timeout, batch sizes); the returned
/// provider flushes them at its shutdown.
fn init_tracing() -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let fmt = if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    } else {
        // The final error line already says what failed, and genai logs every retried request
        // at ERROR level. rmcp warns of every error the client answers a server with, which
        // includes askloop-mcp withdrawing an elicitation it turned into a question (logged by
        // askloop-mcp itself).
        tracing_subscriber::fmt::layer()
            .event_format(HumanLine)
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::new(
                "warn,genai=off,rmcp::service=error",
            ))
            .boxed()
    };
    let (provider, otlp_error) = match otlp_provider() {
        Ok(provider) => (provider, None),
        Err(error) => (None, Some(error)),
    };
    let otel = provider.as_ref().map(|provider| {
        let askloop_spans = tracing_subscriber::filter::Targets::new()
            .with_target("askloop_core", tracing::Level::INFO)
            .with_target("askloop_server", tracing::Level::INFO)
            .with_target("askloop", tracing::Level::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("askloop"))
            .with_filter(askloop_spans)
    });
    tracing_subscriber::registry().with(fmt).with(otel).init();
    if let Some(error) = otlp_error {
        tracing::warn!(%error, "OTLP span export is off");
    }
    provider
}

/// The OTLP span exporter's provider when an OTLP endpoint is configured (`None` otherwise).
fn otlp_provider() -> Result<
    Option<opentelemetry_sdk::trace::SdkTracerProvider>,
    opentelemetry_otlp::ExporterBuildError,
> {
    use opentelemetry_otlp::WithExportConfig as _;

    let configured = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
    if !configured("OTEL_EXPORTER_OTLP_ENDPOINT")
        && !configured("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("askloop")
        .build();
    Ok(Some(
        opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    ))
}

/// A log event as one line for people: `warning: MESSAGE (key=value, …)`, with no time,
/// level column or target, newlines flattened and control characters escaped.
struct HumanLine;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for HumanLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _context: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let kind = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            _ => "debug",
        };
        // A warning while the status line shows takes a line of its own.
        status::hide();
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let mut line = fields.message;
        if !fields.others.is_empty() {
            line.push_str(&format!(" ({})", fields.others.join(", ")));
        }
        let line = line.replace(['\n', '\r'], " ");
        writeln!(writer, "{kind}: {}", format::escape_controls(line.trim()))
    }
}

/// An event's message and its other fields as `key=value`.
#[derive(Default)]
struct EventFields {
    message: String,
    others: Vec<String>,
}

impl tracing::field::Visit for EventFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.others.push(format!("{}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.others.push(format!("{}={value}", field.name()));
        }
    }
}

/// Whether `command` may run a model for a person: the status line ([`status`]) is then on
/// (when stderr is a terminal), never with `--json`.
fn shows_status(command: &Command) -> bool {
    match command {
        Command::Run(args) => !args.json,
        Command::Resume(args) => !args.json,
        Command::Chat(_) => true,
        Command::Approve(args) => !args.json,
        Command::Decline(args) => !args.json,
        Command::Runs(RunsCommand::Continue(args)) => !args.json,
        Command::Runs(RunsCommand::Fork(args)) => !args.json,
        Command::Runs(RunsCommand::Recover(args)) => !args.json && !args.list,
        _ => false,
    }
}

/// Runs one command. The command runs on this thread; one worker thread runs the handler of
/// Ctrl-C, SIGTERM and SIGHUP (installed first, for every command), so it works even while
/// the command blocks on a prompt or on stdin.
///
/// `askloop serve` gets a worker thread per core instead: its requests and runs are tasks.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if !matches!(cli.command, Command::Serve(_)) {
        builder.worker_threads(1);
    }
    let runtime = builder.enable_all().build()?;
    if shows_status(&cli.command) {
        // Before anything slow (the store, the model), so a person sees at once that
        // something happens.
        status::start(status::Phase::LoadingModel);
    }
    runtime.block_on(async move {
        interrupt::Interrupt::get();
        let global = cli.global;
        match cli.command {
            Command::Run(args) => commands::run::run(&global, args).await,
            Command::Resume(args) => commands::resume::resume(&global, args).await,
            Command::Chat(args) => commands::chat::chat(&global, args).await,
            Command::Approve(args) => commands::approve::approve(&global, args).await,
            Command::Decline(args) => commands::approve::decline(&global, args).await,
            Command::Runs(RunsCommand::Cancel(args)) => commands::runs::cancel(&global, args).await,
            Command::Runs(RunsCommand::Sweep(args)) => commands::runs::sweep(&global, args).await,
            Command::Runs(RunsCommand::List(args)) => commands::runs::list(&global, args).await,
            Command::Runs(RunsCommand::Show(args)) => commands::runs::show(&global, args).await,
            Command::Runs(RunsCommand::Continue(args)) => {
                commands::runs::continue_run(&global, args).await
            }
            Command::Runs(RunsCommand::Recover(args)) => {
                commands::runs::recover(&global, args).await
            }
            Command::Runs(RunsCommand::Fork(args)) => commands::fork::fork(&global, args).await,
            Command::Runs(RunsCommand::Link(args)) => commands::runs::link(&global, args).await,
            Command::Model(ModelCommand::Pull { name }) => {
                commands::model::pull(name.as_deref()).await
            }
            Command::Model(ModelCommand::Path { name }) => commands::model::path(name.as_deref()),
            Command::Model(ModelCommand::List) => commands::model::list(),
            Command::Serve(args) => commands::serve::serve(&global, args).await,
            Command::Keys(KeysCommand::New(args)) => commands::keys::new(&args),
            Command::Webhooks(WebhooksCommand::List(args)) => {
                commands::webhooks::list(&global, &args).await
            }
            Command::Webhooks(WebhooksCommand::Replay(args)) => {
                commands::webhooks::replay(&global, &args).await
            }
        }
    })
}
