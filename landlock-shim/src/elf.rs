//! Finding the program interpreter of an executable: ELF `PT_INTERP` and `#!` lines.
//!
//! Owns the byte-level parsing (pure, unit-tested) and a small reader over a file. Does not
//! decide whether the interpreter gets a Landlock grant; `exec` and `landlock` do.
//! Without `Execute` on the ELF interpreter, execve of every dynamic binary fails with EACCES
//! (spec §1.5); shared libraries only need `ReadFile` because ld.so maps them itself.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const PT_INTERP: u32 = 3;
/// Longest interpreter path accepted (PATH_MAX).
const MAX_INTERP: u64 = 4096;
/// More program headers than any real binary has; bounds the read.
const MAX_PHNUM: u64 = 512;

/// The shape of an ELF file's program header table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhdrTable {
    /// 64-bit (else 32-bit) class.
    pub is_64: bool,
    /// Little endian (else big).
    pub little: bool,
    /// File offset of the table.
    pub offset: u64,
    /// Size of one entry.
    pub entry_size: u64,
    /// Number of entries.
    pub count: u64,
}

/// Parses the ELF identification and header; `None` if `head` is not an ELF file.
pub fn parse_header(head: &[u8]) -> Option<PhdrTable> {
    if head.len() < 52 || head[..4] != *b"\x7fELF" {
        return None;
    }
    let is_64 = match head[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match head[5] {
        1 => true,
        2 => false,
        _ => return None,
    };
    let rd = Reader { little };
    let (offset, entry_size, count) = if is_64 {
        if head.len() < 64 {
            return None;
        }
        (
            rd.u64(&head[32..40]),
            rd.u16(&head[54..56]),
            rd.u16(&head[56..58]),
        )
    } else {
        (
            u64::from(rd.u32(&head[28..32])),
            rd.u16(&head[42..44]),
            rd.u16(&head[44..46]),
        )
    };
    Some(PhdrTable {
        is_64,
        little,
        offset,
        entry_size,
        count,
    })
}

/// Finds `PT_INTERP` in the program header table bytes: (file offset, size) of the path.
pub fn find_interp(table: &PhdrTable, phdrs: &[u8]) -> Option<(u64, u64)> {
    let rd = Reader {
        little: table.little,
    };
    let size = usize::try_from(table.entry_size).ok()?;
    let min = if table.is_64 { 56 } else { 32 };
    if size < min {
        return None;
    }
    phdrs.chunks_exact(size).find_map(|ph| {
        if rd.u32(&ph[0..4]) != PT_INTERP {
            return None;
        }
        Some(if table.is_64 {
            (rd.u64(&ph[8..16]), rd.u64(&ph[32..40]))
        } else {
            (u64::from(rd.u32(&ph[4..8])), u64::from(rd.u32(&ph[16..20])))
        })
    })
}

/// The interpreter path from `PT_INTERP` bytes (NUL-terminated).
pub fn interp_path(bytes: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let path = std::ffi::OsStr::from_bytes(&bytes[..end]);
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// The interpreter named by a `#!` line, if `head` starts with one.
pub fn shebang(head: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let rest = head.strip_prefix(b"#!")?;
    let line_end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    let line = &rest[..line_end];
    let start = line.iter().position(|b| !b.is_ascii_whitespace())?;
    let word = &line[start..];
    let end = word
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(word.len());
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(&word[..end])))
}

#[derive(Clone, Copy)]
struct Reader {
    little: bool,
}

impl Reader {
    fn u16(self, b: &[u8]) -> u64 {
        let a = [b[0], b[1]];
        u64::from(if self.little {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        })
    }

    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }

    fn u64(self, b: &[u8]) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        if self.little {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }
}

/// What starts an executable file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interpreter {
    /// A dynamic ELF file: its `PT_INTERP`.
    Elf(PathBuf),
    /// A script: the `#!` interpreter.
    Script(PathBuf),
    /// A static ELF file or something the kernel will refuse.
    None,
}

/// Reads the interpreter of `file`.
pub fn read_interpreter(file: &File) -> io::Result<Interpreter> {
    let mut head = [0u8; 256];
    let n = read_some_at(file, &mut head, 0)?;
    let head = &head[..n];
    if let Some(path) = shebang(head) {
        return Ok(Interpreter::Script(path));
    }
    let Some(table) = parse_header(head) else {
        return Ok(Interpreter::None);
    };
    if table.count == 0 || table.count > MAX_PHNUM {
        return Ok(Interpreter::None);
    }
    let mut phdrs = vec![0u8; usize::try_from(table.entry_size * table.count).unwrap_or(0)];
    file.read_exact_at(&mut phdrs, table.offset)?;
    let Some((offset, size)) = find_interp(&table, &phdrs) else {
        return Ok(Interpreter::None);
    };
    if size == 0 || size > MAX_INTERP {
        return Ok(Interpreter::None);
    }
    let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(0)];
    file.read_exact_at(&mut bytes, offset)?;
    Ok(interp_path(&bytes).map_or(Interpreter::None, Interpreter::Elf))
}

fn read_some_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn shebang_lines() {
        assert_eq!(shebang(b"#!/bin/sh\necho"), Some("/bin/sh".into()));
        assert_eq!(
            shebang(b"#! /usr/bin/env python3 -u\n"),
            Some("/usr/bin/env".into())
        );
        assert_eq!(shebang(b"#!\n"), None);
        assert_eq!(shebang(b"\x7fELF"), None);
    }

    #[test]
    fn synthetic_elf64_little_endian() {
        let mut f = vec![0u8; 0x200];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[5] = 1;
        f[32..40].copy_from_slice(&64u64.to_le_bytes());
        f[54..56].copy_from_slice(&56u16.to_le_bytes());
        f[56..58].copy_from_slice(&2u16.to_le_bytes());
        // phdr 0: PT_LOAD; phdr 1: PT_INTERP at 0x100, 11 bytes.
        f[64..68].copy_from_slice(&1u32.to_le_bytes());
        let p1 = 64 + 56;
        f[p1..p1 + 4].copy_from_slice(&PT_INTERP.to_le_bytes());
        f[p1 + 8..p1 + 16].copy_from_slice(&0x100u64.to_le_bytes());
        f[p1 + 32..p1 + 40].copy_from_slice(&11u64.to_le_bytes());
        f[0x100..0x10b].copy_from_slice(b"/lib/ld.so\0");

        let table = parse_header(&f).unwrap();
        assert_eq!(table.count, 2);
        let phdrs = &f[64..64 + 112];
        let (off, size) = find_interp(&table, phdrs).unwrap();
        let path = interp_path(&f[off as usize..(off + size) as usize]).unwrap();
        assert_eq!(path, Path::new("/lib/ld.so"));
    }

    #[test]
    fn not_elf() {
        assert_eq!(parse_header(b"hello"), None);
        assert_eq!(parse_header(&[0u8; 64]), None);
    }

    #[test]
    fn real_binaries_on_this_host() {
        // A dynamic system binary has an interpreter; the test binary itself is dynamic too.
        let exe = std::env::current_exe().unwrap();
        let file = File::open(exe).unwrap();
        match read_interpreter(&file).unwrap() {
            Interpreter::Elf(path) => assert!(path.is_absolute(), "{path:?}"),
            other => panic!("expected a dynamic ELF, got {other:?}"),
        }
    }
}
