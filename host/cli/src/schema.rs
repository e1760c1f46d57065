//! Payload JSON Schema checks at enqueue, backed by the `jsonschema` crate.
//!
//! Invariant: a failure names the JSON pointer and the schema keyword that
//! failed, never the payload value (payloads may hold secrets).

use boxcar_queue::{PayloadValidator, SchemaFailure};

/// A compiled payload schema.
pub struct JsonSchemaValidator {
    validator: jsonschema::Validator,
}

impl JsonSchemaValidator {
    /// Compiles `schema`.
    ///
    /// # Errors
    /// The schema itself is invalid (message names the problem).
    pub fn new(schema: &serde_json::Value) -> Result<Self, String> {
        jsonschema::validator_for(schema)
            .map(|validator| Self { validator })
            .map_err(|error| format!("payload_schema is not a valid JSON Schema: {error}"))
    }
}

impl PayloadValidator for JsonSchemaValidator {
    fn validate(&self, payload: &serde_json::Value) -> Result<(), SchemaFailure> {
        match self.validator.iter_errors(payload).next() {
            None => Ok(()),
            Some(error) => {
                let pointer = error.instance_path().to_string();
                Err(SchemaFailure {
                    pointer: if pointer.is_empty() {
                        "/".into()
                    } else {
                        pointer
                    },
                    reason: format!("fails the `{}` rule of the payload schema", keyword(&error)),
                })
            }
        }
    }
}

fn keyword(error: &jsonschema::ValidationError<'_>) -> String {
    let path = error.schema_path().to_string();
    path.rsplit('/')
        .next()
        .filter(|k| !k.is_empty())
        .unwrap_or("schema")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn failure_names_the_pointer_and_rule_but_not_the_value() {
        let validator = JsonSchemaValidator::new(&json!({
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"]
        }))
        .expect("valid schema");
        assert!(validator.validate(&json!({"url": "https://x"})).is_ok());
        let failure = validator
            .validate(&json!({"url": 12345678}))
            .expect_err("wrong type");
        assert_eq!(failure.pointer, "/url");
        assert!(failure.reason.contains("type"), "{}", failure.reason);
        assert!(!failure.reason.contains("12345678"));
        let missing = validator.validate(&json!({})).expect_err("missing");
        assert!(missing.reason.contains("required"), "{}", missing.reason);
    }
}
