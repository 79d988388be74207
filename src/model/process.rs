//! Whether a process runs.

/// Whether a process with this pid exists and is not a zombie (a process
/// that ended and was not reaped yet counts as gone).
pub fn running(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .is_some_and(|at| stat[at + 1..].trim_start().starts_with('Z'))
    });
    !zombie && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}
