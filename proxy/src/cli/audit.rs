//! `sluice audit [FILE|-]`: reads an OCSF JSON-lines audit log and prints it as readable
//! lines (filtered), or a summary table; `--follow` keeps reading what is appended, across
//! rotation (the path renamed away and created again) and truncation. A line that is not an
//! audit event is counted and reported on stderr, never fatal.

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};

use crate::audit::read;
use crate::audit::report::{self, Colour, Filter, Summary};

/// How often `--follow` looks for appended lines and for rotation.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Lines longer than this are reported as malformed (sluice writes far shorter ones).
const MAX_LINE: usize = 1 << 20;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    /// When standard output is a terminal and NO_COLOR is unset.
    #[default]
    Auto,
    Always,
    Never,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The audit log (OCSF JSON lines, as `--audit-log` writes it); `-` is standard input.
    #[arg(value_name = "FILE|-", default_value = "-")]
    pub file: String,
    /// Only refusals.
    #[arg(long)]
    pub denied: bool,
    /// Only this caller: an executable path, or a file name such as `curl`.
    #[arg(long, value_name = "P")]
    pub binary: Option<String>,
    /// Only this destination host (`*.example.com` for its subdomains; an IPv6 address with or
    /// without brackets).
    #[arg(long, value_name = "H")]
    pub host: Option<String>,
    /// Only decisions of this policy entry.
    #[arg(long, value_name = "E")]
    pub policy: Option<String>,
    /// Only events from this time on: RFC 3339 (2026-12-01T09:30:00Z) or a duration back from
    /// now (30s, 10m, 2h, 7d).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Instead of lines: counts per decision, the top denied hosts and binaries.
    #[arg(long, conflicts_with = "follow")]
    pub summary: bool,
    /// Keep reading what is appended (like tail -f), across log rotation.
    #[arg(long)]
    pub follow: bool,
    /// Colour the decisions.
    #[arg(long, value_enum, default_value_t = ColorArg::Auto)]
    pub color: ColorArg,
}

/// What reading has seen so far.
struct Reader {
    filter: Filter,
    colour: Colour,
    summary: Option<Summary>,
    malformed: u64,
    first_malformed: Option<String>,
    line_no: u64,
}

impl Reader {
    fn take(&mut self, raw: &[u8], out: &mut impl Write) -> io::Result<()> {
        self.line_no += 1;
        let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let parsed = if raw.len() > MAX_LINE {
            Err(format!("longer than {MAX_LINE} bytes"))
        } else {
            std::str::from_utf8(raw)
                .map_err(|_| "not UTF-8".to_string())
                .and_then(|s| read::parse(s).map_err(|e| e.to_string()))
        };
        let record = match parsed {
            Ok(r) => r,
            Err(e) => {
                self.malformed += 1;
                if self.first_malformed.is_none() {
                    self.first_malformed = Some(format!("line {}: {e}", self.line_no));
                }
                return Ok(());
            }
        };
        if !self.filter.matches(&record) {
            return Ok(());
        }
        match &mut self.summary {
            Some(s) => s.add(&record),
            None => writeln!(out, "{}", report::line(&record, self.colour))?,
        }
        Ok(())
    }
}

pub fn run(args: AuditArgs) -> ExitCode {
    let since_ms = match args
        .since
        .as_deref()
        .map(|s| report::parse_since(s, SystemTime::now()))
    {
        None => None,
        Some(Ok(ms)) => Some(ms),
        Some(Err(e)) => {
            eprintln!("sluice audit: --since: {e}");
            return ExitCode::from(2);
        }
    };
    let colour = match args.color {
        ColorArg::Always => Colour::On,
        ColorArg::Never => Colour::Off,
        ColorArg::Auto if io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() => {
            Colour::On
        }
        ColorArg::Auto => Colour::Off,
    };
    let mut reader = Reader {
        filter: Filter {
            denied: args.denied,
            binary: args.binary,
            host: args.host,
            policy: args.policy,
            since_ms,
        },
        colour,
        summary: args.summary.then(Summary::default),
        malformed: 0,
        first_malformed: None,
        line_no: 0,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let result = if args.file == "-" {
        read_all(
            &mut BufReader::new(io::stdin().lock()),
            &mut reader,
            &mut out,
        )
    } else if args.follow {
        follow(Path::new(&args.file), &mut reader, &mut out)
    } else {
        File::open(&args.file).and_then(|f| read_all(&mut BufReader::new(f), &mut reader, &mut out))
    };
    if let Some(summary) = &reader.summary {
        let _ = write!(out, "{}", summary.render());
        if reader.malformed > 0 {
            let _ = writeln!(out, "\nmalformed lines: {}", reader.malformed);
        }
    }
    let _ = out.flush();
    if let Some(first) = &reader.first_malformed {
        eprintln!(
            "sluice audit: {} malformed line(s) skipped (first: {first})",
            reader.malformed
        );
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice audit: {}: {e}", args.file);
            ExitCode::from(1)
        }
    }
}

fn read_all(input: &mut impl BufRead, reader: &mut Reader, out: &mut impl Write) -> io::Result<()> {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        reader.take(&buf, out)?;
    }
}

/// Prints what is in `path`, then what is appended, until killed. When the path is renamed
/// away and created again (rotation), the rest of the old file is read, then the new one from
/// its start; when the file shrinks (truncation), it is read again from its start.
fn follow(path: &Path, reader: &mut Reader, out: &mut impl Write) -> io::Result<()> {
    let mut file = File::open(path)?;
    let mut inode = file.metadata()?.ino();
    let mut offset: u64 = 0;
    let mut partial: Vec<u8> = Vec::new();
    let mut chunk = Vec::new();
    loop {
        chunk.clear();
        let n = file.read_to_end(&mut chunk)?;
        offset += n as u64;
        partial.extend_from_slice(&chunk);
        while let Some(end) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            reader.take(&line, out)?;
        }
        if partial.len() > MAX_LINE {
            let line = std::mem::take(&mut partial);
            reader.take(&line, out)?;
        }
        out.flush()?;
        match std::fs::metadata(path) {
            Ok(m) if m.ino() != inode => {
                // Rotated: the old file is read to its end above; go on with the new one.
                if let Ok(f) = File::open(path) {
                    if !partial.is_empty() {
                        let line = std::mem::take(&mut partial);
                        reader.take(&line, out)?;
                    }
                    inode = f.metadata()?.ino();
                    file = f;
                    offset = 0;
                    continue;
                }
            }
            Ok(m) if m.len() < offset => {
                file = File::open(path)?;
                offset = 0;
                partial.clear();
                continue;
            }
            _ => {}
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}
