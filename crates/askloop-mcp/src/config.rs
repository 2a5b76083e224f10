//! The description of one MCP server, as an `[agents.ID.mcp.NAME]` table of `askloop.toml`:
//!
//! ```toml
//! [agents.files.mcp.fs]
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]
//! require_approval = ["write_file"]   # or true / false
//! env = { LOG_LEVEL = "warn" }         # optional, only with `command`
//!
//! [agents.files.mcp.search]
//! url = "http://127.0.0.1:3001/mcp"    # streamable HTTP
//! require_approval = false
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

/// How askloop reaches one MCP server, and which of its tools need a person's approval.
///
/// Deserialized from a table with exactly one of `command` (a stdio server askloop starts as a
/// child process) or `url` (a streamable HTTP server already running), an optional
/// `require_approval` (see [`RequireApproval`]) and an optional `env` (only with `command`).
/// Unknown keys are errors; every problem names its key.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawServerConfig")]
pub struct McpServerConfig {
    /// Where the server is.
    pub transport: McpTransport,
    /// Which of the server's tools need a person's approval before they run (the agent loop
    /// suspends each such call with a `tool-call-approval` chunk).
    pub require_approval: RequireApproval,
}

/// Where an MCP server is and how to talk to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A stdio server: askloop starts `program args…` and speaks JSON-RPC over its stdin and
    /// stdout. Its stderr goes to `tracing` (target `askloop_mcp::server`, level debug) and the
    /// last lines are quoted when it fails to start.
    Stdio {
        /// The program: a name looked up on `PATH`, or a path.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the inherited environment.
        env: BTreeMap<String, String>,
        /// The folder it runs in; `None` for the current one. The CLI sets askloop.toml's folder,
        /// so relative paths in `command` mean the same from every folder.
        working_dir: Option<PathBuf>,
    },
    /// A streamable HTTP server at this `http://` or `https://` URL (e.g. `http://host/mcp`).
    Http {
        /// The endpoint.
        url: String,
    },
}

/// Which tools of a server need a person's approval before they run: `true` (all, the
/// default), `false` (none) or a list of tool names.
///
/// The default is `All` because an MCP tool is side-effecting unless its server says otherwise,
/// and a server's annotations are hints from code askloop does not control.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RequireApproval {
    /// Every tool of the server (`require_approval = true`).
    #[default]
    All,
    /// No tool (`require_approval = false`).
    None,
    /// Only these tools (`require_approval = ["write_file", …]`).
    Only(Vec<String>),
}

impl RequireApproval {
    /// Whether the tool `name` needs approval.
    pub fn applies_to(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::None => false,
            Self::Only(names) => names.iter().any(|listed| listed == name),
        }
    }

    /// The names listed that are not among `tools` (a typo there would let a tool run without
    /// approval, so connecting refuses them: [`crate::McpError::UnknownApprovalTools`]).
    pub fn unknown_names<'a>(&'a self, tools: &[&str]) -> Vec<&'a str> {
        match self {
            Self::Only(names) => names
                .iter()
                .map(String::as_str)
                .filter(|name| !tools.contains(name))
                .collect(),
            Self::All | Self::None => Vec::new(),
        }
    }
}

impl<'de> Deserialize<'de> for RequireApproval {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Flag(bool),
            Names(Vec<String>),
        }
        match Raw::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom(
                "`require_approval`: expected true, false or a list of tool names",
            )
        })? {
            Raw::Flag(true) => Ok(Self::All),
            Raw::Flag(false) => Ok(Self::None),
            Raw::Names(names) => {
                if let Some(blank) = names.iter().find(|name| name.trim().is_empty()) {
                    return Err(serde::de::Error::custom(format!(
                        "`require_approval`: tool names must be non-empty, got {blank:?}"
                    )));
                }
                Ok(Self::Only(names))
            }
        }
    }
}

/// The table as written, before its checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServerConfig {
    command: Option<Vec<String>>,
    url: Option<String>,
    #[serde(default)]
    require_approval: RequireApproval,
    env: Option<BTreeMap<String, String>>,
}

/// Why an MCP server table is invalid. Each message names the key at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpConfigError {
    /// Neither `command` nor `url`.
    #[error(
        "an MCP server needs `command` (a stdio server, e.g. [\"npx\", \"-y\", \"PACKAGE\"]) or `url` (streamable HTTP)"
    )]
    NoTransport,
    /// Both `command` and `url`.
    #[error("`command` and `url` exclude each other: give one")]
    BothTransports,
    /// `command = []` or a blank program.
    #[error("`command` must start with a program name")]
    EmptyCommand,
    /// `url` is not an `http(s)://` URL.
    #[error("`url` must start with http:// or https://, got {0:?}")]
    BadUrl(String),
    /// `env` with `url`.
    #[error("`env` applies only to a `command` server")]
    EnvWithUrl,
    /// An `env` name that is empty or holds `=` or NUL.
    #[error("`env`: invalid variable name {0:?}")]
    BadEnvName(String),
}

impl TryFrom<RawServerConfig> for McpServerConfig {
    type Error = McpConfigError;

