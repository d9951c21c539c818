//! The compressed and archive formats a response body may be in, told from its first bytes.
//!
//! The scrubber can only put a placeholder back where it sees the secret; a body in a format
//! the client unpacks (whatever its headers say) would carry the secret past it. [`sniff`]
//! names the format from the body's first bytes, or says it needs more of them; the scrubber
//! (`scrub.rs`) refuses a body that is one (`credential_response_encoded`). Owns only the
//! recognition: each format's magic number, and zlib's header arithmetic (RFC 1950 has no
//! magic number). Brotli and raw deflate have neither and cannot be told from other bytes.

/// What the first bytes of a body are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sniff {
    /// A compressed or archive format, by name.
    Compressed(&'static str),
    /// None of them.
    Plain,
    /// A prefix of at least one of them: read on (up to [`MAX`] bytes).
    NeedMore,
}

/// The most bytes [`sniff`] ever needs.
pub(super) const MAX: usize = 9;

/// Magic numbers, each a byte string the format always starts with (file formats' own
/// specifications; `file(1)`'s magic database agrees).
const MAGIC: &[(&[u8], &str)] = &[
    (&[0x1f, 0x8b], "gzip"),
    // Unix `compress` (.Z, LZW).
    (&[0x1f, 0x9d], "compress"),
    (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
    (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "xz"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
    // LZ4 frame format, and the legacy frame of `lz4 -l`.
    (&[0x04, 0x22, 0x4d, 0x18], "lz4"),
    (&[0x02, 0x21, 0x4c, 0x18], "lz4"),
    // bzip2: `BZh` and the block size, 1 to 9 (each listed below).
    (b"BZh1", "bzip2"),
    (b"BZh2", "bzip2"),
    (b"BZh3", "bzip2"),
    (b"BZh4", "bzip2"),
    (b"BZh5", "bzip2"),
    (b"BZh6", "bzip2"),
    (b"BZh7", "bzip2"),
    (b"BZh8", "bzip2"),
    (b"BZh9", "bzip2"),
    // Every zip record an archive can start with: a local file, the central directory, the
    // end of an empty archive, zip64's, and a spanned archive's markers.
    (b"PK\x03\x04", "zip"),
    (b"PK\x01\x02", "zip"),
    (b"PK\x05\x06", "zip"),
    (b"PK\x06\x06", "zip"),
    (b"PK\x06\x07", "zip"),
    (b"PK\x07\x08", "zip"),
    (b"PK00", "zip"),
    (b"LZIP\x01", "lzip"),
    (b"\x89LZO\x00\r\n\x1a\n", "lzop"),
    (b"Rar!\x1a\x07", "rar"),
    (b"MSCF\x00\x00\x00\x00", "cab"),
];

/// Which format `start` (a body's first bytes, at most [`MAX`] of them) is in.
pub(super) fn sniff(start: &[u8]) -> Sniff {
    let mut more = false;
    for (magic, name) in MAGIC {
        // Byte by byte rather than `starts_with` both ways: this runs for every response
        // scrubbed, and two `memcmp` calls per format cost more than the few bytes compared
        // (most formats are ruled out at the first byte).
        if !start.iter().zip(magic.iter()).all(|(a, b)| a == b) {
            continue;
        }
        if start.len() >= magic.len() {
            return Sniff::Compressed(name);
        }
        more = true;
    }
    for check in [zlib, lzma_alone, skippable_frame] {
        match check(start) {
            Sniff::Plain => {}
            Sniff::NeedMore => more = true,
            found @ Sniff::Compressed(_) => return found,
        }
    }
    if more && start.len() < MAX {
        Sniff::NeedMore
    } else {
        Sniff::Plain
    }
}

/// zlib (RFC 1950 §2.2): CM 8 (deflate), CINFO at most 7 (window 256 B to 32 KiB), and the
/// header a multiple of 31 (FCHECK), at any level and window: `78 01`, `78 5e`, `78 9c`,
/// `78 da`, `68 81`, `08 1d`, ... Two text bytes pass that arithmetic one time in 31 (`80`,
/// `xn`), so the first deflate block header must be valid too (RFC 1951 §3.2.3: BTYPE 11 is
/// an error), and a stored block's LEN and NLEN must be complements (§3.2.4).
fn zlib(start: &[u8]) -> Sniff {
    let Some(&cmf) = start.first() else {
        return Sniff::NeedMore;
    };
    if cmf & 0x0f != 8 || cmf >> 4 > 7 {
        return Sniff::Plain;
    }
    let Some(&flg) = start.get(1) else {
        return Sniff::NeedMore;
    };
    if (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
        return Sniff::Plain;
    }
    // With a preset dictionary (FDICT) four bytes of its id come first. That bit is set in
    // a third of the headers two text characters make (`80` is one), so such a header counts
    // only with a byte no text has among the first ones (a real dictionary id and deflate
    // data hold several).
    let block = if flg & 0x20 != 0 {
        let window = &start[..start.len().min(MAX)];
        if window.len() < MAX {
            return Sniff::NeedMore;
        }
        if window
            .iter()
            .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
        {
            return Sniff::Plain;
        }
        6
    } else {
        2
    };
    let Some(&header) = start.get(block) else {
        return Sniff::NeedMore;
    };
    match (header >> 1) & 0b11 {
        0b11 => Sniff::Plain,
        0b00 => match start.get(block + 1..block + 5) {
            Some(&[l0, l1, n0, n1]) if l0 == !n0 && l1 == !n1 => Sniff::Compressed("zlib"),
            Some(_) => Sniff::Plain,
            None => Sniff::NeedMore,
        },
        _ => Sniff::Compressed("zlib"),
    }
}

/// LZMA-alone (`.lzma`, `lzma_alone` in xz-utils): the properties byte every encoder writes by
/// default (`0x5d`: lc 3, lp 0, pb 2), then the dictionary size, which xz-utils writes as
/// 2^n or 2^n + 2^(n-1) (little-endian).
fn lzma_alone(start: &[u8]) -> Sniff {
    match start {
        [] => Sniff::NeedMore,
        [props, ..] if *props != 0x5d => Sniff::Plain,
        [_, d0, d1, d2, d3, ..] => {
            let dict = u32::from_le_bytes([*d0, *d1, *d2, *d3]);
            let power = dict.is_power_of_two();
            let three_halves = dict.count_ones() == 2 && (dict >> dict.trailing_zeros()) == 0b11;
            if dict >= 4096 && (power || three_halves) {
                Sniff::Compressed("lzma")
            } else {
                Sniff::Plain
            }
        }
        _ => Sniff::NeedMore,
    }
}

/// A skippable frame of zstd or LZ4 (magic `0x184D2A50` to `0x184D2A5F`, little-endian),
/// which a decoder skips to reach the compressed frame after it.
fn skippable_frame(start: &[u8]) -> Sniff {
    const TAIL: [u8; 3] = [0x2a, 0x4d, 0x18];
    match start {
        [] => Sniff::NeedMore,
        [first, ..] if first & 0xf0 != 0x50 => Sniff::Plain,
        [_, rest @ ..] if rest.len() >= 3 => {
            if rest[..3] == TAIL {
                Sniff::Compressed("zstd/lz4 skippable frame")
            } else {
                Sniff::Plain
            }
        }
        [_, rest @ ..] if TAIL.starts_with(rest) => Sniff::NeedMore,
        _ => Sniff::Plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_is_named_from_its_first_bytes() {
        for (start, name) in [
            (&b"\x1f\x8b\x08\x00"[..], "gzip"),
            (b"\x1f\x9d\x90", "compress"),
            (b"\x28\xb5\x2f\xfd\x04", "zstd"),
            (b"\xfd7zXZ\x00\x00", "xz"),
            (b"7z\xbc\xaf\x27\x1c\x00\x04", "7z"),
            (b"\x04\x22\x4d\x18\x64", "lz4"),
            (b"\x02\x21\x4c\x18", "lz4"),
            (b"BZh91AY&SY", "bzip2"),
            (b"PK\x05\x06\x00\x00", "zip"),
            (b"PK\x07\x08PK\x03\x04", "zip"),
            (b"PK\x01\x02", "zip"),
            (b"LZIP\x01\x0c", "lzip"),
            (b"\x89LZO\x00\r\n\x1a\n", "lzop"),
            (b"Rar!\x1a\x07\x01\x00", "rar"),
            (b"MSCF\x00\x00\x00\x00\x10", "cab"),
            // LZMA-alone with an 8 MiB and a 3 MiB dictionary.
            (b"\x5d\x00\x00\x80\x00\xff", "lzma"),
            (b"\x5d\x00\x00\x30\x00\xff", "lzma"),
            (b"\x50\x2a\x4d\x18\x04\x00", "zstd/lz4 skippable frame"),
            (b"\x5f\x2a\x4d\x18", "zstd/lz4 skippable frame"),
        ] {
            assert_eq!(sniff(start), Sniff::Compressed(name), "{start:x?}");
        }
    }

    /// Real zlib streams from flate2 at every level, with every window size a zlib header
    /// can name (the finding: levels 2-5 write `78 5e`, which was not recognised).
    #[test]
    fn zlib_is_recognised_at_every_level_and_window() {
        use std::io::Write as _;
        for level in 0..=9 {
            let mut z =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
            z.write_all(b"secret-value-secret-value").unwrap();
            let out = z.finish().unwrap();
            assert_eq!(
                sniff(&out[..MAX.min(out.len())]),
                Sniff::Compressed("zlib"),
                "level {level}: {:x?}",
                &out[..4]
            );
        }
        // With a preset dictionary (its id, then a fixed-Huffman block).
        let start = [0x78, 0xbb, 0x12, 0x34, 0x56, 0x78, 0x4b, 0x4c, 0x4a];
        assert_eq!(sniff(&start), Sniff::Compressed("zlib"));
        for cinfo in 0u8..=7 {
            let cmf = cinfo << 4 | 8;
            for flevel in 0u8..4 {
                let base = u16::from(cmf) << 8 | u16::from(flevel << 6);
                let fcheck = (31 - base % 31) % 31;
                let flg = flevel << 6 | u8::try_from(fcheck).unwrap();
                // A fixed-Huffman first block, as deflate writes short data.
                let start = [cmf, flg, 0x4b, 0x4c, 0x4a];
                assert_eq!(sniff(&start), Sniff::Compressed("zlib"), "{start:x?}");
            }
        }
    }

    #[test]
    fn text_and_other_bodies_are_plain_and_decided_early() {
        for text in [
            &b"{\"a\": 1}"[..],
            b"<html>",
            b"800 items",
            b"xn--",
            b"Hello",
            b"BZh0",
            b"PKG list",
            b"]",
            b"P",
            b"\x1f",
        ] {
            let got = sniff(text);
            assert!(
                got != Sniff::Compressed("zlib") && !matches!(got, Sniff::Compressed(_)),
                "{text:x?}: {got:?}"
            );
        }
        // Decided from the first byte when no format starts with it.
        assert_eq!(sniff(b"{"), Sniff::Plain);
        assert_eq!(sniff(b"<"), Sniff::Plain);
        assert_eq!(sniff(b"x"), Sniff::NeedMore);
        assert_eq!(sniff(b""), Sniff::NeedMore);
    }
}
