//! How a secret's spellings are found in text: the tables that say where one may begin
//! (`Tables`: the bytes that begin a secret, found with `memchr3` while there are at most
//! three, else a table; the byte pairs that may begin one, hashed), and what one secret byte
//! matches (`match_at`: each byte itself or an escape an encoder may have written for it).
//! `ScrubSet` (the parent module) builds the tables and walks text with them.

/// What finds where a secret's spelling may begin.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Tables {
    /// Which bytes begin a secret (in any spelling `match_at` knows).
    pub(super) first: [bool; 256],
    /// The bytes marked in `first`, while there are at most three (the common case: one
    /// secret, or several with one first byte, plus the backslash and `%` that begin escaped
    /// spellings): `memchr3` then finds the next.
    pub(super) few: Few,
    /// Which two bytes may begin a secret, hashed ([`Starts`]): a byte of the text is tried
    /// only when it and the next are marked.
    pub(super) starts: Starts,
}

/// Groups of three bytes [`Few`] holds at most (one `memchr3` each). One: with more, as
/// for the audit redactor's base64 spellings, candidates come often enough in text that a
/// search per group per candidate costs more than the table (measured under callgrind).
pub(super) const FEW_GROUPS: usize = 1;

/// The distinct bytes that may begin a secret's spelling, in the order added, while there
/// are at most `3 * FEW_GROUPS`; once there are more, `len` is one past that and the table
/// is used instead.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Few {
    bytes: [u8; 3 * FEW_GROUPS],
    len: usize,
}

impl Few {
    /// Adds `b` (not yet in the set).
    pub(super) fn add(&mut self, b: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b;
        }
        self.len = (self.len + 1).min(self.bytes.len() + 1);
    }

    /// The number of groups to search, or `None`: too many bytes (use the table).
    pub(super) fn groups(&self) -> Option<usize> {
        (self.len <= self.bytes.len()).then(|| self.len.div_ceil(3))
    }

    /// Where a byte of group `g` first occurs in `hay`.
    pub(super) fn find(&self, g: usize, hay: &[u8]) -> Option<usize> {
        match *self.bytes.get(3 * g..(3 * g + 3).min(self.len))? {
            [a] => memchr::memchr(a, hay),
            [a, b] => memchr::memchr2(a, b, hay),
            [a, b, c] => memchr::memchr3(a, b, c, hay),
            _ => None,
        }
    }
}

/// Where each group of [`Few`] bytes occurs next in one text up to one stop, so that
/// looking for candidate after candidate reads each byte once per group. Valid for one text
/// and stop, with `from` never going back.
#[derive(Default)]
pub(super) struct Cursor {
    /// Per group: `None` not looked for (or passed), `Some(None)` no more before the stop.
    next: [Option<Option<usize>>; FEW_GROUPS],
    /// Where the scan began, and the candidates found since.
    start: Option<usize>,
    found: usize,
    /// Candidates come so close together that the table is cheaper for the rest.
    pub(super) dense: bool,
}

/// A set of byte pairs, hashed into 4,096 bits: never says no to a pair that was added; a
/// pair never added may collide with one that was (then the full test runs).
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Starts([u64; 64]);

impl Default for Starts {
    fn default() -> Self {
        Starts([0; 64])
    }
}

impl Starts {
    pub(super) fn bit(x: u8, y: u8) -> (usize, u64) {
        let h = (usize::from(x) * 61 + usize::from(y)) & 4095;
        (h >> 6, 1 << (h & 63))
    }

    pub(super) fn add(&mut self, x: u8, y: u8) {
        let (word, bit) = Starts::bit(x, y);
        self.0[word] |= bit;
    }

    pub(super) fn has(&self, x: u8, y: u8) -> bool {
        let (word, bit) = Starts::bit(x, y);
        self.0[word] & bit != 0
    }

    /// Every pair of bytes a spelling of `secret` (not empty) can begin with.
    pub(super) fn add_secret(&mut self, secret: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let s0 = secret[0];
        // The byte itself: then the first byte of the next one's spelling, or, for a secret
        // of one byte, anything.
        match secret.get(1) {
            Some(&s1) => {
                for y in [s1, b'\\', b'%'] {
                    self.add(s0, y);
                }
                if !entities(s1).is_empty() {
                    self.add(s0, b'&');
                }
            }
            None => {
                for y in 0..=u8::MAX {
                    self.add(s0, y);
                }
            }
        }
        // `%XX`, the hex digits in either case.
        let high = HEX[usize::from(s0 >> 4)];
        self.add(b'%', high);
        self.add(b'%', high.to_ascii_uppercase());
        // `\u00XX`, and the short escapes `\/`, `\\`, `\"`.
        if s0 < 0x80 {
            self.add(b'\\', b'u');
        }
        if matches!(s0, b'/' | b'\\' | b'"') {
            self.add(b'\\', s0);
        }
        if s0 == b'"' {
            self.add(b'\\', b'&');
        }
        // HTML's `&name;`, `&#NN;`, `&#xHH;` (the name's hex letters in either case).
        for form in entities(s0) {
            self.add(b'&', form[1]);
            self.add(b'&', form[1].to_ascii_uppercase());
        }
    }
}

