//! Forms: what a resume schema asks a person for, so a front end can render any suspension —
//! not only `ask_user`'s — as real prompts instead of raw JSON.
//!
//! [`Field::from_schema`] reads a JSON Schema (draft-07 or 2020-12, `$ref`s into `$defs` or
//! `definitions` resolved) into one [`Field`]:
//!
//! | schema | [`FieldKind`] |
//! |---|---|
//! | `enum`, `const`, or `oneOf`/`anyOf` of `const`s | [`FieldKind::Select`] (pick one) |
//! | `type: array` whose `items` is one of those | [`FieldKind::MultiSelect`] (pick several) |
//! | `type: boolean` | [`FieldKind::Confirm`] |
//! | `type: string` | [`FieldKind::Text`], with `minLength`, `maxLength`, `pattern` |
//! | `type: integer` / `number` | [`FieldKind::Number`], with `minimum`, `maximum` |
//! | `type: object` with `properties` | [`FieldKind::Object`]: one field per property, required first |
//! | anything else | [`FieldKind::Json`] |
//!
//! A nullable type (`type: [T, "null"]`, or `anyOf: [T, {type: null}]`, what schemars makes of
//! an `Option`) is read as `T`. Turning typed text into the answer is [`crate::answer`]'s job.

use serde_json::{Map, Value};

use crate::schema::SchemaValidator;
use crate::text::{NON_BLANK_PATTERN, is_blank};

/// How deep `$ref`s and nested objects are followed; deeper parts are asked as JSON.
const MAX_DEPTH: usize = 16;

/// One input a resume schema asks for: its kind, and the words the schema gives it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Field {
    /// What kind of input this is.
    pub kind: FieldKind,
    /// The schema's `title`, if any.
    pub title: Option<String>,
    /// The schema's `description`, if any.
    pub description: Option<String>,
    /// The field's own schema, self-contained (the root's `$defs` and `definitions` copied in),
    /// for [`Field::problems`].
    schema: Value,
}

/// The kinds of input a [`Field`] can be.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum FieldKind {
    /// Pick exactly one of `choices`.
    Select {
        /// The choices, in the schema's order.
        choices: Vec<Choice>,
    },
    /// Pick one or more distinct `choices` (the answer is an array).
    MultiSelect {
        /// The choices, in the schema's order.
        choices: Vec<Choice>,
    },
    /// Yes or no (`true` / `false`).
    Confirm,
    /// A text (a JSON string).
    Text {
        /// `minLength`.
        min_length: Option<u64>,
        /// `maxLength`.
        max_length: Option<u64>,
        /// `pattern`, unless it is the core's "not blank" pattern (see `non_blank`).
        pattern: Option<String>,
        /// Whether a blank text is refused (`ask_user`'s free-text questions).
        non_blank: bool,
    },
    /// A number (a JSON number).
    Number {
        /// Whether only whole numbers are accepted (`type: integer`).
        integer: bool,
        /// `minimum` (or `exclusiveMinimum`).
        minimum: Option<f64>,
        /// `maximum` (or `exclusiveMaximum`).
        maximum: Option<f64>,
    },
    /// An object, asked one property at a time.
    Object {
        /// The properties: required ones first, each group in the schema's order.
        properties: Vec<Property>,
    },
    /// Anything else: typed as JSON.
    Json,
}

/// One choice of a select: the JSON value it stands for and the label people see.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Choice {
    /// The value the answer carries (for `ask_user`, the exact label).
    pub value: Value,
    /// What people see and type: the string itself, or the JSON text of another value.
    pub label: String,
    /// The choice's `description` (or `title`), from a `oneOf` of `const`s.
    pub description: Option<String>,
}

/// One property of an object field.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Property {
    /// The property's name (the JSON key).
    pub name: String,
    /// Whether the object must have it.
    pub required: bool,
    /// How it is asked.
    pub field: Field,
}

