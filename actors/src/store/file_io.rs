//! The file store's disk primitives, shared by its thread and webhook files:
//! names checked before they become paths, JSON read and written atomically
//! (temporary file, fsync, rename, fsync of the directory), and blocking work
//! moved off the runtime.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::StorageError;

/// Longest id accepted as a file name, in bytes (file systems allow 255 per name).
pub(super) const MAX_FILE_ID_LEN: usize = 240;
/// Prefix of the temporary files an atomic write renames into place.
pub(super) const TMP_PREFIX: &str = ".tmp-";

/// An I/O failure on `context` (a path).
pub(super) fn io_error(context: impl std::fmt::Display, err: io::Error) -> StorageError {
    StorageError::Io(format!("{context}: {err}"))
}

/// Decodes the JSON `bytes` read from `path`.
pub(super) fn decode<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, StorageError> {
    serde_json::from_slice(bytes)
        .map_err(|err| StorageError::Serialization(format!("{}: {err}", path.display())))
}

/// Encodes `value` as JSON.
pub(super) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(value).map_err(|err| StorageError::Serialization(err.to_string()))
}

/// Refuses a string that cannot safely be a file name.
pub(super) fn file_name<'a>(kind: &str, id: &'a str) -> Result<&'a str, StorageError> {
    let reason = if id.is_empty() {
        Some("is empty")
    } else if id.contains(['/', '\\']) {
        Some("contains a path separator")
    } else if id.contains("..") {
        Some("contains `..`")
    } else if id.starts_with('.') {
        Some("starts with `.`")
    } else if id.len() > MAX_FILE_ID_LEN {
        Some("is longer than 240 bytes")
    } else if id.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StorageError::InvalidInput(format!(
            "{kind} `{}` {reason}, so it cannot name a file",
            id.escape_debug()
        ))),
        None => Ok(id),
    }
}

/// Reads a whole file; `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(io_error(path.display(), err)),
    }
}

/// Reads and decodes a JSON file; `None` when it does not exist.
pub(super) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StorageError> {
    read_optional(path)?
        .map(|bytes| decode(path, &bytes))
        .transpose()
}

/// Makes the directory's entries durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|err| io_error(dir.display(), err))
}

/// Replaces `path` with `bytes` atomically: temporary file, fsync, rename, fsync dir.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let dir = path
        .parent()
        .ok_or_else(|| StorageError::Io(format!("{} has no parent", path.display())))?;
    let tmp = dir.join(format!("{TMP_PREFIX}{}", uuid::Uuid::now_v7().simple()));
    let written = File::create(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(err) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_error(path.display(), err));
    }
    sync_dir(dir)
}

/// Replaces `path` with `value` as JSON: temporary file, fsync, rename, fsync dir.
pub(super) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StorageError> {
    write_atomic(path, &encode(value)?)
}

/// Removes a file; an absent file is not an error.
pub(super) fn remove_file(path: &Path) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error(path.display(), err)),
    }
}

/// Names of the entries of `dir` (`None` for names that are not UTF-8).
pub(super) fn entries(dir: &Path) -> Result<Vec<(PathBuf, Option<String>)>, StorageError> {
    let read = match fs::read_dir(dir) {
        Ok(read) => read,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(io_error(dir.display(), err)),
    };
    read.map(|entry| {
        let entry = entry.map_err(|err| io_error(dir.display(), err))?;
        Ok((entry.path(), entry.file_name().into_string().ok()))
    })
    .collect()
}

/// Runs `work` on the blocking pool.
pub(super) async fn run_blocking<T, F>(work: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StorageError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| StorageError::Io(format!("file store task failed: {err}")))?
}
