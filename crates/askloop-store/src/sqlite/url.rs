//! SQLite store URLs: `sqlite://PATH` (or `sqlite:PATH`), optionally followed by
//! `?synchronous=normal` or `?synchronous=full` (the default).

use std::path::{Path, PathBuf};

use crate::options::Synchronous;

/// The file and the durability a SQLite store URL names; `None` when `url` is not one (another
/// scheme, no path, or a parameter other than `synchronous=normal|full`).
pub(crate) fn parse(url: &str) -> Option<(PathBuf, Synchronous)> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() {
        return None;
    }
    let mut synchronous = Synchronous::Full;
    for parameter in query.split('&').filter(|parameter| !parameter.is_empty()) {
        synchronous = match parameter {
            "synchronous=full" => Synchronous::Full,
            "synchronous=normal" => Synchronous::Normal,
            _ => return None,
        };
    }
    Some((PathBuf::from(path), synchronous))
}

/// The store URL of the SQLite file at `path` with `synchronous`, as [`parse`] reads it and
/// messages show it: `sqlite://PATH`, followed by `?synchronous=normal` unless full.
pub(crate) fn shown(path: &Path, synchronous: Synchronous) -> String {
    match synchronous {
        Synchronous::Full => format!("sqlite://{}", path.display()),
        Synchronous::Normal => format!("sqlite://{}?synchronous=normal", path.display()),
    }
}