impl Field {
    /// The field `schema` asks for (see the module's table). Never fails: what it does not
    /// recognise is [`FieldKind::Json`].
    pub fn from_schema(schema: &Value) -> Self {
        read_field(schema, schema, 0)
    }

    /// Every problem of `value` as an answer to this field, in words (empty when it is valid):
    /// `"the answer is empty"` for a blank text where one is refused, else the schema's
    /// problems, each prefixed with the path inside the field when it is not the whole value.
    pub fn problems(&self, value: &Value) -> Vec<String> {
        if let (
            FieldKind::Text {
                non_blank: true, ..
            },
            Value::String(text),
        ) = (&self.kind, value)
            && is_blank(text)
        {
            return vec!["the answer is empty".to_owned()];
        }
        match SchemaValidator::new(&self.schema) {
            Ok(validator) => validator
                .problems(value)
                .into_iter()
                .map(|problem| match problem.strip_prefix("`(root)`: ") {
                    Some(message) => message.to_owned(),
                    None => problem,
                })
                .collect(),
            // Checked again, and reported, where the answer is validated.
            Err(_) => Vec::new(),
        }
    }

    /// What the field accepts, in a few words for a hint or a help line: `"yes or no"`,
    /// `"one of 3 choices"`, `"one or more of 3 choices"`, `"text of 1 to 20 characters"`,
    /// `"non-empty text"`, `"an integer from 1 to 10"`, `"a number ≥ 0"`,
    /// `"the fields amount, note"`, `"JSON"`.
    pub fn hint(&self) -> String {
        match &self.kind {
            FieldKind::Select { choices } => format!("one of {} choices", choices.len()),
            FieldKind::MultiSelect { choices } => {
                format!("one or more of {} choices", choices.len())
            }
            FieldKind::Confirm => "yes or no".to_owned(),
            FieldKind::Text {
                min_length,
                max_length,
                pattern,
                non_blank,
            } => {
                let mut hint = if *non_blank {
                    "non-empty text".to_owned()
                } else {
                    "text".to_owned()
                };
                match (min_length, max_length) {
                    (Some(min), Some(max)) => {
                        hint.push_str(&format!(" of {min} to {max} characters"))
                    }
                    (Some(min), None) if *min > 1 || !non_blank => {
                        hint.push_str(&format!(" of at least {min} characters"));
                    }
                    (_, Some(max)) => hint.push_str(&format!(" of at most {max} characters")),
                    _ => {}
                }
                if let Some(pattern) = pattern {
                    hint.push_str(&format!(" matching /{pattern}/"));
                }
                hint
            }
            FieldKind::Number {
                integer,
                minimum,
                maximum,
            } => {
                let mut hint = if *integer { "an integer" } else { "a number" }.to_owned();
                match (minimum, maximum) {
                    (Some(min), Some(max)) => hint.push_str(&format!(" from {min} to {max}")),
                    (Some(min), None) => hint.push_str(&format!(" ≥ {min}")),
                    (None, Some(max)) => hint.push_str(&format!(" ≤ {max}")),
                    (None, None) => {}
                }
                hint
            }
            FieldKind::Object { properties } => {
                let names: Vec<&str> = properties.iter().map(|p| p.name.as_str()).collect();
                format!("the fields {}", names.join(", "))
            }
            FieldKind::Json => "JSON".to_owned(),
        }
    }

    /// The field's choices, for a select or multi-select; empty otherwise.
    pub fn choices(&self) -> &[Choice] {
        match &self.kind {
            FieldKind::Select { choices } | FieldKind::MultiSelect { choices } => choices,
            _ => &[],
        }
    }
}

