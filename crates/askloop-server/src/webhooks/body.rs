//! What an endpoint receives for an event: the event's JSON (standard), or a Slack
//! incoming-webhook message (<https://api.slack.com/messaging/webhooks>: `text` as the
//! notification's fallback, `blocks` with the question, its options and a button to the answer
//! link).

use askloop_core::event::{RunEvent, RunEventKind};
use serde_json::{Value, json};

use crate::webhooks::WebhookFormat;

/// The body for `event` in `format`, as bytes (what is signed and sent), with `answer_url` (the
/// delivery's answer link, made by the deliverer) for a raised question or a requested
/// approval.
///
/// # Errors
/// The JSON encoder's (never expected: the event is plain data).
pub(crate) fn body(
    event: &RunEvent,
    format: WebhookFormat,
    answer_url: Option<String>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut event = event.clone();
    event.data.answer_url = answer_url.filter(|_| takes_a_link(&event));
    match format {
        WebhookFormat::Slack => serde_json::to_vec(&slack_message(&event)),
        _ => serde_json::to_vec(&event),
    }
}

/// Whether the event's body carries an answer link: `question.raised` and
/// `approval.requested` (the deliverer makes it, `crate::links`); other events carry
/// `"answerUrl": null`, and so does every event without a public URL (Slack messages then
/// have no button).
fn takes_a_link(event: &RunEvent) -> bool {
    matches!(
        event.kind,
        RunEventKind::QuestionRaised | RunEventKind::ApprovalRequested
    )
}

/// Text for Slack's `mrkdwn`: `&`, `<` and `>` escaped, as Slack asks.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The call's question (`payload.question`), else the tool's name.
fn question(event: &RunEvent) -> String {
    event
        .data
        .call
        .as_ref()
        .map(|call| {
            call.payload
                .get("question")
                .and_then(Value::as_str)
                .map_or_else(|| call.tool_name.clone(), str::to_owned)
        })
        .unwrap_or_default()
}

/// The call's option labels (`payload.options[].label`).
fn options(event: &RunEvent) -> Vec<String> {
    event
        .data
        .call
        .as_ref()
        .and_then(|call| call.payload.get("options"))
        .and_then(Value::as_array)
        .map(|options| {
            options
                .iter()
                .filter_map(|option| option.get("label").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// One line saying what happened.
fn headline(event: &RunEvent) -> String {
    let run = &event.data.run_id;
    match event.kind {
        RunEventKind::QuestionRaised => format!("Question: {}", question(event)),
        RunEventKind::QuestionAnswered => format!("Answered: {}", question(event)),
        RunEventKind::QuestionExpired => format!("Expired unanswered: {}", question(event)),
        RunEventKind::ApprovalRequested => format!("Approval needed: {}", question(event)),
        RunEventKind::ApprovalDecided => match event.data.approved {
            Some(false) => format!("Declined: {}", question(event)),
            _ => format!("Approved: {}", question(event)),
        },
        RunEventKind::RunCompleted => format!("Run {run} completed"),
        RunEventKind::RunFailed => format!("Run {run} failed"),
        _ => format!("Run {run} cancelled"),
    }
}

/// The Slack message of `event`.
fn slack_message(event: &RunEvent) -> Value {
    let headline = headline(event);
    let mut blocks = vec![json!({
        "type": "section",
        "text": {"type": "mrkdwn", "text": format!("*{}*", escape(&headline))},
    })];
    let options = options(event);
    if !options.is_empty() {
        let list: Vec<String> = options
            .iter()
            .map(|label| format!("• {}", escape(label)))
            .collect();
        blocks.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": list.join("\n")},
        }));
    }
    if let Some(args) = approval_args(event) {
        blocks.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": args},
        }));
    }
    if let Some(url) = &event.data.answer_url {
        blocks.push(json!({
            "type": "actions",
            "elements": [{
                "type": "button",
                "text": {"type": "plain_text", "text": "Answer"},
                "url": url,
                "style": "primary",
            }],
        }));
    }
    let mut context = format!(
        "{} · run {} · agent {}",
        event.kind, event.data.run_id, event.data.agent_id
    );
    if let Some(resource) = &event.data.resource_id {
        context.push_str(&format!(" · {resource}"));
    }
    blocks.push(json!({
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": escape(&context)}],
    }));
    // `text` is what Slack shows in notifications: escaped as the blocks are, so a question
    // cannot plant a mention (`<!channel>`) or a disguised link there.
    json!({"text": escape(&headline), "blocks": blocks})
}

/// The most characters of a call's arguments a Slack message shows.
const MAX_ARGS_CHARS: usize = 1_000;

/// The arguments of an approval's call as a Slack code block (cut to [`MAX_ARGS_CHARS`]), for
/// `approval.requested`; `None` for other events.
fn approval_args(event: &RunEvent) -> Option<String> {
    if event.kind != RunEventKind::ApprovalRequested {
        return None;
    }
    let call = event.data.call.as_ref()?;
    let text = serde_json::to_string_pretty(&call.args).ok()?;
    let mut shown: String = text.chars().take(MAX_ARGS_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    // Backticks would end the code block early.
    Some(format!("```{}```", escape(&shown).replace('`', "'")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raised() -> RunEvent {
        serde_json::from_value(json!({
            "id": "evt_1", "type": "question.raised", "timestamp": "2026-12-05T14:00:00.000Z",
            "data": {"runId": "R", "agentId": "assistant", "threadId": "T", "resourceId": "acme",
              "call": {"runId": "R", "toolCallId": "c1", "toolName": "ask_user", "kind": "answer",
                "args": {}, "payload": {"question": "Ship <it>?",
                  "options": [{"label": "yes"}, {"label": "no"}]}},
              "answerUrl": null}
        }))
        .unwrap()
    }

    #[test]
    fn slack_messages_carry_the_question_and_options() {
        let body: Value =
            serde_json::from_slice(&body(&raised(), WebhookFormat::Slack, None).unwrap()).unwrap();
        assert_eq!(
            body["text"], "Question: Ship &lt;it&gt;?",
            "escaped: no mention"
        );
        assert_eq!(
            body["blocks"][0]["text"]["text"],
            "*Question: Ship &lt;it&gt;?*"
        );
        assert_eq!(body["blocks"][1]["text"]["text"], "• yes\n• no");
        assert_eq!(body["blocks"][2]["type"], "context", "no link, no button");
        let mut linked = raised();
        linked.data.answer_url = Some("https://askloop.example/answer/t".into());
        let message = slack_message(&linked);
        assert_eq!(
            message["blocks"][2]["elements"][0]["url"],
            "https://askloop.example/answer/t"
        );
    }

    #[test]
    fn standard_bodies_are_the_event() {
        let body: Value =
            serde_json::from_slice(&body(&raised(), WebhookFormat::Standard, None).unwrap())
                .unwrap();
        assert_eq!(body["type"], "question.raised");
        assert_eq!(body["data"]["call"]["toolCallId"], "c1");
        assert!(body["data"]["answerUrl"].is_null());
    }

    #[test]
    fn slack_approvals_show_the_arguments_escaped() {
        let mut event = raised();
        event.kind = RunEventKind::ApprovalRequested;
        if let Some(call) = event.data.call.as_mut() {
            call.args = json!({"path": "<!channel> `rm`"});
        }
        let message = slack_message(&event);
        let args = message["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|block| block["text"]["text"].as_str())
            .find(|text| text.starts_with("```"))
            .unwrap();
        assert!(args.starts_with("```") && args.ends_with("```"), "{args}");
        assert!(args.contains("&lt;!channel&gt; 'rm'"), "{args}");
    }
}