/// The HTML escapes of `b` (one of `& < > " '`, else none): named (and HTML's upper-case
/// legacy names), decimal (also zero-padded to three digits, as PHP and JSTL write them),
/// hexadecimal (`&#x` or `&#X`, the digits in either case).
pub(super) fn entities(b: u8) -> &'static [&'static [u8]] {
    match b {
        b'&' => &[
            b"&amp;", b"&#38;", b"&#x26;", b"&#038;", b"&#X26;", b"&AMP;",
        ],
        b'<' => &[b"&lt;", b"&#60;", b"&#x3c;", b"&#060;", b"&#X3c;", b"&LT;"],
        b'>' => &[b"&gt;", b"&#62;", b"&#x3e;", b"&#062;", b"&#X3e;", b"&GT;"],
        b'"' => &[
            b"&quot;", b"&#34;", b"&#x22;", b"&#034;", b"&#X22;", b"&QUOT;",
        ],
        b'\'' => &[b"&#39;", b"&#x27;", b"&apos;", b"&#039;", b"&#X27;"],
        _ => &[],
    }
}

/// The length of an escape an encoder may have written for the secret byte `b` at the start
/// of `buf` (not empty): JSON `\/`, `\\`, `\"` and `\u00XX`, URL `%XX` (hex digits in either
/// case), HTML's entities for `& < > " '` ([`entities`]), or JSON's `\"` with the quote an
/// entity. The byte itself is the other way to spell `b` (see [`match_at`]).
fn escape_len(buf: &[u8], b: u8) -> Option<usize> {
    match buf[0] {
        b'&' => forms_len(buf, entities(b)).or_else(|| numeric_entity(buf, b)),
        b'%' => {
            let hex = hex_digits(b);
            forms_len(buf, &[&[b'%', hex[0], hex[1]]])
        }
        b'\\' => {
            // JSON's `\"` with its quote escaped again by HTML (a JSON error in a page).
            if b == b'"'
                && buf.get(1) == Some(&b'&')
                && let Some(n) = forms_len(&buf[1..], entities(b))
            {
                return Some(n + 1);
            }
            let hex = hex_digits(b);
            let u = [b'\\', b'u', b'0', b'0', hex[0], hex[1]];
            let short_esc = [b'\\', b];
            let short: &[u8] = if matches!(b, b'/' | b'\\' | b'"') {
                &short_esc
            } else {
                &[]
            };
            let u: &[u8] = if b < 0x80 { &u } else { &[] };
            forms_len(buf, &[u, short])
        }
        _ => None,
    }
}

/// HTML's numeric reference to `b` (one of the bytes [`entities`] knows), with any number of
/// leading zeros that keeps it within [`MAX_SPELLING`] (`&#00038;`, as `%05d` writes it):
/// its length.
fn numeric_entity(buf: &[u8], b: u8) -> Option<usize> {
    if entities(b).is_empty() || buf.get(1) != Some(&b'#') {
        return None;
    }
    let hex = matches!(buf.get(2), Some(b'x' | b'X'));
    let start = if hex { 3 } else { 2 };
    let radix = if hex { 16 } else { 10 };
    let mut value: u32 = 0;
    for (k, &c) in buf.iter().enumerate().take(MAX_SPELLING).skip(start) {
        if c == b';' {
            return (k > start && value == u32::from(b)).then_some(k + 1);
        }
        value = value * radix + char::from(c).to_digit(radix)?;
        if value > 0xff {
            return None;
        }
    }
    None
}

/// `b`'s two hex digits, lower case.
fn hex_digits(b: u8) -> [u8; 2] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]
}

/// The length of whichever of `forms` (the empty ones ignored) spells a byte at the start of
/// `buf`. The hex digits (and letters that are hex digits) match in either case, every
/// other byte exactly. A form cut short by the end of `buf` is not that form: at a text's
/// real end, a byte that begins an escape (`&`, `%`, `\`) is the byte itself; the scrubber
/// reads every other text at least a spelling's length past where a secret may begin, except
/// right after a pause (`Scrubber::release`), where this may find a secret a few bytes early.
fn forms_len(buf: &[u8], forms: &[&[u8]]) -> Option<usize> {
    forms
        .iter()
        .filter(|f| !f.is_empty() && f.len() <= buf.len())
        .find(|form| {
            buf.iter()
                .zip(form.iter())
                .all(|(x, y)| x == y || (y.is_ascii_hexdigit() && x.to_ascii_lowercase() == *y))
        })
        .map(|form| form.len())
}

