//! `sluice policy check | explain | default`.
//!
//! Owns the policy subcommands: argument shapes, reading files and stdin, printing
//! diagnostics (on stderr, one `FILE:LINE:COL: field: message` per line) and explanations
//! (text or JSON on stdout). The decisions come from `policy::explain`, which calls the
//! same code the proxy does.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Deserialize;

use sluice_addr::AuthorityError;

use super::CompatArg;
use crate::credentials::profile;
use crate::policy::explain::{self, Question, QuestionRequest};
use crate::policy::{self, Composed, Diagnostic, LoadError, Loaded};

#[derive(Debug, Subcommand)]
pub(super) enum PolicyCommand {
    /// Validate policy files; print every error and warning as FILE:LINE:COL: field: message.
    Check(CheckArgs),
    /// Explain the decision for a program reaching a URL (or host:port) under a policy.
    Explain(Box<ExplainArgs>),
    /// Print the embedded default policy (deny all egress).
    Default,
    /// Draft policy entries that would have allowed the denied requests of an audit log.
    Suggest(SuggestArgs),
}

#[derive(Debug, Args)]
pub struct SuggestArgs {
    /// The audit log (OCSF JSON lines, as `run --audit-log` writes it); `-` is standard input.
    #[arg(long = "from", value_name = "FILE")]
    from: String,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Policy files; several are merged into one policy, as with `run --policy`.
    #[arg(required_unless_present = "providers", value_name = "FILE")]
    files: Vec<String>,
    /// Provider profiles, each composed into the policy as `_provider_<id>` (as `run
    /// --providers` does); without policy files, into the embedded deny-all default.
    #[arg(long = "providers", value_name = "FILE")]
    providers: Vec<String>,
    /// Accept what NVIDIA OpenShell's lenient loader accepts, with a warning for each.
    #[arg(long, value_enum, default_value_t = CompatArg::Strict)]
    compat: CompatArg,
    /// Treat warnings as errors (exit 1 when there are any).
    #[arg(long)]
    deny_warnings: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Policy files (merged); none = the embedded deny-all default.
    #[arg(long = "policy", value_name = "FILE")]
    policies: Vec<String>,
    /// Provider profiles, composed into the policy as `_provider_<id>` (as `run --providers`).
    #[arg(long = "providers", value_name = "FILE")]
    providers: Vec<String>,
    /// Executable of the calling program, as the kernel reports it.
    #[arg(long, value_name = "PATH", required_unless_present_any = ["batch", "tenant"])]
    binary: Option<String>,
    /// Ask as a gateway tenant of this name (`run --tenants`) instead of a program: give the
    /// tenant's own policy and provider files.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["binary", "ancestors", "batch"])]
    tenant: Option<String>,
    /// Executable of an ancestor process (repeat, nearest first).
    #[arg(long = "ancestor", value_name = "PATH")]
    ancestors: Vec<String>,
    /// An absolute path on the caller's command line (repeat): named in an L4 denial's
    /// reason, as the proxy does; it never grants anything.
    #[arg(long = "cmdline-path", value_name = "PATH", conflicts_with = "tenant")]
    cmdline_paths: Vec<String>,
    /// Request method (default GET); ignored for a host:port question.
    #[arg(long, value_name = "M")]
    method: Option<String>,
    /// The request's body (`-` reads it from stdin): a JSON-RPC, MCP or GraphQL endpoint
    /// judges it.
    #[arg(long, value_name = "BODY", conflicts_with_all = ["batch", "graphql"])]
    body: Option<String>,
    /// A GraphQL document (`-` reads it from stdin), sent as the body
    /// `{"query": DOCUMENT}` of a POST (the method unless `--method` says otherwise).
    #[arg(long, value_name = "DOCUMENT", conflicts_with = "batch")]
    graphql: Option<String>,
    /// With `--graphql`: the `operationName` to run.
    #[arg(long = "operation-name", value_name = "NAME", requires = "graphql")]
    operation_name: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Read one JSON query per line from stdin and answer each with a JSON line.
    #[arg(long, conflicts_with_all = ["binary", "url"])]
    batch: bool,
    /// How to read constructs NVIDIA OpenShell accepts but silently misreads (the README's
    /// table of differences): refuse them (strict), or accept them as OpenShell does, warning.
    #[arg(long, value_enum, default_value_t = CompatArg::Strict)]
    compat: CompatArg,
    /// `https://host[:port]/path?query` (also http, ws, wss) or `host:port` for a
    /// connection-only question.
    #[arg(value_name = "URL", required_unless_present = "batch")]
    url: Option<String>,
}

