//! Files: bounded reads of what a user hands in (specs, templates, results, baselines,
//! archives) and atomic writes of what opledger produces. Elsewhere `std::fs` only reads the
//! system's own files (`/proc`, `/sys`, `/etc/os-release`), makes, lists, renames and removes
//! folders, and writes the worker module into a run's private temporary folder.

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::path::Path;

/// Largest spec file read (a spec is a page of YAML).
pub const MAX_SPEC_BYTES: u64 = 1 << 20;
/// Largest report template read.
pub const MAX_TEMPLATE_BYTES: u64 = 1 << 20;
/// Largest results.json read (raw samples of many specs).
pub const MAX_RESULTS_BYTES: u64 = 256 << 20;
/// Largest baseline read (at most 200 samples per variant are stored).
pub const MAX_BASELINE_BYTES: u64 = 16 << 20;

/// Reads a regular file of at most `max_bytes`. A device, FIFO, socket or directory is refused
/// before it is opened (a FIFO would block, `/dev/zero` would never end), and so is a file that
/// grows past the cap while it is read. `what` names the file in messages ("spec").
pub fn read_regular(path: &Path, max_bytes: u64, what: &str) -> Result<Vec<u8>> {
    let meta = regular_metadata(path, what)?;
    let too_big = |size: u64| Error::Refused {
        path: path.to_path_buf(),
        message: format!(
            "{size} bytes or more: larger than the {} a {what} may have",
            human_bytes(max_bytes)
        ),
    };
    if meta.len() > max_bytes {
        return Err(too_big(meta.len()));
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io("reading", path, e))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("reading", path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Reads `rel` (a `/`-separated path) inside the folder `dir` — a file of an archive — of at
/// most `max_bytes`. Stricter than [`read_regular`]: no component of `rel` may be a symbolic
/// link, `..` or absolute, and the file itself must be a regular file when opened (opened
/// without following a link and without blocking, then checked), so that what an archive
/// names can never be a file of the machine (`/etc/passwd` through a link), a FIFO that
/// blocks, or a device that never ends.
pub fn read_in(dir: &Path, rel: &str, max_bytes: u64, what: &str) -> Result<Vec<u8>> {
    let path = dir.join(rel);
    let refused = |message: String| Error::Refused {
        path: path.clone(),
        message,
    };
    let parts: Vec<&str> = rel.split('/').collect();
    if parts
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == ".." || c.contains('\\'))
    {
        return Err(refused(format!(
            "not a path inside the archive; a {what} is read only from inside it"
        )));
    }
    let mut at = dir.to_path_buf();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        let meta = std::fs::symlink_metadata(&at).map_err(|e| Error::io("reading", &at, e))?;
        let last = i + 1 == parts.len();
        if meta.file_type().is_symlink() || (!last && !meta.is_dir()) {
            return Err(refused(format!(
                "{} is {}: a {what} is read only as a regular file inside the archive, never through a link",
                at.display(),
                if meta.file_type().is_symlink() { "a symbolic link" } else { "not a folder" }
            )));
        }
    }
    let file = open_no_follow(&path).map_err(|e| Error::io("reading", &path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("reading", &path, e))?;
    if !meta.is_file() {
        return Err(refused(format!(
            "not a regular file ({}); a {what} must be a regular file",
            file_type_name(&meta.file_type())
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(max_bytes) as usize);
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("reading", &path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(refused(format!(
            "{} bytes or more: larger than the {} a {what} may have",
            bytes.len(),
            human_bytes(max_bytes)
        )));
    }
    Ok(bytes)
}

/// Opens `path` for reading without following a final symbolic link and without blocking on
/// a FIFO (the caller checks what was opened before reading it).
pub fn open_no_follow(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    o.open(path)
}

/// Opens a regular file to stream it (any size): a device, FIFO, socket or directory is
/// refused before it is opened. `what` names the file in messages.
pub fn open_regular(path: &Path, what: &str) -> Result<std::fs::File> {
    regular_metadata(path, what)?;
    std::fs::File::open(path).map_err(|e| Error::io("reading", path, e))
}

/// The metadata of `path`, refused unless it is a regular file (checked before opening: a FIFO
/// would block the open itself).
fn regular_metadata(path: &Path, what: &str) -> Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("reading", path, e))?;
    if !meta.is_file() {
        return Err(Error::Refused {
            path: path.to_path_buf(),
            message: format!(
                "not a regular file ({}); a {what} must be a regular file",
                file_type_name(&meta.file_type())
            ),
        });
    }
    Ok(meta)
}

fn file_type_name(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{} KiB", n >> 10)
    }
}

/// Checks that `dir` can hold new files, by creating and removing a temp file in it; a folder
/// that does not exist yet is checked where it would be created (its nearest existing ancestor),
/// and is not created here: a run refused later must leave nothing behind.
pub fn check_writable_dir(dir: &Path, what: &str) -> Result<()> {
    let refused = |e: std::io::Error| Error::Refused {
        path: dir.to_path_buf(),
        message: format!("the {what} cannot be written: {e}"),
    };
    if dir.is_dir() {
        return tempfile::Builder::new()
            .prefix(".opledger-")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map(drop)
            .map_err(refused);
    }
    let mut ancestor = dir.parent();
    while let Some(a) = ancestor {
        let a = if a.as_os_str().is_empty() {
            Path::new(".")
        } else {
            a
        };
        if a.exists() {
            if !a.is_dir() {
                return Err(Error::Refused {
                    path: dir.to_path_buf(),
                    message: format!(
                        "the {what} cannot be created: {} is not a folder",
                        a.display()
                    ),
                });
            }
            return tempfile::Builder::new()
                .prefix(".opledger-")
                .tempdir_in(a)
                .map(drop)
                .map_err(refused);
        }
        ancestor = a.parent();
    }
    Ok(())
}

/// Checks that a file can be created at `path`: its folder exists and it is not a directory.
pub fn check_writable_file(path: &Path, what: &str) -> Result<()> {
    if path.is_dir() {
        return Err(Error::Refused {
            path: path.to_path_buf(),
            message: format!("is a directory; the {what} must be a file path"),
        });
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(Error::Refused {
            path: path.to_path_buf(),
            message: format!("the folder {} of the {what} does not exist", dir.display()),
        });
    }
    Ok(())
}

/// Removes `.opledger-*.tmp` files in `dir` (not recursive); errors are ignored, since a file
/// that cannot be removed is only clutter.
pub fn remove_temp_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".opledger-")
            && name.ends_with(".tmp")
            && entry.file_type().is_ok_and(|t| t.is_file())
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Appends `bytes` to `path` (created when missing), as CI job summaries expect. A FIFO with no
/// reader is an error at once, never a wait: the open does not block (`O_NONBLOCK`), and the
/// writes that follow do (the flag is cleared once a reader is there).
pub fn append(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            let e = if e.raw_os_error() == Some(libc::ENXIO) {
                std::io::Error::other("a FIFO that no process reads")
            } else {
                e
            };
            Error::write("opening", path, e)
        })?;
    let fd = f.as_raw_fd();
    // SAFETY: `fd` is the open descriptor `f` owns for the whole call; F_GETFL and F_SETFL only
    // read and set its status flags.
    let cleared = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) >= 0
    };
    if !cleared {
        return Err(Error::write(
            "opening",
            path,
            std::io::Error::last_os_error(),
        ));
    }
    f.write_all(bytes)
        .map_err(|e| Error::write("appending to", path, e))
}

