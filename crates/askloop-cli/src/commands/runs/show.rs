//! `askloop runs show`: one stored run, its status, lease, parent and child runs (of
//! sub-agents), pending calls and messages.

use std::process::ExitCode;

use askloop_core::Tool as _;
use askloop_core::model::{AssistantPart, Message, ToolCall};
use askloop_core::store::{ListedRun, ResourceFilter, RunFilter, RunState, StoredRun, codec};
use askloop_core::{AskUser, AskUserArgs, RunKey, RunStatus};
use serde_json::Value;

use crate::cli::{GlobalArgs, ShowArgs};
use crate::context::{Access, Context};
use crate::format::{SHOW_LIMIT, cut, format_time, result_summary};
use crate::output::{Mode, Output};
use crate::session::print_pending;

/// Runs `askloop runs show`: status, pending questions with their payloads and resume schemas,
/// and the messages, each field cut to [`SHOW_LIMIT`] characters; with `--json`, the whole
/// stored run state plus `pending`. Opens the store read-only, as `runs list` does.
///
/// # Errors
/// Invalid input for an unknown run; store and output errors.
pub(crate) async fn show(global: &GlobalArgs, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Read).await?;
    context
        .run(async |context| {
            let run = context
                .resolve_run(&args.run_id, args.resource.as_deref())
                .await?;
            let stored = context.load_stored(&run).await?;
            let children = children_of(context, &run).await?;
            let mut output = Output::new(if args.json { Mode::Json } else { Mode::Human });
            if args.json {
                output.text(&serde_json::to_string_pretty(&show_document(
                    &stored, &children,
                )?)?)?;
                output.text("\n")?;
                return Ok(ExitCode::SUCCESS);
            }
            show_fields(&mut output, context, &run, &stored)?;
            show_children(&mut output, &children)?;
            show_pending(&mut output, context, &run, &stored.state)?;
            show_messages(&mut output, &stored.state)?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// The child runs `run` started through its sub-agents, oldest first (in its resource).
///
/// # Errors
/// Store errors.
async fn children_of(context: &Context, run: &RunKey) -> anyhow::Result<Vec<ListedRun>> {
    let filter = RunFilter::new()
        .children_of(run.run_id.clone())
        .resource_filter(ResourceFilter::exactly(run.resource_id.clone()));
    let mut children = context.store.list_runs(&filter).await?.runs;
    children.reverse();
    Ok(children)
}

/// `runs show --json`: the whole stored run state plus `pending` (each call in the one wire shape
/// of a pending call, [`askloop_core::wire::PendingCall`]), `unfinished`, `lease` and
/// `children` (the child runs of its sub-agents: `runId`, `agentId`, `status`,
/// `parentToolCallId`, oldest first).
///
/// # Errors
/// The state does not encode.
fn show_document(stored: &StoredRun, children: &[ListedRun]) -> anyhow::Result<Value> {
    let state = &stored.state;
    let mut document: Value = serde_json::from_str(&codec::encode_state(state)?)?;
    if let Value::Object(fields) = &mut document {
        fields.insert(
            "pending".to_owned(),
            serde_json::to_value(super::wire_pending(
                stored.state.run_id(),
                &stored.state.pending_tool_calls(),
            ))?,
        );
        fields.insert(
            "unfinished".to_owned(),
            serde_json::to_value(state.unfinished_calls())?,
        );
        fields.insert(
            "lease".to_owned(),
            stored.lease.as_ref().map_or(Value::Null, |lease| {
                serde_json::json!({
                    "holder": lease.holder.as_str(),
                    "expiresAtMs": lease.expires_at_ms,
                    "live": lease.is_live(),
                })
            }),
        );
        fields.insert(
            "children".to_owned(),
            children
                .iter()
                .map(|child| match child {
                    ListedRun::Run(summary) => serde_json::json!({
                        "runId": summary.run_id.as_str(),
                        "agentId": summary.agent_id.as_str(),
                        "status": summary.status.as_str(),
                        "parentToolCallId": summary
                            .parent
                            .as_ref()
                            .map(|parent| parent.tool_call_id.as_str()),
                    }),
                    other => serde_json::json!({
                        "runId": other.run_id().as_str(),
                        "status": "unreadable",
                    }),
                })
                .collect(),
        );
    }
    Ok(document)
}

/// `runs show`'s fields: `NAME  VALUE` lines from `run` to `unfinished`.
///
/// # Errors
/// Writing to stdout failed.
fn show_fields(
    output: &mut Output,
    context: &Context,
    run: &RunKey,
    stored: &StoredRun,
) -> std::io::Result<()> {
    let state = &stored.state;
    let field = |name: &str, value: &str| format!("{name:<9} {value}");
    output.line(&field("run", state.run_id().as_str()))?;
    output.line(&field("status", state.status().as_str()))?;
    output.line(&field("agent", state.agent_id().as_str()))?;
    output.line(&field("model", state.model_spec().unwrap_or("-")))?;
    output.line(&field("thread", state.thread_id().as_str()))?;
    if let Some(resource) = state.resource_id() {
        output.line(&field("resource", resource.as_str()))?;
    }
    if let Some(parent) = state.parent() {
        output.line(&field(
            "parent",
            &format!(
                "run {} at tool call {} (a sub-agent's run; its questions wait at root run {})",
                parent.run_id, parent.tool_call_id, parent.root_run_id
            ),
        ))?;
    }
    if let Some(from) = state.forked_from() {
        output.line(&field(
            "forked",
            &format!(
                "from run {} at tool call {}",
                from.run_id, from.tool_call_id
            ),
        ))?;
    }
    if let Some(starter) = state.started_by() {
        output.line(&field("started", &format!("by {}", actor_text(starter))))?;
    }
    output.line(&field(
        "created",
        &format!("{} UTC", format_time(state.created_at_ms())),
    ))?;
    output.line(&field(
        "updated",
        &format!("{} UTC", format_time(state.updated_at_ms())),
    ))?;
    output.line(&field(
        "steps",
        &format!(
            "{} ({} input + {} output tokens)",
            state.steps(),
            state.usage().input_tokens,
            state.usage().output_tokens
        ),
    ))?;
    if let Some(error) = state.failure() {
        output.line(&field(
            "error",
            &format!("{}: {}", error.code, error.message),
        ))?;
    }
    if state.status() == RunStatus::Running {
        output.line(&field("lease", &lease_line(context, run, stored)))?;
    }
    show_unfinished(output, state)
}

/// `runs show`'s `unfinished` lines: the calls a stopped driver left without a result.
///
/// # Errors
/// Writing to stdout failed.
fn show_unfinished(output: &mut Output, state: &RunState) -> std::io::Result<()> {
    for call in &state.unfinished_calls() {
        let kept = call.answer.as_ref().map_or_else(
            || "it was started and its outcome is not recorded".to_owned(),
            |answer| {
                format!(
                    "the answer it kept: {}",
                    cut(&answer.to_string(), SHOW_LIMIT)
                )
            },
        );
        output.line(&format!(
            "{:<9} tool call {} ({}) was interrupted; {kept}; `runs continue` re-runs it if \
             the tool is idempotent, otherwise tells the model its outcome is unknown",
            "unfinished", call.tool_call_id, call.tool_name
        ))?;
    }
    Ok(())
}

/// `runs show`'s child runs (of its sub-agents): `child     RUN STATUS AGENT (tool call ID)`
/// lines, oldest first.
///
/// # Errors
/// Writing to stdout failed.
fn show_children(output: &mut Output, children: &[ListedRun]) -> std::io::Result<()> {
    for child in children {
        let line = match child {
            ListedRun::Run(summary) => format!(
                "{} {} {} (tool call {})",
                summary.run_id,
                summary.status,
                summary.agent_id,
                summary
                    .parent
                    .as_ref()
                    .map_or("-", |parent| parent.tool_call_id.as_str())
            ),
            other => format!("{} unreadable", other.run_id()),
        };
        output.line(&format!("{:<9} {line}", "child"))?;
    }
    Ok(())
}

/// The `lease` field of a running run: held by a live process, or what to run when its
/// process stopped.
fn lease_line(context: &Context, run: &RunKey, stored: &StoredRun) -> String {
    let continue_run = context.command("runs continue").run(run);
    match &stored.lease {
        Some(lease) if lease.is_live() => format!(
            "held by a running process until {} UTC (renewed while it lives)",
            format_time(lease.expires_at_ms)
        ),
        Some(lease) => format!(
            "expired at {} UTC: the process running it stopped; continue it with \
             `{continue_run}`",
            format_time(lease.expires_at_ms)
        ),
        None => {
            format!("none: the process running it stopped; continue it with `{continue_run}`")
        }
    }
}

/// `runs show`'s pending calls: how to answer them, then each one's payload, resume schema
/// and deadline.
///
/// # Errors
/// Writing to stdout failed.
fn show_pending(
    output: &mut Output,
    context: &Context,
    run: &RunKey,
    state: &RunState,
) -> std::io::Result<()> {
    let pending = state.pending_tool_calls();
    if pending.is_empty() {
        return Ok(());
    }
    output.line("")?;
    print_pending(output, context, run, &pending, None)?;
    for call in &pending {
        output.line("")?;
        output.line(&format!(
            "tool call {} ({})",
            call.tool_call_id, call.tool_name
        ))?;
        output.line(&format!(
            "  payload       {}",
            cut(&call.suspend_payload.to_string(), SHOW_LIMIT)
        ))?;
        let schema = call
            .resume_schema
            .as_ref()
            .map_or_else(|| "any JSON".to_owned(), Value::to_string);
        output.line(&format!("  resume schema {}", cut(&schema, SHOW_LIMIT)))?;
        if let Some(at) = call.expires_at_ms {
            output.line(&format!("  expires       {} UTC", format_time(at)))?;
        }
        if let Some(quorum) = call.quorum {
            output.line(&format!(
                "  approvals     {} of {quorum}",
                call.approvals.len()
            ))?;
        }
    }
    // Decisions on calls that still wait: a quorum's votes so far.
    for decision in state.decisions() {
        if pending
            .iter()
            .any(|call| &call.tool_call_id == decision.tool_call_id)
        {
            output.line(&format!(
                "  {} {}",
                decision.tool_call_id,
                audit_line(decision.record, &|text| cut(text, SHOW_LIMIT))
            ))?;
        }
    }
    Ok(())
}

/// Who an actor is, for people: `ID (resource R, roles a, b; via ROUTE)`, the parts it has.
fn actor_text(actor: &askloop_core::Actor) -> String {
    who_text(
        Some(actor.id.as_str()),
        actor.resource.as_ref().map(|id| id.as_str()),
        &actor.roles,
        actor.route.as_deref(),
    )
}

/// `ID (resource R, roles a, b; via ROUTE)` from the parts given; `(not said)` without an id.
fn who_text(
    id: Option<&str>,
    resource: Option<&str>,
    roles: &[String],
    route: Option<&str>,
) -> String {
    let escape = |text: &str| crate::format::escape_controls(text).into_owned();
    let mut text = id.map_or_else(|| "(not said)".to_owned(), escape);
    let mut details = Vec::new();
    if let Some(resource) = resource {
        details.push(format!("resource {}", escape(resource)));
    }
    if !roles.is_empty() {
        let roles: Vec<String> = roles.iter().map(|role| escape(role)).collect();
        details.push(format!("roles {}", roles.join(", ")));
    }
    let mut inside = details.join(", ");
    if let Some(route) = route {
        if !inside.is_empty() {
            inside.push_str("; ");
        }
        inside.push_str(&format!("via {}", escape(route)));
    }
    if !inside.is_empty() {
        text.push_str(&format!(" ({inside})"));
    }
    text
}

/// One audit record for people: `ACTION by WHO at TIME UTC`, with the arguments an approval
/// edited (each cut by `one_line`).
fn audit_line(record: &askloop_core::AuditRecord, one_line: &dyn Fn(&str) -> String) -> String {
    // An approval that edited the arguments shows both versions.
    let edit = record.args_edit.as_ref().map_or_else(String::new, |edit| {
        format!(
            ", arguments edited from {} to {}",
            one_line(&edit.original.to_string()),
            one_line(&edit.edited.to_string())
        )
    });
    format!(
        "{} by {} at {} UTC{edit}",
        record.action.as_str(),
        who_text(
            record.by.as_deref(),
            record.resource.as_ref().map(|id| id.as_str()),
            &record.roles,
            record.route.as_deref()
        ),
        format_time(record.at_ms)
    )
}

/// `runs show`'s messages, after a blank line: a heading saying whether the thread's earlier
/// messages are left out, then each message's lines.
///
/// # Errors
/// Writing to stdout failed.
fn show_messages(output: &mut Output, state: &RunState) -> std::io::Result<()> {
    output.line("")?;
    match (state.legacy_history(), state.history_through()) {
        (Some(legacy), _) if !legacy.is_empty() => output.line(&format!(
            "messages ({} earlier messages of the thread not shown)",
            legacy.len()
        ))?,
        (None, Some(_)) => {
            output.line("messages (the thread's earlier messages not shown)")?;
        }
        _ => output.line("messages")?,
    }
    for message in state.messages() {
        for line in message_lines(message) {
            output.line(&format!("  {line}"))?;
        }
    }
    Ok(())
}

/// A message as lines: `user: …`, `assistant: …`, `assistant calls TOOL {…}`, `tool TOOL: …`;
/// each text on one line, cut to [`SHOW_LIMIT`] characters.
fn message_lines(message: &Message) -> Vec<String> {
    let one_line = |text: &str| cut(&text.replace('\n', " "), SHOW_LIMIT);
    match message {
        Message::User { text } => vec![format!("user: {}", one_line(text))],
        Message::Assistant { parts } => parts
            .iter()
            .filter_map(|part| match part {
                AssistantPart::Text { text } => Some(format!("assistant: {}", one_line(text))),
                AssistantPart::ToolCall(call) => Some(tool_call_line(call)),
                _ => None,
            })
            .collect(),
        Message::Tool { results } => results
            .iter()
            .flat_map(|result| {
                let mut lines = vec![format!("tool {}", result_summary(result))];
                lines.extend(
                    result
                        .audit
                        .iter()
                        .map(|record| format!("  {}", audit_line(record, &one_line))),
                );
                lines
            })
            .collect(),
    }
}

/// An assistant's tool call as one line; an `ask_user` call shows its question and labels.
fn tool_call_line(call: &ToolCall) -> String {
    let args = call.args.to_value();
    if call.name == AskUser::NAME
        && let Ok(question) = serde_json::from_value::<AskUserArgs>(args.clone())
    {
        let labels: Vec<String> = question
            .options
            .iter()
            .flatten()
            .map(|option| cut(&option.label.replace('\n', " "), SHOW_LIMIT))
            .collect();
        let choices = if labels.is_empty() {
            String::new()
        } else {
            format!(" [{}]", labels.join(" | "))
        };
        return format!(
            "assistant asks (tool call {}): {}{choices}",
            call.id,
            cut(&question.question.replace('\n', " "), SHOW_LIMIT)
        );
    }
    format!(
        "assistant calls {} {} (tool call {})",
        call.name,
        cut(&args.to_string(), SHOW_LIMIT),
        call.id
    )
}