/// `schema` (inside `root`) as a field, `depth` references or objects deep.
fn read_field(root: &Value, original: &Value, depth: usize) -> Field {
    let schema = resolve(root, original, depth);
    // Words next to a `$ref` (a property's own description) win over the target's.
    let words = |key: &str| text_of(original, key).or_else(|| text_of(schema, key));
    let json = |schema: &Value| Field {
        kind: FieldKind::Json,
        title: words("title"),
        description: words("description"),
        schema: self_contained(root, schema),
    };
    let Some(object) = schema.as_object() else {
        return json(schema);
    };
    if depth > MAX_DEPTH {
        return json(schema);
    }
    if let Some(inner) = without_null(root, object, depth) {
        let mut field = read_field(root, &inner, depth + 1);
        field.title = words("title").or(field.title);
        field.description = words("description").or(field.description);
        field.schema = self_contained(root, schema);
        return field;
    }
    let kind = if let Some(choices) = choices_of(root, object, depth) {
        FieldKind::Select { choices }
    } else {
        match object.get("type").and_then(Value::as_str) {
            Some("boolean") => FieldKind::Confirm,
            Some("string") => {
                let pattern = object.get("pattern").and_then(Value::as_str);
                FieldKind::Text {
                    min_length: object.get("minLength").and_then(Value::as_u64),
                    max_length: object.get("maxLength").and_then(Value::as_u64),
                    pattern: pattern
                        .filter(|pattern| *pattern != NON_BLANK_PATTERN)
                        .map(str::to_owned),
                    non_blank: pattern == Some(NON_BLANK_PATTERN),
                }
            }
            Some(kind @ ("integer" | "number")) => FieldKind::Number {
                integer: kind == "integer",
                minimum: object
                    .get("minimum")
                    .or_else(|| object.get("exclusiveMinimum"))
                    .and_then(Value::as_f64),
                maximum: object
                    .get("maximum")
                    .or_else(|| object.get("exclusiveMaximum"))
                    .and_then(Value::as_f64),
            },
            Some("array") => {
                let items = object.get("items").map(|items| resolve(root, items, depth));
                match items
                    .and_then(Value::as_object)
                    .and_then(|items| choices_of(root, items, depth + 1))
                {
                    Some(choices) => FieldKind::MultiSelect { choices },
                    None => FieldKind::Json,
                }
            }
            Some("object") => match object.get("properties").and_then(Value::as_object) {
                Some(properties) if !properties.is_empty() => FieldKind::Object {
                    properties: properties_of(root, object, properties, depth),
                },
                _ => FieldKind::Json,
            },
            _ => FieldKind::Json,
        }
    };
    Field {
        kind,
        title: words("title"),
        description: words("description"),
        schema: self_contained(root, schema),
    }
}

/// Follows `$ref`s to `#/$defs/…` or `#/definitions/…` (any JSON pointer into the root).
fn resolve<'a>(root: &'a Value, mut schema: &'a Value, depth: usize) -> &'a Value {
    for _ in depth..=MAX_DEPTH {
        let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
            return schema;
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            return schema;
        };
        match root.pointer(pointer) {
            Some(target) => schema = target,
            None => return schema,
        }
    }
    schema
}

/// A schema that validates on its own: `schema`, with the root's `$defs` and `definitions`
/// when it has none (so its `$ref`s still resolve).
fn self_contained(root: &Value, schema: &Value) -> Value {
    let mut own = schema.clone();
    if let Value::Object(own) = &mut own {
        for key in ["$defs", "definitions"] {
            if let Some(definitions) = root.get(key)
                && !own.contains_key(key)
            {
                own.insert(key.to_owned(), definitions.clone());
            }
        }
    }
    own
}

fn text_of(schema: &Value, key: &str) -> Option<String> {
    schema
        .get(key)
        .and_then(Value::as_str)
        .filter(|text| !is_blank(text))
        .map(str::to_owned)
}

