//! The elicitation payload, its resume schema and the matching of a repeated question.

use askloop_core::schema::SchemaValidator;
use serde_json::json;

use super::*;

fn form(message: &str) -> Elicitation {
    Elicitation {
        server: "shop".into(),
        tool: "order".into(),
        message: message.into(),
        request: ElicitationRequest::Form {
            requested_schema: json!({
                "type": "object",
                "properties": {"size": {"type": "string", "enum": ["S", "M"]}},
                "required": ["size"]
            }),
        },
    }
}

fn link(url: &str, id: &str) -> Elicitation {
    Elicitation {
        server: "shop".into(),
        tool: "pay".into(),
        message: "Pay at the bank".into(),
        request: ElicitationRequest::Url {
            url: url.into(),
            elicitation_id: id.into(),
        },
    }
}

fn problems(schema: &Value, answer: Value) -> Vec<String> {
    SchemaValidator::new(schema).unwrap().problems(&answer)
}

#[test]
fn the_form_schema_takes_the_three_actions_and_content_only_when_accepting() {
    let schema = resume_schema(&form("Which size?").request);
    assert!(
        problems(
            &schema,
            json!({"action": "accept", "content": {"size": "M"}})
        )
        .is_empty()
    );
    assert!(problems(&schema, json!({"action": "decline"})).is_empty());
    assert!(problems(&schema, json!({"action": "cancel"})).is_empty());
    // Accepting needs content that fits the server's schema.
    assert!(!problems(&schema, json!({"action": "accept"})).is_empty());
    assert!(
        !problems(
            &schema,
            json!({"action": "accept", "content": {"size": "XL"}})
        )
        .is_empty()
    );
    // Declining sends nothing, so it takes nothing.
    assert!(
        !problems(
            &schema,
            json!({"action": "decline", "content": {"size": "M"}})
        )
        .is_empty()
    );
    assert!(!problems(&schema, json!({"action": "maybe"})).is_empty());
    assert!(!problems(&schema, json!("decline")).is_empty());
    // The CLI and the page ask it as a form: the action to choose, then the fields.
    let field = askloop_core::form::Field::from_schema(&schema);
    let askloop_core::form::FieldKind::Object { properties } = &field.kind else {
        panic!("{field:?}");
    };
    assert_eq!(properties[0].name, "action");
    assert!(properties[0].required);
    let labels: Vec<&str> = properties[0]
        .field
        .choices()
        .iter()
        .map(|choice| choice.label.as_str())
        .collect();
    assert_eq!(labels, ["accept", "decline", "cancel"]);
    assert_eq!(properties[1].name, "content");
    assert!(matches!(
        properties[1].field.kind,
        askloop_core::form::FieldKind::Object { .. }
    ));
}

#[test]
fn the_url_schema_takes_an_action_alone() {
    let schema = resume_schema(&link("https://bank.example/pay", "e1").request);
    assert!(problems(&schema, json!({"action": "accept"})).is_empty());
    assert!(!problems(&schema, json!({"action": "accept", "content": {}})).is_empty());
}

#[test]
fn the_payload_round_trips_and_shows_the_question() {
    let payload = ElicitationPayload::new(
        link("https://bank.example/pay", "e1"),
        vec![Answered {
            elicitation: form("Which size?"),
            answer: ElicitationAnswer {
                action: ElicitationDecision::Accept,
                content: Some(json!({"size": "M"})),
            },
        }],
    );
    let value = serde_json::to_value(&payload).unwrap();
    assert_eq!(value["kind"], "mcp-elicitation");
    assert_eq!(
        value["question"],
        "MCP server shop asks: Pay at the bank Open this link, then answer: https://bank.example/pay"
    );
    assert_eq!(value["url"], "https://bank.example/pay");
    assert_eq!(value["elicitation"]["mode"], "url");
    assert_eq!(value["answered"][0]["elicitation"]["mode"], "form");
    assert_eq!(
        value["answered"][0]["answer"],
        json!({"action": "accept", "content": {"size": "M"}})
    );
    assert_eq!(
        ElicitationPayload::from_value(&value).unwrap(),
        Some(payload)
    );
    assert_eq!(
        ElicitationPayload::from_value(&json!({"question": "Where?"})).unwrap(),
        None
    );
    assert!(ElicitationPayload::from_value(&json!({"kind": "mcp-elicitation"})).is_err());
}

#[test]
fn a_stored_answer_answers_the_same_question_once_and_in_order() {
    let accept = |size: &str| ElicitationAnswer {
        action: ElicitationDecision::Accept,
        content: Some(json!({"size": size})),
    };
    let mut call = ActiveCall::new(
        "order",
        vec![
            Answered {
                elicitation: form("Which size?"),
                answer: accept("S"),
            },
            Answered {
                elicitation: link("https://bank.example/pay", "e1"),
                answer: ElicitationAnswer {
                    action: ElicitationDecision::Decline,
                    content: None,
                },
            },
        ],
        None,
        Arc::new(Notify::new()),
    );
    // Another message, another schema: not the same question.
    assert_eq!(call.stored_answer(&form("Which size, again?")), None);
    let mut other_schema = form("Which size?");
    other_schema.request = ElicitationRequest::Form {
        requested_schema: json!({"type": "object", "properties": {}}),
    };
    assert_eq!(call.stored_answer(&other_schema), None);
    // A link is the same question whatever the server's elicitation id.
    assert_eq!(
        call.stored_answer(&link("https://bank.example/pay", "e2"))
            .map(|answer| answer.action),
        Some(ElicitationDecision::Decline)
    );
    assert_eq!(call.stored_answer(&form("Which size?")), Some(accept("S")));
    // Each answer once: asked again, the person is asked again.
    assert_eq!(call.stored_answer(&form("Which size?")), None);
    let used = call.used_answers();
    assert_eq!(used.len(), 2);
    assert_eq!(used[0].elicitation.tool, "pay");
    assert_eq!(used[1].elicitation.tool, "order");
}

#[test]
fn the_answer_is_the_mcp_result() {
    let accept = ElicitationAnswer {
        action: ElicitationDecision::Accept,
        content: Some(json!({"size": "M"})),
    };
    assert_eq!(
        serde_json::to_value(accept.to_result()).unwrap(),
        json!({"action": "accept", "content": {"size": "M"}})
    );
    let decline: ElicitationAnswer = serde_json::from_value(json!({"action": "decline"})).unwrap();
    assert_eq!(
        serde_json::to_value(decline.to_result()).unwrap(),
        json!({"action": "decline"})
    );
    assert!(
        serde_json::from_value::<ElicitationAnswer>(json!({"action": "accept", "extra": 1}))
            .is_err()
    );
}

#[test]
fn the_client_advertises_form_and_url_elicitation_only() {
    let config = serde_json::to_value(client_config()).unwrap();
    assert_eq!(
        config["capabilities"],
        json!({"elicitation": {"form": {}, "url": {}}})
    );
}
