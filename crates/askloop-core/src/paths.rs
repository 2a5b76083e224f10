//! Where askloop keeps its files: the platform data folder, overridable with `ASKLOOP_DATA_DIR`.

use std::path::PathBuf;

/// The environment variable that overrides [`data_dir`].
pub const DATA_DIR_ENV: &str = "ASKLOOP_DATA_DIR";

/// askloop's data folder: `$ASKLOOP_DATA_DIR` if set and non-empty, else the platform data
/// folder (`~/.local/share/askloop` on Linux, `~/Library/Application Support/askloop` on macOS,
/// `%APPDATA%\askloop\data` on Windows). `None` when neither is known (no home folder).
///
/// The default SQLite store (`askloop.db`) and the local model files (`models/`) live here.
pub fn data_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(DATA_DIR_ENV).filter(|dir| !dir.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    directories::ProjectDirs::from("", "", "askloop").map(|dirs| dirs.data_dir().to_path_buf())
}
