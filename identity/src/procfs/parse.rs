//! What `/proc` files and links say: pure parsers of `stat`, `status`, `cmdline`,
//! `children`, an `exe` target and a socket descriptor's link, with no reading of their own.

/// The two fields of `/proc/<pid>/stat` that identity needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatFields {
    /// Field 4: the parent's pid (0 when the parent is outside this pid namespace).
    pub(crate) ppid: u32,
    /// Field 20: threads in the process (children are listed per thread).
    pub(crate) num_threads: u32,
    /// Field 22: start time in clock ticks since boot; with the pid it names one process.
    pub(crate) start_time: u64,
    /// Field 3: the state is `R` (on a CPU or waiting for one).
    pub(crate) running: bool,
}

/// Parses `/proc/<pid>/stat`. `comm` (field 2) may contain spaces and `)`, so fields are
/// counted from the last `)`.
pub(crate) fn parse_stat(contents: &[u8]) -> Option<StatFields> {
    let close = contents.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(contents.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    // After `)`: field 3 (state) is index 0, field 4 (ppid) index 1, field 20 index 17,
    // field 22 index 19.
    let running = fields.next()? == "R";
    let ppid = fields.next()?.parse().ok()?;
    let num_threads = fields.nth(15)?.parse().ok()?;
    let start_time = fields.nth(1)?.parse().ok()?;
    Some(StatFields {
        ppid,
        num_threads,
        start_time,
        running,
    })
}

/// The value of the `/proc/<pid>/status` line `key` (`Uid:`, `NSpid:`). Lines are taken as
/// bytes: the `Name:` line is the program's name cut at 15 bytes, which can split a UTF-8
/// character (a name of bidi or zero-width characters, or any non-ASCII one), so the file as
/// a whole need not be UTF-8.
fn status_line<'c>(contents: &'c [u8], key: &[u8]) -> Option<&'c str> {
    let line = contents
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(key))?;
    std::str::from_utf8(line).ok()
}

/// The real uid from `/proc/<pid>/status` (`Uid:\treal\teffective\tsaved\tfs`).
pub(crate) fn parse_status_real_uid(contents: &[u8]) -> Option<u32> {
    let line = status_line(contents, b"Uid:")?;
    line.split_ascii_whitespace().next()?.parse().ok()
}

/// Whether `/proc/<pid>/status` is of a pid namespace's init: the last `NSpid:` column (the
/// pid in the process's own namespace) is 1. Kernels without `NSpid` have no such line: no.
pub(crate) fn parse_status_is_namespace_init(contents: &[u8]) -> bool {
    status_line(contents, b"NSpid:").and_then(|line| line.split_ascii_whitespace().next_back())
        == Some("1")
}

/// Splits `/proc/<pid>/cmdline` into argv. A process that rewrote its arguments (setproctitle)
/// may leave one space-separated string; that is what the kernel shows, so it is kept as is.
pub(crate) fn parse_cmdline(contents: &[u8]) -> Vec<String> {
    let contents = contents.strip_suffix(b"\0").unwrap_or(contents);
    if contents.is_empty() {
        return Vec::new();
    }
    contents
        .split(|&b| b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// Parses a `task/<tid>/children` file: space-separated pids.
pub(crate) fn parse_children(contents: &[u8]) -> Vec<u32> {
    std::str::from_utf8(contents)
        .map(|text| {
            text.split_ascii_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Turns the raw `/proc/<pid>/exe` target into (path, deleted). The kernel appends
/// ` (deleted)` to an unlinked executable's path; the suffix is stripped only when no file by
/// the raw name exists, because a binary may really be called `x (deleted)`.
pub(crate) fn strip_deleted(
    raw: String,
    raw_target_exists: impl FnOnce(&str) -> bool,
) -> (String, bool) {
    const SUFFIX: &str = " (deleted)";
    match raw.strip_suffix(SUFFIX) {
        Some(stripped) if !raw_target_exists(&raw) => (stripped.to_owned(), true),
        _ => (raw, false),
    }
}

/// The text `readlink /proc/<pid>/fd/<n>` shows for one socket: `socket:[<inode>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SocketLink {
    target: Vec<u8>,
    pub(super) inode: u64,
}

impl SocketLink {
    pub(crate) fn new(inode: u64) -> Self {
        Self {
            target: format!("socket:[{inode}]").into_bytes(),
            inode,
        }
    }

    pub(super) fn matches(&self, target: &[u8]) -> bool {
        self.target == target
    }
}

/// The inode of a `socket:[<inode>]` link target.
pub(crate) fn socket_inode(target: &[u8]) -> Option<u64> {
    let digits = target.strip_prefix(b"socket:[")?.strip_suffix(b"]")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A directory entry's name as a pid or tid (digits only).
pub(super) fn numeric_name(name: &[u8]) -> Option<u32> {
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(name).ok()?.parse().ok()
}
