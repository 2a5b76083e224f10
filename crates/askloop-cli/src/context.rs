//! What every command starts from: askloop.toml, the store, and agents built for new or
//! stored runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop_core::store::{MemoryStore, RunState, StoredRun};
use askloop_core::{
    Actor, Agent, IdKind, ResourceId, ResumeError, RunId, RunKey, RunStatus, RunStore, StoreError,
    ToolCallId,
};
use askloop_store::{OpenError, OpenOptions, StoreUrl, default_store_url, open_store};

use crate::cli::GlobalArgs;
use crate::command_line::{CommandLine, program};
use crate::config::LoadedConfig;
use crate::env::{CONFIG_ENV, STORE_ENV, env_value, lease_from_env};
use crate::exit::{check_key_id, invalid, invalid_because};
use crate::format::{format_time, shell_quote};
use crate::model::Spec;
use crate::registry::{ConfigRegistry, FlagScope};
use crate::test_hook::TestHooks;

/// What a command does with the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Only reads (`runs list`, `runs show`): opened read-only, nothing is created; a missing
    /// database reads as empty.
    Read,
    /// Changes existing runs (`resume`, `runs continue`): nothing is created for a database
    /// that does not exist (the run cannot be there).
    Update,
    /// Starts runs (`run`, `chat`): the database and its folder are created when missing.
    Create,
}

/// The loaded config and the opened store.
pub(crate) struct Context {
    /// Where runs are kept (SQLite paths absolute).
    pub(crate) store_url: StoreUrl,
    /// The store.
    pub(crate) store: Arc<dyn RunStore>,
    /// Whether `store_url` is the default one (so commands printed for later need no `--store`).
    store_is_default: bool,
    /// Whether the database did not exist (and was not created): `store` is then empty.
    store_missing: bool,
    /// The `--config` given, absolute.
    explicit_config: Option<PathBuf>,
    /// The `--model` given to this command, if any, with a relative path in it made absolute
    /// (kept as given when it does not parse): repeated in the commands it prints.
    pub(crate) model_flag: Option<String>,
    /// The agents, built on demand; their MCP servers are closed by [`Context::close`].
    registry: Arc<ConfigRegistry>,
    /// Who the terminal's person is: `--as`, else `$USER` (`$USERNAME`), else `operator`.
    operator: String,
}

impl Context {
    /// Reads askloop.toml and opens the store for `access`: `--store`, else `ASKLOOP_STORE`
    /// (read only when the flag is absent, so the flag overrides a bad value), else the file's
    /// `store`, else the default SQLite file in the data folder.
    ///
    /// # Errors
    /// Invalid input for a bad config or store URL; the store's open errors.
    pub(crate) async fn open(global: &GlobalArgs, access: Access) -> anyhow::Result<Self> {
        Self::open_with_model(global, access, None, FlagScope::AllRuns).await
    }

    /// As [`Context::open`], with the `--model` of this command, applying to the runs of
    /// `scope`.
    ///
    /// # Errors
    /// As [`Context::open`].
    pub(crate) async fn open_with_model(
        global: &GlobalArgs,
        access: Access,
        model_flag: Option<String>,
        scope: FlagScope,
    ) -> anyhow::Result<Self> {
        let current_dir = std::env::current_dir()?;
        let config_path = global
            .config
            .clone()
            .or_else(|| env_value(CONFIG_ENV).map(PathBuf::from));
        let config = LoadedConfig::load(config_path.as_deref())?;
        let default_url = default_store_url()
            .ok()
            .map(|url| absolute(url, &current_dir));
        let store_url = store_url(global, &config, &current_dir)?;
        let lease = lease_from_env()?;
        let hooks = TestHooks::from_env()?;
        let (store, store_missing) = open_run_store(&store_url, access).await?;
        let store = hooks.wrap_store(store);
        // Parsed once: the agents' model, and (made absolute) the flag the printed commands
        // repeat.
        let flag_spec = model_flag
            .as_deref()
            .map(|text| Spec::resolve(text, &current_dir));
        let model_flag = match (&flag_spec, model_flag) {
            (Some(Ok(spec)), _) => Some(spec.text().to_owned()),
            (_, raw) => raw,
        };
        let registry = ConfigRegistry::new(config, store.clone(), flag_spec, scope, lease, hooks)?;
        Ok(Self {
            store_is_default: default_url.as_ref() == Some(&store_url),
            store_missing,
            store_url,
            store,
            explicit_config: config_path.map(|path| current_dir.join(path)),
            model_flag,
            registry: Arc::new(registry),
            operator: operator_name(global.act_as.as_deref())?,
        })
    }

