//! Replacing a file atomically, for every layer that rewrites one whole: the
//! state file, a compacted journal, a compacted memory.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Replaces `path` with `bytes` atomically: a reader sees the old file or the
/// new one, never a mix, even if the process dies at any instant. The new
/// file keeps the old one's permissions; the directory is synced, so the
/// rename itself survives a power loss.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = File::create(&tmp)?;
        if let Ok(meta) = std::fs::metadata(path) {
            file.set_permissions(meta.permissions())?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
