//! A form field ([`Field`]) as JSON: what the page renders a pending call's answer form from
//! (the `form` of a [`crate::wire::PendingCall`]).

use serde_json::{Value, json};

use crate::form::{Field, FieldKind};

/// A form field as JSON: `{kind, title, description, hint, …}`, `title` and `description`
/// `null` when the schema gives none, `hint` in a few words ([`Field::hint`]), and by `kind`:
///
/// | `kind` | more keys |
/// |---|---|
/// | `select`, `multi-select` | `choices: [{value, label, description}]` |
/// | `confirm` | — |
/// | `text` | `nonBlank`, `minLength`, `maxLength`, `pattern` |
/// | `number` | `integer`, `minimum`, `maximum` |
/// | `object` | `properties: [{name, required, field}]` (`field`: this shape again) |
/// | `json` | — |
///
/// # Example
///
/// ```
/// use askloop_core::form::Field;
/// use serde_json::json;
///
/// let field = Field::from_schema(&json!({"type": "string", "enum": ["main", "docs"]}));
/// let form = askloop_core::wire::field_to_json(&field);
/// assert_eq!(form["kind"], "select");
/// assert_eq!(form["choices"][1]["label"], "docs");
/// ```
pub fn field_to_json(field: &Field) -> Value {
    let mut out = json!({
        "title": field.title,
        "description": field.description,
        "hint": field.hint(),
    });
    if let (Some(out), Value::Object(extra)) = (out.as_object_mut(), kind_json(&field.kind)) {
        out.extend(extra);
    }
    out
}

/// The `kind` of a field and the keys that come with it.
fn kind_json(kind: &FieldKind) -> Value {
    match kind {
        FieldKind::Select { choices } | FieldKind::MultiSelect { choices } => json!({
            "kind": if matches!(kind, FieldKind::Select { .. }) { "select" } else { "multi-select" },
            "choices": choices.iter().map(|choice| json!({
                "value": choice.value,
                "label": choice.label,
                "description": choice.description,
            })).collect::<Vec<_>>(),
        }),
        FieldKind::Confirm => json!({"kind": "confirm"}),
        FieldKind::Text {
            min_length,
            max_length,
            pattern,
            non_blank,
        } => json!({
            "kind": "text",
            "minLength": min_length,
            "maxLength": max_length,
            "pattern": pattern,
            "nonBlank": non_blank,
        }),
        FieldKind::Number {
            integer,
            minimum,
            maximum,
        } => json!({"kind": "number", "integer": integer, "minimum": minimum, "maximum": maximum}),
        FieldKind::Object { properties } => json!({
            "kind": "object",
            "properties": properties.iter().map(|property| json!({
                "name": property.name,
                "required": property.required,
                "field": field_to_json(&property.field),
            })).collect::<Vec<_>>(),
        }),
        _ => json!({"kind": "json"}),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::form::Field;
    use crate::wire::field_to_json;

    #[test]
    fn fields_become_json_the_page_reads() {
        let field = Field::from_schema(&json!({
            "type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1
        }));
        let value = field_to_json(&field);
        assert_eq!(value["kind"], "multi-select");
        assert_eq!(value["choices"][1]["value"], "b");
        assert_eq!(value["hint"], "one or more of 2 choices");
        let text = field_to_json(&Field::from_schema(
            &json!({"type": "string", "minLength": 1, "pattern": "[^\\s\\p{Cc}\\p{Cf}]"}),
        ));
        assert_eq!(text["kind"], "text");
        assert_eq!(text["nonBlank"], true);
    }

    #[test]
    fn an_object_field_nests_its_properties() {
        let field = Field::from_schema(&json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}, "count": {"type": "integer", "minimum": 1}},
            "required": ["ok"]
        }));
        let value = field_to_json(&field);
        assert_eq!(value["kind"], "object");
        assert_eq!(value["properties"][0]["name"], "ok");
        assert_eq!(value["properties"][0]["required"], true);
        assert_eq!(value["properties"][0]["field"]["kind"], "confirm");
        assert_eq!(value["properties"][1]["field"]["kind"], "number");
        assert_eq!(value["properties"][1]["field"]["integer"], true);
        assert_eq!(value["properties"][1]["field"]["minimum"], 1.0);
    }
}