/// The schema without its `null` alternative, if it is a nullable one: `type: [T, "null"]`
/// (the rest of the schema kept), or `anyOf`/`oneOf` of one schema and `{type: "null"}`.
fn without_null(root: &Value, object: &Map<String, Value>, depth: usize) -> Option<Value> {
    if let Some(Value::Array(types)) = object.get("type") {
        let others: Vec<&Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .collect();
        if others.len() == 1 && types.len() == 2 {
            let mut inner = object.clone();
            inner.insert("type".to_owned(), others[0].clone());
            return Some(Value::Object(inner));
        }
        return None;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(members)) = object.get(key) {
            let is_null = |member: &Value| {
                resolve(root, member, depth)
                    .get("type")
                    .and_then(Value::as_str)
                    == Some("null")
            };
            let others: Vec<&Value> = members.iter().filter(|member| !is_null(member)).collect();
            if others.len() == 1 && members.len() == 2 {
                return Some(others[0].clone());
            }
        }
    }
    None
}

/// The choices of a select schema: `enum`, `const`, or a `oneOf`/`anyOf` whose members are
/// each one value (`const`, or an `enum` of one) with their descriptions, or an `enum` of
/// several beside object alternatives (ask_user's `{"other": "…"}` with `allow_other`).
fn choices_of(root: &Value, object: &Map<String, Value>, depth: usize) -> Option<Vec<Choice>> {
    if let Some(Value::Array(values)) = object.get("enum") {
        return (!values.is_empty())
            .then(|| values.iter().map(|value| choice(value, None)).collect());
    }
    if let Some(value) = object.get("const") {
        return Some(vec![choice(value, None)]);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(members)) = object.get(key) {
            let mut choices = Vec::with_capacity(members.len());
            for member in members {
                let member = resolve(root, member, depth);
                let description =
                    text_of(member, "description").or_else(|| text_of(member, "title"));
                match (member.get("const"), member.get("enum")) {
                    (Some(value), _) => choices.push(choice(value, description)),
                    (None, Some(Value::Array(values))) if values.len() == 1 => {
                        choices.extend(
                            values
                                .iter()
                                .map(|value| choice(value, description.clone())),
                        );
                    }
                    // A set of labels beside another form of answer (ask_user's
                    // `{"other": "…"}`): the labels are the choices; the other form is given
                    // as JSON.
                    (None, Some(Value::Array(values))) => {
                        choices.extend(values.iter().map(|value| choice(value, None)));
                    }
                    _ if member.get("type").and_then(Value::as_str) == Some("object") => {}
                    _ => return None,
                }
            }
            return (!choices.is_empty()).then_some(choices);
        }
    }
    None
}

fn choice(value: &Value, description: Option<String>) -> Choice {
    Choice {
        label: value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned),
        value: value.clone(),
        description,
    }
}