/// Writes `bytes` to `path` atomically: a temp file in the same directory, fsync, rename over
/// the target, fsync of the directory. The target is either the old or the new file, never torn.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::write("creating directory", dir, e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".opledger-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| Error::write("creating a temp file in", dir, e))?;
    // Temp files are created 0600; give the result the target's mode, or 0644 for a new file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let perms = std::fs::metadata(path)
            .map(|m| m.permissions())
            .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644));
        tmp.as_file()
            .set_permissions(perms)
            .map_err(|e| Error::write("setting permissions of", tmp.path().to_path_buf(), e))?;
    }
    tmp.write_all(bytes)
        .map_err(|e| Error::write("writing", tmp.path().to_path_buf(), e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::write("syncing", tmp.path().to_path_buf(), e))?;
    tmp.persist(path)
        .map_err(|e| Error::write("replacing", path, e.error))?;
    if let Ok(d) = std::fs::File::open(dir) {
        // Persist the rename itself; some filesystems refuse fsync on directories, which is fine.
        let _ = d.sync_all();
    }
    Ok(())
}

/// Whether `a` and `b` overlap: the same folder, or one inside the other (both made absolute,
/// links resolved where the paths exist).
pub fn overlaps(a: &Path, b: &Path) -> bool {
    let (x, y) = (absolute(a), absolute(b));
    x.starts_with(&y) || y.starts_with(&x)
}

/// `p` made absolute with its links resolved as far as it exists (a folder still to be
/// created keeps its missing tail).
pub fn absolute(p: &Path) -> std::path::PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut existing = abs.as_path();
    let mut tail = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_os_string());
                existing = parent;
            }
            _ => return abs,
        }
    }
}

/// The program `name` on PATH: the first absolute folder of PATH holding an executable file of
/// that name, as an absolute path (what is started is what was found; a relative folder of PATH
/// would mean another program in another working folder).
pub fn program_on_path(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_folders_are_seen_through_dots_and_missing_tails() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::create_dir(&a).unwrap();
        assert!(overlaps(&a, &a.join("x/y")));
        assert!(overlaps(&a.join("../a"), &a));
        assert!(!overlaps(&a, &d.path().join("b")));
        assert!(!overlaps(&a, &d.path().join("ab")));
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn bounded_reads_refuse_devices_fifos_and_large_files() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2048]).unwrap();
        assert_eq!(read_regular(&big, 4096, "spec").unwrap().len(), 2048);
        let e = read_regular(&big, 1024, "spec").unwrap_err().to_string();
        assert!(
            e.contains("big") && e.contains("larger than the 1 KiB"),
            "{e}"
        );
        let e = read_regular(Path::new("/dev/zero"), 1024, "spec")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a character device"), "{e}");
        let e = read_regular(dir.path(), 1024, "spec")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a directory"), "{e}");
    }

    #[test]
    fn stale_temp_files_are_removed_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".opledger-abc.tmp"), b"x").unwrap();
        std::fs::write(dir.path().join("keep.json"), b"x").unwrap();
        remove_temp_files(dir.path());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["keep.json"]);
    }
}
