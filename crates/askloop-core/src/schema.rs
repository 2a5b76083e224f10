//! JSON Schema checks on the JSON that crosses the loop: tool arguments and resume answers.
//!
//! A thin wrapper over the `jsonschema` crate that reports every problem, each with the path of
//! the field it concerns, in words a model (or a person) can act on.

use schemars::JsonSchema;
use serde_json::Value;

/// The JSON Schema schemars derives for `T`.
pub fn schema_of<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

/// A compiled JSON Schema.
pub struct SchemaValidator {
    validator: jsonschema::Validator,
}

/// A schema that could not be compiled.
#[derive(Debug, thiserror::Error)]
#[error("invalid JSON Schema: {message}")]
pub struct SchemaError {
    message: String,
}

impl SchemaValidator {
    /// Compiles `schema` (any draft the `jsonschema` crate knows; 2020-12 by default).
    ///
    /// # Errors
    /// [`SchemaError`] if `schema` is not a valid JSON Schema.
    pub fn new(schema: &Value) -> Result<Self, SchemaError> {
        jsonschema::validator_for(schema)
            .map(|validator| Self { validator })
            .map_err(|error| SchemaError {
                message: error.to_string(),
            })
    }

    /// Every problem of `instance`, each as `` `/path`: message `` (`(root)` for the whole value).
    /// Empty when it is valid.
    pub fn problems(&self, instance: &Value) -> Vec<String> {
        self.validator
            .iter_errors(instance)
            .map(|error| {
                let path = error.instance_path().to_string();
                let path = if path.is_empty() {
                    "(root)".to_owned()
                } else {
                    path
                };
                format!("`{path}`: {error}")
            })
            .collect()
    }
}

/// Describes why `raw` is not JSON (the parser's message, with line and column).
pub(crate) fn json_syntax_error(raw: &str) -> String {
    match serde_json::from_str::<Value>(raw) {
        Ok(_) => "arguments parsed on a second attempt".to_owned(),
        Err(error) => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_every_bad_field_with_its_path() {
        let validator = SchemaValidator::new(&json!({
            "type": "object",
            "properties": {"question": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["question"]
        }))
        .unwrap();
        let problems = validator.problems(&json!({"count": "x"}));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems.iter().any(|p| p.contains("/count")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("question")),
            "{problems:?}"
        );
        assert!(validator.problems(&json!({"question": "q"})).is_empty());
    }
}