fn properties_of(
    root: &Value,
    object: &Map<String, Value>,
    properties: &Map<String, Value>,
    depth: usize,
) -> Vec<Property> {
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let (mut first, rest): (Vec<Property>, Vec<Property>) = properties
        .iter()
        .map(|(name, schema)| Property {
            name: name.clone(),
            required: required.contains(&name.as_str()),
            field: read_field(root, schema, depth + 1),
        })
        .partition(|property| property.required);
    first.extend(rest);
    first
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels(field: &Field) -> Vec<&str> {
        field
            .choices()
            .iter()
            .map(|choice| choice.label.as_str())
            .collect()
    }

    #[test]
    fn each_schema_shape_gives_its_kind() {
        let select = Field::from_schema(&json!({"type": "string", "enum": ["main", "docs"]}));
        assert!(matches!(select.kind, FieldKind::Select { .. }));
        assert_eq!(labels(&select), ["main", "docs"]);
        let multi = Field::from_schema(&json!({
            "type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "uniqueItems": true
        }));
        assert!(matches!(multi.kind, FieldKind::MultiSelect { .. }));
        assert_eq!(labels(&multi), ["a", "b"]);
        assert_eq!(
            Field::from_schema(&json!({"type": "boolean"})).kind,
            FieldKind::Confirm
        );
        assert_eq!(
            Field::from_schema(
                &json!({"type": "string", "minLength": 1, "pattern": NON_BLANK_PATTERN})
            )
            .kind,
            FieldKind::Text {
                min_length: Some(1),
                max_length: None,
                pattern: None,
                non_blank: true
            }
        );
        assert_eq!(
            Field::from_schema(&json!({"type": ["integer", "null"], "minimum": 0})).kind,
            FieldKind::Number {
                integer: true,
                minimum: Some(0.0),
                maximum: None
            }
        );
        assert_eq!(
            Field::from_schema(&json!({"type": "array", "items": {"type": "string"}})).kind,
            FieldKind::Json
        );
        assert_eq!(Field::from_schema(&json!(true)).kind, FieldKind::Json);
        assert_eq!(
            Field::from_schema(&json!({"anyOf": [{"type": "string"}, {"type": "array"}]})).kind,
            FieldKind::Json
        );
    }

    #[test]
    fn objects_ask_required_fields_first_and_follow_refs() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a_note": {"type": "string"},
                "plan": {"$ref": "#/$defs/Plan"},
                "seats": {"type": "integer", "minimum": 1, "maximum": 9}
            },
            "required": ["seats", "plan"],
            "$defs": {"Plan": {"oneOf": [
                {"const": "basic", "description": "The cheap one"},
                {"const": "pro", "description": "Everything"}
            ]}}
        });
        let field = Field::from_schema(&schema);
        let FieldKind::Object { properties } = &field.kind else {
            panic!("{field:?}")
        };
        let names: Vec<(&str, bool)> = properties
            .iter()
            .map(|p| (p.name.as_str(), p.required))
            .collect();
        assert_eq!(names, [("plan", true), ("seats", true), ("a_note", false)]);
        let plan = &properties[0].field;
        assert_eq!(labels(plan), ["basic", "pro"]);
        assert_eq!(plan.choices()[1].description.as_deref(), Some("Everything"));
        assert_eq!(properties[1].field.hint(), "an integer from 1 to 9");
        // A property's own schema still resolves the root's definitions.
        assert!(plan.problems(&json!("pro")).is_empty());
        assert_eq!(plan.problems(&json!("gold")).len(), 1);
    }

    #[test]
    fn problems_are_the_schema_limits_in_words() {
        let text = Field::from_schema(&json!({"type": "string", "minLength": 3, "maxLength": 5}));
        assert_eq!(text.hint(), "text of 3 to 5 characters");
        assert!(text.problems(&json!("abcd")).is_empty());
        let short = text.problems(&json!("ab"));
        assert_eq!(short.len(), 1);
        assert!(short[0].contains("shorter than 3"), "{short:?}");
        let blank = Field::from_schema(&json!({"type": "string", "pattern": NON_BLANK_PATTERN}));
        assert_eq!(blank.problems(&json!("\u{200b} ")), ["the answer is empty"]);
    }

    #[test]
    fn labels_beside_the_persons_own_words_are_a_select() {
        let question: crate::AskUserQuestion = serde_json::from_value(json!({
            "question": "Where?", "options": [{"label": "Lisbon"}, {"label": "Porto"}],
            "selectionMode": "single_select", "allowOther": true
        }))
        .unwrap();
        let field = Field::from_schema(&question.resume_schema());
        let FieldKind::Select { choices } = &field.kind else {
            panic!("{:?}", field.kind);
        };
        let labels: Vec<&str> = choices.iter().map(|choice| choice.label.as_str()).collect();
        assert_eq!(labels, ["Lisbon", "Porto"]);
        assert_eq!(field.answer_from_inputs(&["2"]), Ok(json!("Porto")));
        assert_eq!(field.answer_from_inputs(&["lisbon"]), Ok(json!("Lisbon")));
        assert!(field.problems(&json!({"other": "Faro"})).is_empty());
    }
}