    fn try_from(raw: RawServerConfig) -> Result<Self, Self::Error> {
        let transport = match (raw.command, raw.url) {
            (None, None) => return Err(McpConfigError::NoTransport),
            (Some(_), Some(_)) => return Err(McpConfigError::BothTransports),
            (Some(command), None) => {
                let mut words = command.into_iter();
                let program = words
                    .next()
                    .filter(|program| !program.trim().is_empty())
                    .ok_or(McpConfigError::EmptyCommand)?;
                let env = raw.env.unwrap_or_default();
                if let Some(name) = env
                    .keys()
                    .find(|name| name.is_empty() || name.contains(['=', '\0']))
                {
                    return Err(McpConfigError::BadEnvName(name.clone()));
                }
                McpTransport::Stdio {
                    program,
                    args: words.collect(),
                    env,
                    working_dir: None,
                }
            }
            (None, Some(url)) => {
                if raw.env.is_some() {
                    return Err(McpConfigError::EnvWithUrl);
                }
                let lower = url.to_ascii_lowercase();
                if !(lower.starts_with("http://") || lower.starts_with("https://"))
                    || url.len() <= "https://".len()
                {
                    return Err(McpConfigError::BadUrl(url));
                }
                McpTransport::Http { url }
            }
        };
        Ok(Self {
            transport,
            require_approval: raw.require_approval,
        })
    }
}

impl McpServerConfig {
    /// A stdio server started as `program args…`, every tool needing approval.
    pub fn command(program: impl Into<String>, args: impl IntoIterator<Item = String>) -> Self {
        Self {
            transport: McpTransport::Stdio {
                program: program.into(),
                args: args.into_iter().collect(),
                env: BTreeMap::new(),
                working_dir: None,
            },
            require_approval: RequireApproval::default(),
        }
    }

    /// A streamable HTTP server at `url`, every tool needing approval.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            transport: McpTransport::Http { url: url.into() },
            require_approval: RequireApproval::default(),
        }
    }

    /// The same server with `require_approval` replaced.
    #[must_use]
    pub fn with_require_approval(mut self, require_approval: RequireApproval) -> Self {
        self.require_approval = require_approval;
        self
    }

    /// The same server with a stdio server's working folder set (no effect on `url`).
    #[must_use]
    pub fn with_working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let McpTransport::Stdio { working_dir, .. } = &mut self.transport {
            *working_dir = Some(dir.into());
        }
        self
    }

    /// The same server with one more environment variable (no effect on `url`).
    #[must_use]
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(name.into(), value.into());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn parse(text: &str) -> Result<McpServerConfig, String> {
        toml::from_str::<McpServerConfig>(text).map_err(|error| error.to_string())
    }

    #[test]
    fn the_documented_shapes_parse() {
        let fs = parse(
            r#"
            command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]
            require_approval = ["write_file"]
            env = { KEY = "value" }
            "#,
        )
        .unwrap();
        assert_eq!(
            fs.transport,
            McpTransport::Stdio {
                program: "npx".into(),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-filesystem".into(),
                    "/srv/notes".into()
                ],
                env: BTreeMap::from([("KEY".into(), "value".into())]),
                working_dir: None,
            }
        );
        assert_eq!(
            fs.require_approval,
            RequireApproval::Only(vec!["write_file".into()])
        );
        assert!(fs.require_approval.applies_to("write_file"));
        assert!(!fs.require_approval.applies_to("read_file"));

        let http =
            parse("url = \"http://127.0.0.1:3001/mcp\"\nrequire_approval = false\n").unwrap();
        assert_eq!(
            http.transport,
            McpTransport::Http {
                url: "http://127.0.0.1:3001/mcp".into()
            }
        );
        assert_eq!(http.require_approval, RequireApproval::None);
        let all = parse("url = \"https://x/mcp\"\nrequire_approval = true\n").unwrap();
        assert_eq!(all.require_approval, RequireApproval::All);
        let default = parse("command = [\"server\"]\n").unwrap();
        assert_eq!(default.require_approval, RequireApproval::All);
    }

    #[test]
    fn every_mistake_names_its_key() {
        for (text, key) in [
            ("require_approval = true\n", "`command`"),
            (
                "command = [\"a\"]\nurl = \"http://x/mcp\"\n",
                "`command` and `url`",
            ),
            ("command = []\n", "`command`"),
            ("command = [\"  \"]\n", "`command`"),
            ("url = \"ftp://x\"\n", "`url`"),
            ("url = \"http://x/mcp\"\nenv = { A = \"b\" }\n", "`env`"),
            ("command = [\"a\"]\nenv = { \"A=B\" = \"b\" }\n", "`env`"),
            (
                "command = [\"a\"]\nrequire_approval = \"yes\"\n",
                "`require_approval`",
            ),
            (
                "command = [\"a\"]\nrequire_approval = [\"\"]\n",
                "`require_approval`",
            ),
            ("command = [\"a\"]\ncolour = \"red\"\n", "colour"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(key), "{text:?} gave {error:?}");
        }
    }

    #[test]
    fn unknown_approval_names_are_found() {
        let only = RequireApproval::Only(vec!["write_file".into(), "wirte_file".into()]);
        assert_eq!(
            only.unknown_names(&["read_file", "write_file"]),
            ["wirte_file"]
        );
        assert!(RequireApproval::All.unknown_names(&[]).is_empty());
    }
}
