//! What an audit record keeps of a process's command line.
//!
//! The command line is the calling program's to choose, so it is treated as hostile input:
//! - **Nothing secret-shaped:** query strings of URL arguments become `?[query]`, a URL's
//!   user information `[userinfo]@`, credential placeholders `[placeholder]`, and the value
//!   of a flag or assignment named like a secret (`--token X`, `--password=X`,
//!   `GITHUB_TOKEN=X`, `-H 'Authorization: Bearer X'`) `[redacted]`. Known secret values are
//!   redacted again when the line is written (`sink.rs`).
//! - **Bounded:** a process may carry megabytes of arguments (up to 256 KiB are read), and
//!   every event of each of its connections, and of its children's, repeats them. Each
//!   argument keeps at most [`MAX_ARG`] bytes and the whole line at most [`MAX_LINE`]; what
//!   is cut is said (`…[+N bytes]`, `[+N more arguments]`), so an agent cannot flood the
//!   shared audit writer (and through its backpressure, everyone's requests) by padding its
//!   argv.

/// Bytes kept of one argument.
pub const MAX_ARG: usize = 256;
/// Bytes kept of one process's whole command line (its arguments as recorded, joined).
pub const MAX_LINE: usize = 2048;

/// Names whose value is a secret: a flag (`--api-key`), an assignment (`API_KEY=`) or a
/// header (`Authorization:`) whose name contains one of these, case-insensitively.
const SECRET_NAMES: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "api_key",
    "apikey",
    "authorization",
    "credential",
    "private-key",
    "private_key",
    "cookie",
];

/// The arguments as an audit record keeps them.
pub fn recorded(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len().min(32));
    let mut used = 0;
    let mut value_of_secret_flag = false;
    for (i, arg) in argv.iter().enumerate() {
        let clean = if value_of_secret_flag {
            "[redacted]".to_string()
        } else {
            clean(arg)
        };
        value_of_secret_flag = is_secret_flag(arg);
        let clean = cut(clean, MAX_ARG);
        let room = MAX_LINE.saturating_sub(used);
        if clean.len() + 1 > room {
            out.push(format!("[+{} more arguments]", argv.len() - i));
            break;
        }
        used += clean.len() + 1;
        out.push(clean);
    }
    out
}

/// One argument without its secret-shaped parts.
fn clean(arg: &str) -> String {
    if arg.contains("openshell:resolve:env:") || arg.contains("OPENSHELL-RESOLVE-ENV-") {
        return "[placeholder]".to_string();
    }
    if let Some((name, _)) = arg.split_once('=')
        && secret_name(name)
    {
        return format!("{name}=[redacted]");
    }
    if let Some((name, _)) = arg.split_once(':')
        && !name.contains('/')
        && !name.contains(' ')
        && secret_name(name)
    {
        return format!("{name}: [redacted]");
    }
    let mut a = arg.to_string();
    if let Some(scheme_end) = a.find("://") {
        let rest = scheme_end + 3;
        let authority_end = a[rest..]
            .find(['/', '?', '#'])
            .map_or(a.len(), |n| rest + n);
        if let Some(at) = a[rest..authority_end].rfind('@') {
            a.replace_range(rest..rest + at, "[userinfo]");
        }
        if let Some(q) = a.find('?') {
            a.truncate(q);
            a.push_str("?[query]");
        }
    }
    a
}

/// Whether `name` (a flag, variable or header name) names a secret.
fn secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    !name.is_empty() && SECRET_NAMES.iter().any(|s| name.contains(s))
}

/// A flag whose next argument is its value and a secret (`--token X`, `-H` is not one: its
/// value names itself, `Authorization: …`).
fn is_secret_flag(arg: &str) -> bool {
    arg.starts_with('-') && !arg.contains('=') && secret_name(arg)
}

/// `s` cut to at most `max` bytes (at a character boundary), saying how much was cut.
/// `s` cut to at most `max` bytes (at a character boundary), followed by how many it lost.
pub fn cut(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = s.len() - end;
    s.truncate(end);
    s.push_str(&format!("…[+{cut} bytes]"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(args: &[&str]) -> Vec<String> {
        recorded(&args.iter().map(ToString::to_string).collect::<Vec<_>>())
    }

    #[test]
    fn ordinary_arguments_are_kept() {
        assert_eq!(
            rec(&[
                "curl",
                "-s",
                "https://api.github.com/repos/x",
                "-o",
                "/tmp/out"
            ]),
            [
                "curl",
                "-s",
                "https://api.github.com/repos/x",
                "-o",
                "/tmp/out"
            ]
        );
    }

    #[test]
    fn secret_shaped_parts_are_redacted() {
        assert_eq!(
            rec(&[
                "tool",
                "--token",
                "ghp_abc",
                "--password=hunter2",
                "GITHUB_TOKEN=ghp_def",
                "-H",
                "Authorization: Bearer xyz",
                "https://user:pw@example.com/a?sig=1",
                "Bearer openshell:resolve:env:KEY",
                "--verbose",
                "keep",
            ]),
            [
                "tool",
                "--token",
                "[redacted]",
                "--password=[redacted]",
                "GITHUB_TOKEN=[redacted]",
                "-H",
                "Authorization: [redacted]",
                "https://[userinfo]@example.com/a?[query]",
                "[placeholder]",
                "--verbose",
                "keep",
            ]
        );
    }

    #[test]
    fn a_padded_command_line_is_bounded_and_says_what_was_cut() {
        let huge = "A".repeat(200_000);
        let many: Vec<String> = (0..10_000).map(|i| format!("arg{i}")).collect();
        let one = rec(&["python3", "-c", &huge]);
        assert_eq!(one.len(), 3);
        assert!(one[2].len() < MAX_ARG + 32, "{}", one[2].len());
        assert!(one[2].ends_with(&format!("…[+{} bytes]", 200_000 - MAX_ARG)));
        let all = recorded(&many);
        let total: usize = all.iter().map(|a| a.len() + 1).sum();
        assert!(total <= MAX_LINE + 64, "{total}");
        let last = all.last().unwrap();
        assert_eq!(
            *last,
            format!("[+{} more arguments]", 10_000 - (all.len() - 1))
        );
    }

    #[test]
    fn multibyte_arguments_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ARG);
        let out = rec(&[&long]);
        assert!(out[0].starts_with("éé"));
        assert!(out[0].contains("…[+"));
    }

    proptest::proptest! {
        #[test]
        fn never_longer_than_the_bounds(args in proptest::collection::vec(".{0,600}", 0..80)) {
            let out = recorded(&args);
            let total: usize = out.iter().map(|a| a.len() + 1).sum();
            proptest::prop_assert!(total <= MAX_LINE + 64);
            proptest::prop_assert!(out.iter().all(|a| a.len() <= MAX_ARG + 32 || a.starts_with("[+")));
        }
    }
}
