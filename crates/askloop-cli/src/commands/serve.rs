//! `askloop serve`: every agent of askloop.toml and the built-in one over HTTP
//! (askloop-server), with the same store, model and config handling as `askloop run`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use askloop_core::{AgentId, CancelHandle, ResourceId, is_blank};
use askloop_server::{AllowedHost, ApiKey, CorsOrigin, KeyError, Server};

use crate::cli::{GlobalArgs, ServeArgs};
use crate::config::LoadedConfig;
use crate::context::{Access, Context};
use crate::env::env_value;
use crate::exit::{invalid, invalid_because};
use crate::interrupt::Interrupt;
use crate::registry::FlagScope;

/// The environment variable holding API keys: comma-separated `SECRET=RESOURCE` pairs.
pub(crate) const API_KEYS_ENV: &str = "ASKLOOP_API_KEYS";

/// How often the background sweep (expired questions, runs of dead instances) runs, unless
/// the lease is shorter.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Runs `askloop serve`: opens the store, reads the keys, listens, prints the one start line
/// (`askloop serve: listening on http://ADDR (N agents: ID, …; store URL)`) and serves until
/// SIGTERM or Ctrl-C, then shuts down gracefully and closes the store.
///
/// # Errors
/// Invalid input for bad keys, a bad config, or a non-loopback address without keys; the
/// address cannot be bound; the store's and the server's errors.
pub(crate) async fn serve(global: &GlobalArgs, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open_with_model(
        global,
        Access::Create,
        args.model.model.clone(),
        FlagScope::NewRuns,
    )
    .await?;
    context
        .run(async |context| serve_with(context, args).await)
        .await
}