pub fn run(cmd: PolicyCommand) -> ExitCode {
    match cmd {
        PolicyCommand::Check(args) => check(&args),
        PolicyCommand::Explain(args) => explain_cmd(&args),
        PolicyCommand::Default => {
            print!("{}", policy::DEFAULT_POLICY);
            ExitCode::SUCCESS
        }
        PolicyCommand::Suggest(args) => suggest(&args),
    }
}

/// `policy suggest`: the draft on stdout; unreadable lines counted on stderr.
fn suggest(args: &SuggestArgs) -> ExitCode {
    use std::io::BufRead;
    let input: Box<dyn BufRead> = if args.from == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        match std::fs::File::open(&args.from) {
            Ok(f) => Box::new(std::io::BufReader::new(f)),
            Err(e) => {
                eprintln!("sluice policy suggest: {}: {e}", args.from);
                return ExitCode::from(1);
            }
        }
    };
    let mut draft = crate::audit::suggest::Draft::default();
    let mut malformed = 0u64;
    for line in input.split(b'\n') {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sluice policy suggest: {}: {e}", args.from);
                return ExitCode::from(1);
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match std::str::from_utf8(&line)
            .ok()
            .map(crate::audit::read::parse)
        {
            Some(Ok(record)) => draft.add(&record),
            _ => malformed += 1,
        }
    }
    if malformed > 0 {
        eprintln!("sluice policy suggest: {malformed} line(s) that are not audit events skipped");
    }
    print!("{}", draft.render(&args.from));
    ExitCode::SUCCESS
}

fn print_diagnostics(diags: &[Diagnostic]) {
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    for d in diags {
        let _ = writeln!(err, "{d}");
    }
}

