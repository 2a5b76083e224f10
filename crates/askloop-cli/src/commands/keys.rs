//! `askloop keys new`: a new API key for `askloop serve`.

use std::io::Write;
use std::process::ExitCode;

use askloop_server::ApiKey;

use crate::cli::KeysNewArgs;
use crate::exit::invalid;

/// Runs `askloop keys new`: prints a new random secret on the first line of stdout, then the
/// `[[server.keys]]` lines of askloop.toml that accept it (its SHA-256, never the secret).
/// The secret is stored nowhere.
///
/// # Errors
/// Invalid input for a reserved label ([`ApiKey::check_label`]); writing stdout fails.
pub(crate) fn new(args: &KeysNewArgs) -> anyhow::Result<ExitCode> {
    if let Some(label) = &args.label {
        ApiKey::check_label(label).map_err(|error| invalid(error.to_string()))?;
    }
    let secret = ApiKey::new_secret();
    let mut stdout = std::io::stdout();
    stdout.write_all(key_text(&secret, args).as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The secret's line and the TOML lines of its hash.
fn key_text(secret: &str, args: &KeysNewArgs) -> String {
    let mut text = format!(
        "{secret}\n\n# The line above is the secret, shown only now: send it as `Authorization: \
         Bearer SECRET`.\n# Add these lines to askloop.toml (they hold its SHA-256, not the \
         secret):\n[[server.keys]]\nhash = \"{}\"\nresource = {}\n",
        ApiKey::hash_hex(secret),
        toml_string(&args.resource)
    );
    if !args.agents.is_empty() {
        let agents: Vec<String> = args.agents.iter().map(|id| toml_string(id)).collect();
        text.push_str(&format!("agents = [{}]\n", agents.join(", ")));
    }
    if let Some(label) = &args.label {
        text.push_str(&format!("label = {}\n", toml_string(label)));
    }
    if !args.roles.is_empty() {
        let roles: Vec<String> = args.roles.iter().map(|role| toml_string(role)).collect();
        text.push_str(&format!("roles = [{}]\n", roles.join(", ")));
    }
    text
}

/// `text` as a TOML string (quoted, escaped).
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_parse_as_a_key_of_askloop_toml() {
        let args = KeysNewArgs {
            resource: "tenant \"a\"".to_owned(),
            agents: vec!["planner".to_owned(), "assistant".to_owned()],
            label: Some("alice".to_owned()),
            roles: vec!["ops".to_owned(), "release".to_owned()],
        };
        let text = key_text("ak_secret", &args);
        assert_eq!(text.lines().next(), Some("ak_secret"));
        let toml_lines: String = text
            .lines()
            .skip(1)
            .map(|line| format!("{line}\n"))
            .collect();
        assert!(!toml_lines.contains("ak_secret"), "{toml_lines}");
        let config = crate::config::parse(&toml_lines).unwrap();
        let key = &config.server.keys[0];
        assert_eq!(key.hash, ApiKey::hash_hex("ak_secret"));
        assert_eq!(key.resource, "tenant \"a\"");
        assert_eq!(
            key.agents.as_deref(),
            Some(&["planner".to_owned(), "assistant".to_owned()][..])
        );
        assert_eq!(key.label.as_deref(), Some("alice"));
        assert_eq!(key.roles, ["ops", "release"]);
    }
}