/// Serves the agents of `context` on `args.addr` until a signal.
async fn serve_with(context: &Context, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let addr = args.addr;
    let registry = context.registry();
    registry.check()?;
    let ids = registry.ids();
    let keys = api_keys(context.config(), &ids)?;
    let public_url = args.public_url.clone();
    let (allowed_hosts, cors_origins) = edge_lists(context.config(), args)?;
    if keys.is_empty() && !addr.ip().is_loopback() {
        return Err(invalid(format!(
            "refusing to serve on {addr} without API keys: anyone who can reach it could read \
             and answer every run; add [[server.keys]] to askloop.toml (`askloop keys new \
             --resource ID` prints one) or set {API_KEYS_ENV}, or listen on a loopback \
             address (e.g. --addr 127.0.0.1:4111)"
        )));
    }
    // Configuration is refused before the server listens (and says it does).
    let webhooks = context.config().config.webhooks()?;
    let links = context.config().config.server.link_settings(public_url)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener
        .local_addr()
        .with_context(|| format!("cannot listen on {addr}"))?;
    if keys.is_empty() {
        tracing::warn!(
            "no API keys are configured: every request is allowed, so the server listens on \
             loopback only ({local})"
        );
    }
    let noun = if ids.len() == 1 { "agent" } else { "agents" };
    let mut stdout = std::io::stdout();
    writeln!(
        stdout,
        "askloop serve: listening on http://{local} ({} {noun}: {}; store {})",
        ids.len(),
        ids.join(", "),
        context.store_url
    )?;
    stdout.flush()?;
    let sweep = registry
        .lease()
        .map_or(SWEEP_INTERVAL, |lease| lease.min(SWEEP_INTERVAL));
    let server = Server::builder(registry.clone(), context.store.clone())
        .keys(keys)
        .allowed_hosts(allowed_hosts)
        .cors_origins(cors_origins)
        .sweep_interval(sweep)
        .webhooks(webhooks)
        .webhook_policy(crate::env::webhook_policy()?)
        .answer_links(links)
        .try_build()?;
    // The first SIGTERM or Ctrl-C stops the server gracefully; a second one ends the process
    // at once (see `Interrupt`).
    let stop = CancelHandle::new();
    let _watching = Interrupt::get().watch_as(stop.clone(), "the server (shutting down)");
    let shutdown = async move { stop.cancelled().await };
    server.serve(listener, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// The file askloop.toml's settings came from, as messages name it.
fn config_file(config: &LoadedConfig) -> String {
    config.path.as_ref().map_or_else(
        || crate::config::DEFAULT_CONFIG_FILE.to_owned(),
        |path| path.display().to_string(),
    )
}

/// The hosts the server answers to and the origins that may call it: askloop.toml's
/// `[server] allowed_hosts` and `cors_origins`, then the flags'.
///
/// # Errors
/// Invalid input naming the key and the value that is not a host or an origin.
fn edge_lists(
    config: &LoadedConfig,
    args: ServeArgs,
) -> anyhow::Result<(Vec<AllowedHost>, Vec<CorsOrigin>)> {
    let file = config_file(config);
    let server = &config.config.server;
    let mut hosts = server
        .allowed_hosts
        .iter()
        .map(|host| {
            host.parse::<AllowedHost>().map_err(|error| {
                invalid_because(format!("[server] allowed_hosts in {file}"), error)
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    hosts.extend(args.allowed_hosts);
    let mut origins = server
        .cors_origins
        .iter()
        .map(|origin| {
            origin
                .parse::<CorsOrigin>()
                .map_err(|error| invalid_because(format!("[server] cors_origins in {file}"), error))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    origins.extend(args.cors_origins);
    Ok((hosts, origins))
}

/// The keys of askloop.toml's `[[server.keys]]`, then of [`API_KEYS_ENV`].
///
/// # Errors
/// Invalid input for a bad hash, a blank resource, an unknown agent, a malformed
/// [`API_KEYS_ENV`] (its secrets are never echoed), or one secret in two entries (naming both).
fn api_keys(config: &LoadedConfig, agent_ids: &[String]) -> anyhow::Result<Vec<ApiKey>> {
    let file = config_file(config);
    let mut keys = Vec::new();
    // What each key is called in messages, in the order of `keys`.
    let mut names = Vec::new();
    for (index, entry) in config.config.server.keys.iter().enumerate() {
        let which = format!("[[server.keys]] number {} in {file}", index + 1);
        if is_blank(&entry.resource) {
            return Err(invalid(format!("{which}: `resource` must not be blank")));
        }
        let key = ApiKey::from_hash(&entry.hash, ResourceId::from(entry.resource.as_str()))
            .map_err(|error| invalid_because(which.clone(), error))?;
        let key = match &entry.agents {
            Some(agents) => {
                let unknown: Vec<&str> = agents
                    .iter()
                    .map(String::as_str)
                    .filter(|agent| !agent_ids.iter().any(|id| id == agent))
                    .collect();
                if !unknown.is_empty() {
                    return Err(invalid(format!(
                        "{which}: unknown agents {}; known agents: {}",
                        unknown.join(", "),
                        agent_ids.join(", ")
                    )));
                }
                key.agents(agents.iter().map(|id| AgentId::from(id.as_str())).collect())
            }
            None => key,
        };
        let key = match &entry.label {
            Some(label) if is_blank(label) => {
                return Err(invalid(format!("{which}: `label` must not be blank")));
            }
            Some(label) => {
                ApiKey::check_label(label).map_err(|error| invalid(format!("{which}: {error}")))?;
                key.label(label.trim())
            }
            None => key,
        };
        let key = key.roles(entry.roles.iter().cloned());
        keys.push(key);
        names.push(which);
    }
    if let Some(text) = env_value(API_KEYS_ENV) {
        let from_env = env_keys(&text)?;
        names.extend((1..=from_env.len()).map(|number| format!("{API_KEYS_ENV} entry {number}")));
        keys.extend(from_env);
    }
    if let Err(KeyError::DuplicateSecret {
        first,
        second,
        first_resource,
        second_resource,
    }) = ApiKey::check_distinct(&keys)
    {
        return Err(invalid(format!(
            "{} (resource {}) and {} (resource {}) are the same secret; one secret must \
             belong to one key, or a request with it would act for a tenant it does not \
             choose: give each key its own secret (`askloop keys new`)",
            names[first],
            first_resource.as_str(),
            names[second],
            second_resource.as_str()
        )));
    }
    Ok(keys)
}

/// The keys of an [`API_KEYS_ENV`] value: comma-separated `SECRET=RESOURCE` pairs (the last
/// `=` splits a pair), blanks around each part ignored.
///
/// # Errors
/// Invalid input naming the malformed entry by number (never its secret).
fn env_keys(text: &str) -> anyhow::Result<Vec<ApiKey>> {
    text.split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .enumerate()
        .map(|(index, pair)| {
            let (secret, resource) = pair
                .rsplit_once('=')
                .filter(|(secret, resource)| !is_blank(secret) && !is_blank(resource))
                .ok_or_else(|| {
                    invalid(format!(
                        "invalid {API_KEYS_ENV}: entry {} is not SECRET=RESOURCE \
                         (comma-separated pairs, e.g. SECRET1=tenant-a,SECRET2=tenant-b)",
                        index + 1
                    ))
                })?;
            Ok(ApiKey::from_secret(
                secret.trim(),
                ResourceId::from(resource.trim()),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn loaded(text: &str) -> LoadedConfig {
        LoadedConfig {
            config: parse(text).unwrap(),
            ..LoadedConfig::default()
        }
    }

    fn ids() -> Vec<String> {
        vec!["assistant".to_owned(), "planner".to_owned()]
    }

    #[test]
    fn keys_of_the_file_are_checked() {
        let hash = ApiKey::hash_hex("s3cret");
        let config = loaded(&format!(
            "[[server.keys]]\nhash = \"{hash}\"\nresource = \"tenant-a\"\nagents = [\"planner\"]\n"
        ));
        let keys = api_keys(&config, &ids()).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].resource().as_str(), "tenant-a");
        assert_eq!(
            keys[0],
            ApiKey::from_secret("s3cret", "tenant-a".into()).agents(vec!["planner".into()])
        );

        let bad_hash = loaded("[[server.keys]]\nhash = \"abc\"\nresource = \"t\"\n");
        let error = api_keys(&bad_hash, &ids()).unwrap_err().to_string();
        assert!(error.contains("[[server.keys]] number 1"), "{error}");
        let unknown = loaded(&format!(
            "[[server.keys]]\nhash = \"{hash}\"\nresource = \"t\"\nagents = [\"nobody\"]\n"
        ));
        let error = api_keys(&unknown, &ids()).unwrap_err().to_string();
        assert!(error.contains("unknown agents nobody"), "{error}");
        let blank = loaded(&format!(
            "[[server.keys]]\nhash = \"{hash}\"\nresource = \" \"\n"
        ));
        assert!(api_keys(&blank, &ids()).is_err());
    }

    #[test]
    fn issue31_one_secret_in_two_entries_is_an_error_naming_both() {
        let hash = ApiKey::hash_hex("s3cret");
        let other = ApiKey::hash_hex("other");
        for (second_resource, label) in [("tenant-b", "two tenants"), ("tenant-a", "one tenant")] {
            let config = loaded(&format!(
                "[[server.keys]]\nhash = \"{hash}\"\nresource = \"tenant-a\"\n\
                 [[server.keys]]\nhash = \"{other}\"\nresource = \"tenant-c\"\n\
                 [[server.keys]]\nhash = \"{}\"\nresource = \"{second_resource}\"\n",
                hash.to_uppercase()
            ));
            let error = api_keys(&config, &ids()).unwrap_err().to_string();
            assert!(
                error.contains("[[server.keys]] number 1 in askloop.toml (resource tenant-a)"),
                "{label}: {error}"
            );
            assert!(
                error.contains(&format!(
                    "[[server.keys]] number 3 in askloop.toml (resource {second_resource})"
                )),
                "{label}: {error}"
            );
            assert!(error.contains("same secret"), "{label}: {error}");
            assert!(!error.contains("s3cret"), "{label}: {error}");
        }
    }

    #[test]
    fn allowed_hosts_and_cors_origins_come_from_the_file_and_the_flags() {
        use clap::Parser;
        let config = loaded(
            "[server]\nallowed_hosts = [\"askloop.example\"]\ncors_origins = [\"https://app.example\"]\n",
        );
        let cli = crate::cli::Cli::try_parse_from([
            "askloop",
            "serve",
            "--allowed-host",
            "10.0.0.5:4111",
            "--cors-origin",
            "http://localhost:3000",
        ])
        .unwrap();
        let crate::cli::Command::Serve(args) = cli.command else {
            unreachable!("parsed as serve")
        };
        let (hosts, origins) = edge_lists(&config, args).unwrap();
        let hosts: Vec<String> = hosts.iter().map(ToString::to_string).collect();
        let origins: Vec<String> = origins.iter().map(ToString::to_string).collect();
        assert_eq!(hosts, ["askloop.example", "10.0.0.5:4111"]);
        assert_eq!(origins, ["https://app.example", "http://localhost:3000"]);
        let bad = loaded("[server]\ncors_origins = [\"app.example\"]\n");
        let cli = crate::cli::Cli::try_parse_from(["askloop", "serve"]).unwrap();
        let crate::cli::Command::Serve(args) = cli.command else {
            unreachable!("parsed as serve")
        };
        let error = edge_lists(&bad, args).unwrap_err().to_string();
        assert!(
            error.contains("[server] cors_origins in askloop.toml"),
            "{error}"
        );
        for flag in [["--allowed-host", "http://x"], ["--cors-origin", "*"]] {
            let error = crate::cli::Cli::try_parse_from(["askloop", "serve", flag[0], flag[1]])
                .err()
                .unwrap()
                .to_string();
            assert!(error.contains("invalid"), "{error}");
        }
    }

    #[test]
    fn keys_of_the_environment_are_secret_resource_pairs() {
        let keys = env_keys(" a=b=tenant-a , s3cret=tenant-b,").unwrap();
        assert_eq!(
            keys,
            vec![
                ApiKey::from_secret("a=b", "tenant-a".into()),
                ApiKey::from_secret("s3cret", "tenant-b".into()),
            ]
        );
        for bad in ["s3cret", "=tenant", "s3cret= ", "ok=t,bad"] {
            let error = env_keys(bad).unwrap_err().to_string();
            assert!(!error.contains("s3cret"), "{error}");
            assert!(error.contains("SECRET=RESOURCE"), "{error}");
        }
    }
}