/// The profiles of `--providers` as policy entries, and their warnings; on failure their
/// diagnostics are printed and the exit code returned.
fn composed(
    providers: &[String],
    compat: CompatArg,
) -> Result<(Vec<Composed>, Vec<Diagnostic>), ExitCode> {
    match profile::load_files_compat(providers, compat.into()) {
        Ok(loaded) => Ok((loaded.composed, loaded.warnings)),
        Err(e) => {
            print_diagnostics(&e.diagnostics);
            let n = e.errors().count();
            eprintln!("sluice: provider profiles: {n} error(s)");
            Err(ExitCode::from(1))
        }
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    let (composed, profile_warnings) = match composed(&args.providers, args.compat) {
        Ok((c, warnings)) => {
            print_diagnostics(&warnings);
            (c, warnings.len())
        }
        Err(code) => return code,
    };
    match policy::load_files_composed(
        &args.files,
        args.compat.into(),
        &composed,
        &crate::config_file::read_policy,
    ) {
        Err(e) => {
            print_diagnostics(&e.diagnostics);
            let n = e.errors().count();
            eprintln!("sluice: policy check failed: {n} error(s)");
            ExitCode::from(1)
        }
        Ok(loaded) => {
            print_diagnostics(&loaded.warnings);
            let p = &loaded.policy;
            let warnings = loaded.warnings.len() + profile_warnings;
            println!(
                "ok: {} file(s), {} policies, {} endpoints, {warnings} warning(s)",
                args.files.len(),
                p.entries().len(),
                p.endpoint_count()
            );
            // What each profile became: the entry `run` enforces for it.
            for c in &composed {
                if let Some(entry) = p
                    .entries()
                    .iter()
                    .find(|e| e.key.as_str() == c.entry.key.value)
                {
                    println!(
                        "provider profile `{}` ({}) -> policy `{}`: {} endpoint(s), {} binary path(s)",
                        c.profile,
                        entry.location,
                        entry.key.as_str(),
                        entry.endpoints.len(),
                        entry.binaries.len()
                    );
                }
            }
            if args.deny_warnings && warnings > 0 {
                eprintln!("sluice: --deny-warnings: {warnings} warning(s)");
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}

fn load(
    policies: &[String],
    compat: CompatArg,
    composed: &[Composed],
) -> Result<Loaded, LoadError> {
    policy::load_files_composed(
        policies,
        compat.into(),
        composed,
        &crate::config_file::read_policy,
    )
}

fn explain_cmd(args: &ExplainArgs) -> ExitCode {
    let (composed, profile_warnings) = match composed(&args.providers, args.compat) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let loaded = match load(&args.policies, args.compat, &composed) {
        Ok(l) => l,
        Err(e) => {
            print_diagnostics(&e.diagnostics);
            eprintln!(
                "sluice: cannot load the policy: {} error(s)",
                e.errors().count()
            );
            return ExitCode::from(1);
        }
    };
    // Only a count: `policy check` lists them, and stdout stays one answer per question.
    let warnings = loaded.warnings.len() + profile_warnings.len();
    if warnings > 0 {
        eprintln!(
            "sluice: the policy loaded with {warnings} warning(s); `sluice policy check` lists them"
        );
    }
    if args.batch {
        return batch(&loaded);
    }
    let Some(url) = &args.url else {
        eprintln!("sluice: URL is required without --batch");
        return ExitCode::from(2);
    };
    let binary = match (&args.binary, &args.tenant) {
        (Some(b), _) => b,
        (None, Some(_)) => "",
        (None, None) => {
            eprintln!("sluice: --binary (or --tenant) is required without --batch");
            return ExitCode::from(2);
        }
    };
    if args.tenant.is_none() && !binary.starts_with('/') {
        // Policies match the executable the kernel reports: an absolute path, symlinks
        // resolved. A bare name matches nothing; say which path was meant.
        let hint = match absolute_binary(binary) {
            Some(p) => format!("did you mean --binary {p}?"),
            None => format!("give the absolute path (`readlink -f \"$(command -v {binary})\"`)"),
        };
        eprintln!(
            "sluice: --binary `{binary}` is not an absolute path: policies match the executable the kernel reports (absolute, symlinks resolved); {hint}"
        );
        return ExitCode::from(2);
    }
    let target = match parse_url(url) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice: {url}: {e}");
            return ExitCode::from(2);
        }
    };
    let stdin_text = |text: &str| -> std::io::Result<String> {
        if text == "-" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            Ok(s)
        } else {
            Ok(text.to_string())
        }
    };
    let body = match (&args.body, &args.graphql) {
        (Some(b), _) => Some(stdin_text(b)),
        (None, Some(doc)) => Some(stdin_text(doc).map(|d| {
            let mut envelope = serde_json::json!({ "query": d });
            if let Some(n) = &args.operation_name {
                envelope["operationName"] = serde_json::json!(n);
            }
            envelope.to_string()
        })),
        (None, None) => None,
    };
    let body = match body.transpose() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("sluice: cannot read the body from stdin: {e}");
            return ExitCode::from(2);
        }
    };
    let default_method = if args.graphql.is_some() {
        "POST"
    } else {
        "GET"
    };
    let question = Question {
        binary: binary.to_string(),
        ancestors: args.ancestors.clone(),
        cmdline_paths: args.cmdline_paths.clone(),
        tenant: args.tenant.clone(),
        host: target.host,
        port: target.port,
        request: target.target.map(|t| QuestionRequest {
            method: args
                .method
                .clone()
                .unwrap_or_else(|| default_method.to_string()),
            target: t,
            websocket_upgrade: target.websocket,
            body: body.map(String::into_bytes),
            ..Default::default()
        }),
    };
    let answer = explain::explain(&loaded.policy, &question);
    if args.json {
        println!("{}", serde_json::to_string(&answer).unwrap_or_default());
    } else {
        print!("{}", explain::render_text(&answer));
    }
    ExitCode::SUCCESS
}

/// The absolute, symlink-resolved path of a program name found on `PATH` (what the kernel
/// reports as the executable, and what `policy check` accepts in `binaries`).
fn absolute_binary(name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .and_then(|found| std::fs::canonicalize(found).ok())
        .map(|p| p.display().to_string())
}

/// One `--batch` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchQuery {
    binary: String,
    #[serde(default)]
    ancestors: Vec<String>,
    /// The absolute paths on the caller's command line (the conformance corpus's field).
    #[serde(default)]
    cmdline_paths: Vec<String>,
    host: String,
    port: u16,
    #[serde(default)]
    method: Option<String>,
    /// Raw request target with its query, or null for a connection-only question.
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    websocket: bool,
    /// The request body (the protocol corpus's field; JSON-RPC and MCP judge it).
    #[serde(default)]
    body: Option<String>,
    /// Extra header lines, `[name, value]`.
    #[serde(default)]
    headers: Vec<(String, String)>,
    /// A WebSocket text message sent after the upgrade.
    #[serde(default)]
    ws_text: Option<String>,
    /// The protocol corpus's decoded GraphQL query parameters: informational (the target
    /// carries them).
    #[serde(default, rename = "graphql_get")]
    _graphql_get: Option<serde_json::Value>,
}