    /// Runs `command` on this context, then closes it ([`Context::close`]) whatever the
    /// outcome: the open, run, close of every command.
    ///
    /// # Errors
    /// The command's.
    pub(crate) async fn run<T>(
        self,
        command: impl AsyncFnOnce(&Self) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let result = command(&self).await;
        self.close().await;
        result
    }

    /// An agent for a new run: its definition, and the model from `--model`, then
    /// `ASKLOOP_MODEL`, then askloop.toml ([`ConfigRegistry::agent_for_new_run`]).
    ///
    /// # Errors
    /// Invalid input for an unknown agent, no model, or a bad SPEC; the model's build errors.
    pub(crate) async fn agent_for_new_run(&self, agent_id: &str) -> anyhow::Result<Agent> {
        self.registry.agent_for_new_run(agent_id).await
    }

    /// The agent that runs a stored run, with the model it was started with (unless
    /// `--model` overrides it; [`ConfigRegistry::agent_for_stored_run`]).
    ///
    /// # Errors
    /// Invalid input when the run's agent is not defined here; model errors as for
    /// [`Context::agent_for_new_run`].
    pub(crate) async fn agent_for_run(&self, state: &RunState) -> anyhow::Result<Agent> {
        self.registry.agent_for_stored_run(state).await
    }

    /// Who the terminal's person acts as through `route` (`cli approve`, `cli run`, …):
    /// `cli:NAME` (NAME from `--as`, else `$USER`), holding the roles of askloop.toml's
    /// `[cli] roles` (none unless given there). Recorded as the starter of the runs it starts
    /// and in the audit of its decisions; approver policies check it.
    pub(crate) fn actor(&self, route: &str) -> Actor {
        Actor::new(format!("cli:{}", self.operator))
            .roles(self.config().config.cli.roles.iter().cloned())
            .route(route)
    }

    /// askloop.toml, or an empty config.
    pub(crate) fn config(&self) -> &LoadedConfig {
        self.registry.config()
    }

    /// The agents of askloop.toml and the built-in one.
    pub(crate) fn registry(&self) -> &Arc<ConfigRegistry> {
        &self.registry
    }

    /// The run a command names: `run_id` of `resource` when `--resource` was given, else the
    /// one run with this id, whatever its resource (run ids are per resource: several resources
    /// may use one).
    ///
    /// # Errors
    /// Invalid input (exit status 2) naming the store for an unknown run, or naming the
    /// resources that use the id when there are several (`--resource` picks one); the store's
    /// errors.
    pub(crate) async fn resolve_run(
        &self,
        run_id: &str,
        resource: Option<&str>,
    ) -> anyhow::Result<RunKey> {
        check_key_id(IdKind::Run, run_id)?;
        let run = RunId::new(run_id);
        if let Some(resource) = resource {
            check_key_id(IdKind::Resource, resource)?;
            return Ok(RunKey::new(Some(ResourceId::new(resource)), run));
        }
        let mut keys = self.store.keys_of_run(&run).await?;
        match keys.len() {
            0 => Err(self.run_not_found(&RunKey::new(None, run))),
            1 => Ok(keys.remove(0)),
            _ => {
                let resources: Vec<String> = keys
                    .iter()
                    .map(|key| {
                        key.resource_id
                            .as_ref()
                            .map_or_else(|| "(no resource)".to_owned(), ToString::to_string)
                    })
                    .collect();
                Err(invalid(format!(
                    "run id {run_id} is used by runs of {} resources in {}: {}; say which with \
                     --resource ID",
                    keys.len(),
                    self.store_url,
                    resources.join(", ")
                )))
            }
        }
    }

    /// Loads a stored run.
    ///
    /// # Errors
    /// Invalid input (exit status 2) naming the store for an unknown run; the store's errors.
    pub(crate) async fn load_run(&self, run: &RunKey) -> anyhow::Result<RunState> {
        Ok(self.load_stored(run).await?.state)
    }

    /// Loads a stored run with its version and lease.
    ///
    /// # Errors
    /// As [`Context::load_run`].
    pub(crate) async fn load_stored(&self, run: &RunKey) -> anyhow::Result<StoredRun> {
        match self.store.load_run(run).await {
            Ok(stored) => Ok(stored),
            Err(StoreError::NotFound { .. }) => Err(self.run_not_found(run)),
            Err(error) => Err(error.into()),
        }
    }

    /// "run X not found in URL" (of resource R, when one was named), saying when there is no
    /// database there at all.
    pub(crate) fn run_not_found(&self, run: &RunKey) -> anyhow::Error {
        let missing = if self.store_missing {
            " (there is no database there yet)"
        } else {
            ""
        };
        invalid(format!(
            "run {run} not found in {}{missing}",
            self.store_url
        ))
    }