/// What `secret` matches at the start of `buf`.
pub(super) enum Match {
    /// Spelled by this many bytes (the longest way).
    Full(usize),
    /// `buf` ends inside it: the next bytes decide.
    Partial,
    No,
}

/// Each secret byte is matched as itself or as an escape; where both fit (the secret has a
/// `%`, `\` or `&` and the text goes on like its escape, `ab%25cd` written as is), both ways
/// are followed: a small set of the offsets reached so far.
pub(super) fn match_at(buf: &[u8], secret: &[u8]) -> Match {
    const WAYS: usize = 8;
    let (mut at, mut n) = ([0usize; WAYS], 1);
    let mut short = false;
    for &b in secret {
        let (mut next, mut m) = ([0usize; WAYS], 0);
        let mut reach = |j: usize| {
            if m < WAYS && !next[..m].contains(&j) {
                next[m] = j;
                m += 1;
            }
        };
        for &j in &at[..n] {
            let rest = &buf[j..];
            let Some(&c) = rest.first() else {
                short = true;
                continue;
            };
            if let Some(k) = escape_len(rest, b) {
                reach(j + k);
            }
            if c == b {
                reach(j + 1);
            }
        }
        if m == 0 {
            return if short { Match::Partial } else { Match::No };
        }
        (at, n) = (next, m);
    }
    Match::Full(at[..n].iter().copied().max().unwrap_or(0))
}

/// Whether a spelling of the secret byte `first` can start `buf` (not empty): a cheap test
/// that says no only where [`match_at`] does (the byte itself, `%XX`, an HTML entity of one of
/// `& < > " '`, or a backslash that begins `\u00XX`, the short escape of `/`, `\\` or `"`, or
/// `\&` before a quote's entity).
#[inline]
pub(super) fn may_start(buf: &[u8], first: u8) -> bool {
    match buf[0] {
        c if c == first => true,
        b'%' => true,
        b'&' => !entities(first).is_empty(),
        b'\\' => match buf.get(1) {
            None | Some(b'u') => true,
            Some(b'&') => first == b'"',
            Some(&next) => next == first && matches!(first, b'/' | b'\\' | b'"'),
        },
        _ => false,
    }
}

/// The longest spelling of a byte (`&#00038;`: a numeric reference zero-padded to five
/// digits).
pub(super) const MAX_SPELLING: usize = 8;

impl Default for Tables {
    fn default() -> Self {
        Tables {
            first: [false; 256],
            few: Few::default(),
            starts: Starts::default(),
        }
    }
}

impl Tables {
    /// Whether a spelling of a secret may begin at `buf[i]` (which is `c`): its first byte,
    /// and the pair it makes with the next, if there is one, are marked.
    #[inline]
    pub(super) fn may_begin(&self, buf: &[u8], i: usize, c: u8) -> bool {
        self.first[usize::from(c)] && buf.get(i + 1).is_none_or(|&next| self.starts.has(c, next))
    }

    /// The first byte at or after `from` and before `stop` that begins a secret's spelling
    /// (by the first-byte table). Most bytes do not: with at most three such bytes, `memchr3`
    /// finds the next (remembered in `cur`), until candidates turn out to be dense; else
    /// eight are looked up at a time, with one branch for all eight.
    pub(super) fn next_first(
        &self,
        cur: &mut Cursor,
        buf: &[u8],
        from: usize,
        stop: usize,
    ) -> Option<usize> {
        let hay = buf.get(from..stop)?;
        if let Some(groups) = self.few.groups()
            && !cur.dense
        {
            let start = *cur.start.get_or_insert(from);
            let mut best: Option<usize> = None;
            for (g, next) in cur.next.iter_mut().enumerate().take(groups) {
                let at = match *next {
                    Some(Some(p)) if p >= from => Some(p),
                    Some(None) => None,
                    _ => {
                        let p = self.few.find(g, hay).map(|k| from + k);
                        *next = Some(p);
                        p
                    }
                };
                best = match (best, at) {
                    (Some(b), Some(a)) => Some(b.min(a)),
                    (b, a) => b.or(a),
                };
            }
            if let Some(b) = best {
                cur.found += 1;
                // More than one candidate in 32 bytes: each search would cost more than
                // looking every byte up.
                cur.dense = cur.found >= 8 && cur.found * 32 > b - start;
            }
            return best;
        }
        let mut skipped = 0;
        for eight in hay.chunks_exact(8) {
            if eight
                .iter()
                .fold(false, |any, &c| any | self.first[usize::from(c)])
            {
                break;
            }
            skipped += 8;
        }
        hay[skipped..]
            .iter()
            .position(|&c| self.first[usize::from(c)])
            .map(|k| from + skipped + k)
    }
}
