//! Files aot creates or rewrites, opened so that a link planted in the folder
//! (a cloned repository can ship one) is never written through: every file
//! is opened with `O_NOFOLLOW`, temporary files get unpredictable names and
//! are created exclusively, and whole files are replaced by a rename.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` with `options`, refusing a symbolic link at `path` with an
/// error that says so.
pub fn open_no_follow(path: &Path, options: &OpenOptions) -> io::Result<File> {
    let mut options = options.clone();
    options.custom_flags(nix::libc::O_NOFOLLOW);
    options.open(path).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            link_refused(path)
        } else {
            e
        }
    })
}

/// Fails when `path` is a symbolic link (a missing file is fine).
pub fn refuse_link(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(link_refused(path)),
        _ => Ok(()),
    }
}

/// Creates directory `dir` (and its parents) and makes sure it is a real
/// directory, not a link to one elsewhere.
pub fn real_dir(dir: &Path) -> io::Result<()> {
    refuse_link(dir)?;
    std::fs::create_dir_all(dir)?;
    refuse_link(dir)
}

fn link_refused(path: &Path) -> io::Error {
    let target = std::fs::read_link(path)
        .map(|t| format!(" to {}", t.display()))
        .unwrap_or_default();
    io::Error::other(format!(
        "is a symbolic link{target}; aot does not write through links: remove it, or run aot on the file it points to"
    ))
}

/// Replaces `path` with `bytes` atomically: a reader sees the old file or the
/// new one, never a mix, even if the process dies at any instant. The new
/// file keeps the old one's permissions; the directory is synced, so the
/// rename itself survives a power loss. A link at `path` is replaced, never
/// followed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = dir_of(path);
    let mut file = temp_beside(path)?;
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.is_file()
    {
        file.as_file().set_permissions(meta.permissions())?;
    }
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

/// A new, empty temporary file beside `path`, named `.<name>.tmp-<random>`
/// and created exclusively (removed when dropped unless persisted).
pub fn temp_beside(path: &Path) -> io::Result<tempfile::NamedTempFile> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", name_of(path)))
        // A new file gets the usual mode (less the umask), not 0600.
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir_of(path))
}

/// Removes temporary files `temp_beside(path)` left behind by a process that
/// died mid-write. The caller holds the lock writers take.
pub fn remove_stale_temps(path: &Path) {
    let prefix = format!(".{}.tmp-", name_of(path));
    let Ok(entries) = std::fs::read_dir(dir_of(path)) else {
        return;
    };
    for entry in entries.flatten() {
        let regular = entry.file_type().is_ok_and(|t| t.is_file() || t.is_symlink());
        if regular && entry.file_name().to_string_lossy().starts_with(&prefix) {
            // Another cleaner may have been first: nothing to do then.
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap_or_default().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn a_planted_link_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let state = dir.path().join("aot.yaml");
        std::fs::write(&state, "old").unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600)).unwrap();
        // The names the temporary file had before they became unpredictable.
        for pid in [std::process::id(), 1, 2] {
            symlink(&victim, dir.path().join(format!(".aot.yaml.tmp-{pid}"))).unwrap();
        }
        write_atomic(&state, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "the victim's mode is untouched");
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the state file keeps its mode");

        let lock = dir.path().join("lock");
        symlink(&victim, &lock).unwrap();
        let err = open_no_follow(&lock, OpenOptions::new().write(true).create(true)).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link to"), "{err}");
        assert!(refuse_link(&lock).is_err() && refuse_link(&victim).is_ok());

        remove_stale_temps(&state);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 3, "victim, state and lock remain: {left:?}");
    }
}
