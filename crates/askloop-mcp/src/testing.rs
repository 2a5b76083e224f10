//! Real MCP servers for tests (feature `test-support`): `@modelcontextprotocol/server-everything`
//! and `@modelcontextprotocol/server-filesystem` from npm, pinned by this crate's
//! `tests/npm/package-lock.json`, run with the machine's `node`.
//!
//! [`npm_servers_dir`] installs them once per cache folder with `npm ci` (under a lock file, so
//! concurrent test processes install once; a changed lock file installs again). The cache is
//! `$ASKLOOP_TEST_NPM_CACHE`, else `askloop-test-npm` in the platform's cache folder
//! (`~/.cache/askloop-test-npm`). Without `node` or `npm` these helpers panic: tests that use
//! them fail, they never skip.

#![allow(clippy::panic, clippy::expect_used)]

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use crate::{McpServerConfig, RequireApproval};

/// The folder whose `node_modules` holds both servers, installing them on first use.
///
/// # Panics
/// When `node` or `npm` is missing, or `npm ci` fails.
pub fn npm_servers_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install)
}

fn install() -> PathBuf {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|output| output.status.success()),
        "the MCP tests need Node.js (`node` on PATH) to run the npm MCP servers: {node:?}"
    );
    let cache = std::env::var_os("ASKLOOP_TEST_NPM_CACHE")
        .map(PathBuf::from)
        .or_else(|| directories::BaseDirs::new().map(|dirs| dirs.cache_dir().to_path_buf()))
        .expect("no cache folder: set ASKLOOP_TEST_NPM_CACHE")
        .join("askloop-test-npm");
    let dir = cache.join("askloop-mcp");
    let fail = |what: &str, error: &dyn std::fmt::Display| -> ! {
        panic!(
            "installing the MCP test servers in {}: {what}: {error}",
            dir.display()
        )
    };
    fs::create_dir_all(&dir).unwrap_or_else(|error| fail("create the folder", &error));
    let lock = File::create(cache.join("askloop-mcp.lock"))
        .unwrap_or_else(|error| fail("create the lock file", &error));
    lock.lock()
        .unwrap_or_else(|error| fail("take the lock", &error));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/npm");
    let wanted = fs::read_to_string(source.join("package-lock.json"))
        .unwrap_or_else(|error| fail("read tests/npm/package-lock.json", &error));
    let marker = dir.join(".installed-package-lock.json");
    let installed = fs::read_to_string(&marker).ok();
    if installed.as_deref() != Some(wanted.as_str()) || !dir.join("node_modules").is_dir() {
        let _ = fs::remove_file(&marker);
        for file in ["package.json", "package-lock.json"] {
            fs::copy(source.join(file), dir.join(file)).unwrap_or_else(|error| fail(file, &error));
        }
        let started = Instant::now();
        let status = Command::new("npm")
            .args([
                "ci",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .current_dir(&dir)
            .status();
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => fail("`npm ci` failed (it needs the npm registry)", &status),
            Err(error) => fail("cannot run `npm` (the MCP tests need it)", &error),
        }
        eprintln!(
            "installed the MCP test servers in {} in {:.1} s",
            dir.display(),
            started.elapsed().as_secs_f64()
        );
        fs::write(&marker, &wanted).unwrap_or_else(|error| fail("write the marker", &error));
    }
    drop(lock);
    dir
}

/// The entry point (`dist/index.js`) of an installed server package, e.g. `server-everything`.
///
/// # Panics
/// As [`npm_servers_dir`].
pub fn server_entry(package: &str) -> PathBuf {
    npm_servers_dir()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
}

/// server-everything over stdio (`echo`, `get-sum`, `get-structured-content`, …); no tool
/// needs approval.
///
/// # Panics
/// As [`npm_servers_dir`].
pub fn everything() -> McpServerConfig {
    McpServerConfig::command(
        "node",
        [
            server_entry("server-everything").display().to_string(),
            "stdio".to_owned(),
        ],
    )
    .with_require_approval(RequireApproval::None)
}

/// server-filesystem allowed to touch `root` only (`read_text_file`, `write_file`, …);
/// `write_file` needs approval.
///
/// # Panics
/// As [`npm_servers_dir`].
pub fn filesystem(root: &Path) -> McpServerConfig {
    McpServerConfig::command(
        "node",
        [
            server_entry("server-filesystem").display().to_string(),
            root.display().to_string(),
        ],
    )
    .with_require_approval(RequireApproval::Only(vec!["write_file".to_owned()]))
}

/// askloop's own eliciting test server (`tests/npm/eliciting-server.mjs`, on the SDK installed
/// beside server-everything) over stdio, appending what it sees to the JSON-lines file `log`.
/// Its tools ask the person: `book_table` (a form: time and party size), `two_questions` (two
/// forms in turn), `changing_question` (a form whose wording changes with every call) and
/// `sign_in` (a link); all side-effecting, none needs approval.
///
/// # Panics
/// As [`npm_servers_dir`], or when the script cannot be written beside the servers.
pub fn eliciting(log: &Path) -> McpServerConfig {
    McpServerConfig::command("node", [eliciting_script().display().to_string()])
        .with_env("ELICIT_LOG", log.display().to_string())
        .with_require_approval(RequireApproval::None)
}

/// The script of [`eliciting`], placed beside the npm servers (whose SDK it imports).
///
/// # Panics
/// As [`eliciting`].
pub fn eliciting_script() -> PathBuf {
    let script = npm_servers_dir().join("eliciting-server.mjs");
    let source = include_str!("../tests/npm/eliciting-server.mjs");
    if fs::read_to_string(&script).ok().as_deref() != Some(source) {
        // Written whole under another name, then renamed: concurrent tests never run half a file.
        let partial = script.with_extension(format!("{}.partial", std::process::id()));
        fs::write(&partial, source).expect("write the eliciting test server");
        fs::rename(&partial, &script).expect("place the eliciting test server");
    }
    script
}