fn batch(loaded: &Loaded) -> ExitCode {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let failed = match answer_batch(loaded, stdin.lock(), &mut out) {
        Ok(failed) => failed,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(1);
        }
    };
    if failed > 0 {
        eprintln!("sluice: {failed} malformed query line(s)");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Answers each query line of `input` with one JSON line on `out`; a line that is not UTF-8
/// or not a valid query gets an error line and the batch goes on. Returns how many lines
/// failed; an I/O error on either side ends the batch.
fn answer_batch(
    loaded: &Loaded,
    mut input: impl BufRead,
    mut out: impl Write,
) -> std::io::Result<usize> {
    let mut failed = 0usize;
    let mut raw = Vec::new();
    let mut n = 0usize;
    loop {
        raw.clear();
        if input.read_until(b'\n', &mut raw)? == 0 {
            break;
        }
        n += 1;
        let answer = match std::str::from_utf8(&raw) {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => answer_query(loaded, line),
            Err(e) => Err(format!("line is not UTF-8: {e}")),
        };
        let answer = answer.unwrap_or_else(|error| {
            failed += 1;
            serde_json::json!({"line": n, "error": error}).to_string()
        });
        writeln!(out, "{answer}")?;
    }
    out.flush()?;
    Ok(failed)
}

/// The JSON answer to one query line, or why the line is not a query.
fn answer_query(loaded: &Loaded, line: &str) -> Result<String, String> {
    let q = serde_json::from_str::<BatchQuery>(line).map_err(|e| format!("invalid query: {e}"))?;
    let question = Question {
        binary: q.binary,
        ancestors: q.ancestors,
        cmdline_paths: q.cmdline_paths,
        tenant: None,
        host: q.host,
        port: q.port,
        request: q.path.map(|p| QuestionRequest {
            method: q.method.unwrap_or_else(|| "GET".to_string()),
            target: p,
            websocket_upgrade: q.websocket || q.ws_text.is_some(),
            body: q.body.map(String::into_bytes),
            headers: q.headers,
            ws_text: q.ws_text,
        }),
    };
    serde_json::to_string(&explain::explain(&loaded.policy, &question))
        .map_err(|e| format!("cannot encode the answer: {e}"))
}

#[derive(Debug, PartialEq, Eq)]
struct UrlTarget {
    host: String,
    port: u16,
    /// Path and query; `None` for a connection-only `host:port`.
    target: Option<String>,
    websocket: bool,
}

/// `scheme://host[:port][/path][?query]` or `host:port`.
fn parse_url(url: &str) -> Result<UrlTarget, String> {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
        None => (None, url),
    };
    let (default_port, websocket) = match scheme.as_deref() {
        None => (None, false),
        Some("https") => (Some(443), false),
        Some("http") => (Some(80), false),
        Some("wss") => (Some(443), true),
        Some("ws") => (Some(80), true),
        Some(other) => {
            return Err(format!(
                "unsupported scheme `{other}` (use https, http, wss, ws, or host:port)"
            ));
        }
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(split);
    if authority.contains('@') {
        return Err("user information in the URL is not supported".to_string());
    }
    let authority =
        sluice_addr::Authority::parse(authority, default_port).map_err(|e| match e {
            AuthorityError::InvalidPort(p) => format!("invalid port `{p}`"),
            AuthorityError::NoPort => "a port is required (host:port) without a scheme".to_string(),
            AuthorityError::EmptyHost => "the host is empty".to_string(),
            _ => "malformed host: an unclosed `[`, or something other than `:port` after `]`"
                .to_string(),
        })?;
    let (host, port) = (authority.host().to_string(), authority.port());
    let target = match scheme {
        None if !target.is_empty() => {
            return Err("a path needs a scheme (https://host/path)".to_string());
        }
        None => None,
        Some(_) if target.is_empty() => Some("/".to_string()),
        Some(_) => Some(target.to_string()),
    };
    Ok(UrlTarget {
        host,
        port,
        target,
        websocket,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("https://api.github.com/repos/x?per_page=1").unwrap(),
            UrlTarget {
                host: "api.github.com".into(),
                port: 443,
                target: Some("/repos/x?per_page=1".into()),
                websocket: false
            }
        );
        assert_eq!(
            parse_url("http://h:8080").unwrap().target.as_deref(),
            Some("/")
        );
        assert_eq!(parse_url("http://h:8080").unwrap().port, 8080);
        assert!(parse_url("wss://h/ws").unwrap().websocket);
        let v6 = parse_url("https://[::1]:8443/x").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 8443));
        assert_eq!(parse_url("example.com:443").unwrap().target, None);
        assert!(parse_url("example.com").is_err());
        assert!(parse_url("ftp://x/").is_err());
        assert!(parse_url("https://x:99999/").is_err());
        assert!(parse_url("https://u@x/").is_err());
    }
}