    /// A refused resume, continue or cancel of `run`, with "not found" naming the store. Runs
    /// still driven by a live process, runs whose process stopped, and runs whose thread has
    /// another turn running, say what happened and what to run.
    pub(crate) fn refused(&self, run: &RunKey, error: ResumeError) -> anyhow::Error {
        let continue_run = self.command("runs continue").run(run);
        let remedy = match &error {
            ResumeError::RunNotFound { .. } => return self.run_not_found(run),
            ResumeError::InProgress {
                lease_expires_at_ms,
                ..
            } => format!(
                "its lease runs until {} UTC and is renewed while that process lives: wait for \
                 it, or, if that process died, continue the run after then with \
                 `{continue_run}` (`{} runs recover` continues every such run)",
                format_time(*lease_expires_at_ms),
                self.command_prefix()
            ),
            ResumeError::Interrupted { .. } => format!(
                "run `{continue_run}` (`{}` shows the answer it kept)",
                self.command("runs show").run(run)
            ),
            ResumeError::ThreadBusy {
                running_run_id: Some(running),
                ..
            } => self.busy_remedy(&RunKey::new(run.resource_id.clone(), running.clone())),
            ResumeError::ChildRun { root_run_id, .. } => {
                let root = RunKey::new(run.resource_id.clone(), root_run_id.clone());
                format!(
                    "its questions and approvals wait at its root run: answer them there (`{}` \
                     lists them), and continue the root (`{}`)",
                    self.command("runs show").run(&root),
                    self.command("runs continue").run(&root)
                )
            }
            _ => return error.into(),
        };
        let line = format!("{error}; {remedy}");
        anyhow::Error::new(error).context(line)
    }

    /// The same answer again: nothing to do, and nothing changed (exit status 0). Says what the
    /// run is doing, and what to run when the process that took the answer stopped.
    pub(crate) async fn already_answered(
        &self,
        run: &RunKey,
        tool_call_id: &ToolCallId,
    ) -> anyhow::Result<()> {
        use std::io::Write;

        let run_id = &run.run_id;
        let continue_run = self.command("runs continue").run(run);
        let stored = self.load_stored(run).await?;
        let live = stored.lease.as_ref().is_some_and(|lease| lease.is_live());
        let status = match stored.state.status() {
            RunStatus::Running if live => match &stored.lease {
                Some(lease) => self.lease_note(run, lease.expires_at_ms),
                None => "another process is running it now".to_owned(),
            },
            RunStatus::Running => {
                format!("the process that took it stopped before finishing: run `{continue_run}`")
            }
            RunStatus::Failed => {
                format!("the step after it failed: retry it with `{continue_run}`")
            }
            status => format!(
                "the run is {status} (see `{}`)",
                self.command("runs show").run(run)
            ),
        };
        writeln!(
            std::io::stderr(),
            "note: tool call {tool_call_id} of run {run_id} was already answered with this answer; \
             nothing changed; {status}"
        )?;
        Ok(())
    }

    /// What a live lease of `run` ending at `expires_at_ms` (ms since the Unix epoch) means for
    /// a person: the process that took the run holds it until then (true whether that process
    /// lives or was killed), and `runs continue` works from then if it stopped.
    pub(crate) fn lease_note(&self, run: &RunKey, expires_at_ms: u64) -> String {
        format!(
            "the process that took it holds the run until {} UTC (renewed while it lives); if \
             that process stopped, `{}` works from then",
            format_time(expires_at_ms),
            self.command("runs continue").run(run)
        )
    }

    /// What to do about a thread whose turn `running` runs: wait, cancel it, or continue it
    /// when its process died.
    pub(crate) fn busy_remedy(&self, running: &RunKey) -> String {
        format!(
            "wait for run {} to end, or stop it with `{}` (if the process running it died, \
             `{}` finishes it instead)",
            running.run_id,
            self.command("runs cancel").run(running),
            self.command("runs continue").run(running)
        )
    }

    /// Closes the store, so a SQLite file is left without its `-wal` and `-shm` files (a
    /// database in a read-only folder is then readable), and the MCP servers of the agents
    /// built (stdio servers end and are reaped).
    pub(crate) async fn close(&self) {
        self.store.close().await;
        self.registry.close().await;
    }

    /// Whether the store's database did not exist when the command started.
    pub(crate) fn store_is_missing(&self) -> bool {
        self.store_missing
    }

