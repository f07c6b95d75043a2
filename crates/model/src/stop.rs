//! What a stopped opledger leaves behind: nothing of its own. The children it starts in process
//! groups of their own (workers, the counted process under Valgrind) and the private folders it
//! works in (`/tmp/opledger-counts-…`, a worker's inputs) are registered here while they live;
//! when SIGTERM, SIGINT or SIGHUP stops the process, a thread of this module ends every
//! registered group and removes every registered folder, then exits with 128 + the signal's
//! number, as a shell reports a process a signal ended. Without it a CI job cancelled in the
//! middle of a counted run left Valgrind running under PID 1 and its folder in `/tmp`.
//!
//! The folders are made private (0700): the spec copy, the inputs and the counts in them are
//! the user's, and another account on the machine has no business reading or replacing them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Process groups (each the pid of its leader) to end on a stop.
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Folders to remove on a stop.
static FOLDERS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn lock<T>(m: &'static Mutex<Vec<T>>) -> std::sync::MutexGuard<'static, Vec<T>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the thread that waits for a stopping signal; once per process (later calls do
/// nothing). Where the handler cannot be installed the signals keep their default action.
pub fn on_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("opledger-stop".into())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    end_everything();
                    std::process::exit(128 + signal);
                }
            });
    });
}

/// Ends every registered group and removes every registered folder.
fn end_everything() {
    for &group in lock(&GROUPS).iter() {
        // SAFETY: kill with a negative pid signals a process group this process started
        // (process_group(0): its id is its leader's pid); no memory is touched.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
    for folder in lock(&FOLDERS).iter() {
        let _ = std::fs::remove_dir_all(folder);
    }
}

/// A registered process group, ended on a stop until this is dropped.
pub struct Group(i32);

/// Registers the process group led by `pid` (started with `process_group(0)`).
pub fn group(pid: u32) -> Group {
    let pid = pid as i32;
    lock(&GROUPS).push(pid);
    Group(pid)
}

impl Drop for Group {
    fn drop(&mut self) {
        lock(&GROUPS).retain(|&g| g != self.0);
    }
}

/// A private folder (mode 0700) removed when dropped, and on a stop.
pub struct PrivateDir {
    dir: tempfile::TempDir,
}

impl PrivateDir {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let path = self.dir.path().to_path_buf();
        lock(&FOLDERS).retain(|f| *f != path);
    }
}

/// Makes a private folder named `prefix…` in `parent` (the system's temporary folder when
/// `None`), registered for removal on a stop.
pub fn private_dir(prefix: &str, parent: Option<&Path>) -> std::io::Result<PrivateDir> {
    use std::os::unix::fs::PermissionsExt;
    let mut builder = tempfile::Builder::new();
    builder
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700));
    let dir = match parent {
        Some(p) => builder.tempdir_in(p)?,
        None => builder.tempdir()?,
    };
    lock(&FOLDERS).push(dir.path().to_path_buf());
    Ok(PrivateDir { dir })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_folders_are_the_owners_alone_and_forgotten_when_dropped() {
        let d = private_dir("opledger-stop-test-", None).unwrap();
        let mode = std::fs::metadata(d.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let path = d.path().to_path_buf();
        assert!(lock(&FOLDERS).contains(&path));
        drop(d);
        assert!(!path.exists());
        assert!(!lock(&FOLDERS).contains(&path));
    }
}
