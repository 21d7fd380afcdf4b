//! Replacing a small file (a config, a pool table, a reservation record) so that a
//! crash at any moment leaves either the old or the new file, whole: write a
//! temporary file in the same directory, fsync it, rename it over the file, fsync the
//! directory (which makes the rename itself durable). One implementation for every
//! such file of the project.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of a file written for the first time: a config may hold DH-HMAC-CHAP secrets
/// and a reservation record holds reservation keys, so only its owner reads it.
const NEW_FILE_MODE: u32 = 0o600;

/// Replaces `path` with `contents` atomically and durably. The file keeps its
/// permission bits. On error, `path` is unchanged (the temporary file is removed).
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{} names no file", path.display()))
    })?;
    let mode = std::fs::metadata(path).map(|metadata| metadata.permissions().mode() & 0o7777).unwrap_or(NEW_FILE_MODE);
    let temporary = directory.join(format!(".{}.sluice-{}.tmp", file_name.to_string_lossy(), std::process::id()));
    // A leftover from a crash of this same process id is ours to replace.
    let _ = std::fs::remove_file(&temporary);
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).open(&temporary)?;
        // The umask may have narrowed `mode`; the old file's bits win.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temporary, path)?;
        File::open(&directory)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_keeps_its_mode() {
        let directory = std::env::temp_dir().join(format!("sluice-persist-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join("sluice.toml");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomically(&path, b"new contents").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new contents");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        let leftovers: Vec<_> = std::fs::read_dir(&directory).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file stays behind");

        // A missing directory fails without creating anything.
        let missing = directory.join("missing").join("sluice.toml");
        assert!(write_atomically(&missing, b"x").is_err());
        assert!(!missing.exists());
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