    /// The start of a command that reaches the same store and agents from another process:
    /// this program as it can be typed (see [`program`]), plus `--store URL` and `--config
    /// PATH` when they are not the defaults.
    pub(crate) fn command_prefix(&self) -> String {
        let mut command = program();
        if !self.store_is_default {
            command.push_str(" --store ");
            command.push_str(&shell_quote(&self.store_url.to_string()));
        }
        if let Some(path) = &self.explicit_config {
            command.push_str(" --config ");
            command.push_str(&shell_quote(&path.display().to_string()));
        }
        command
    }

    /// A command for the user to paste: [`Context::command_prefix`] and `subcommand` (words
    /// given as they are, e.g. `runs continue`); add its arguments and flags with
    /// [`CommandLine`]'s methods.
    pub(crate) fn command(&self, subcommand: &str) -> CommandLine {
        CommandLine::new(format!("{} {subcommand}", self.command_prefix()))
    }

    /// Whether runs survive this process (false for the memory store).
    pub(crate) fn is_durable(&self) -> bool {
        !matches!(self.store_url, StoreUrl::Memory)
    }
}

/// The URL with a relative SQLite path made absolute against `base`.
fn absolute(url: StoreUrl, base: &Path) -> StoreUrl {
    match url {
        StoreUrl::Sqlite { path, synchronous } if path.is_relative() => StoreUrl::Sqlite {
            path: base.join(path),
            synchronous,
        },
        other => other,
    }
}

/// The store's URL: `--store`, else [`STORE_ENV`] (read only when the flag is absent, so the
/// flag overrides a bad value), else the file's `store` (relative to its folder), else the
/// default SQLite file in the data folder. Parsed here, with the password masked in every
/// message (StoreUrl's errors mask it).
///
/// # Errors
/// Invalid input for a URL that does not parse; no data folder known for the default.
fn store_url(
    global: &GlobalArgs,
    config: &LoadedConfig,
    current_dir: &Path,
) -> anyhow::Result<StoreUrl> {
    let flag_or_env = match &global.store {
        Some(text) => Some(
            text.parse::<StoreUrl>()
                .map_err(|error| invalid_because("invalid --store", error))?,
        ),
        None => env_value(STORE_ENV)
            .map(|text| text.parse::<StoreUrl>())
            .transpose()
            .map_err(|error| invalid_because(format!("invalid {STORE_ENV}"), error))?,
    };
    Ok(match (flag_or_env, &config.config.store) {
        (Some(url), _) => absolute(url, current_dir),
        (None, Some(text)) => {
            let url: StoreUrl = text.parse().map_err(|error| {
                let file = config.path.as_ref().map_or_else(
                    || crate::config::DEFAULT_CONFIG_FILE.to_owned(),
                    |path| path.display().to_string(),
                );
                invalid_because(format!("invalid `store` in {file}"), error)
            })?;
            absolute(url, &config.base_dir)
        }
        (None, None) => absolute(default_store_url()?, current_dir),
    })
}

/// Opens the store at `url` for `access`; for reads and updates, a database that does not
/// exist is an empty store that creates nothing (then `true`).
///
/// # Errors
/// The store's open errors.
async fn open_run_store(
    url: &StoreUrl,
    access: Access,
) -> anyhow::Result<(Arc<dyn RunStore>, bool)> {
    let options = match access {
        Access::Read => OpenOptions::new().read_only(true),
        Access::Update => OpenOptions::new().create_if_missing(false),
        Access::Create => OpenOptions::new(),
    };
    match open_store(url, &options).await {
        Ok(store) => Ok((store, false)),
        // Nothing to read or update: an empty store answers "not found" without creating
        // the file.
        Err(OpenError::NotFound { .. }) if access != Access::Create => {
            Ok((Arc::new(MemoryStore::new()), true))
        }
        Err(error) => Err(error.into()),
    }
}

/// The operator's name: `--as NAME` (not blank, no control characters), else `$USER`, else
/// `$USERNAME`, else `operator`.
///
/// # Errors
/// Invalid input for a blank `--as` or one with control characters.
fn operator_name(given: Option<&str>) -> anyhow::Result<String> {
    if let Some(name) = given {
        let name = name.trim();
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(invalid(format!(
                "--as {name:?}: give a name without control characters"
            )));
        }
        return Ok(name.to_owned());
    }
    Ok(env_value("USER")
        .or_else(|| env_value("USERNAME"))
        .map(|name| name.trim().chars().filter(|c| !c.is_control()).collect())
        .filter(|name: &String| !name.is_empty())
        .unwrap_or_else(|| "operator".to_owned()))
}
