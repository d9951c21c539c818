//! Which readers a request body goes through for the methods it names: owns [`BodyKind`]
//! (a form, as `form_override` decides; JSON, as `json_scan` decides; or both, as a `POST`
//! without a `Content-Type` is, or a type that names both) and [`BodyScan`], the form scan
//! and the JSON scan chained (what the first hands back is fed to the second), so a body
//! that both may read is held wherever either holds it. The caller judges
//! [`BodyScan::take_new`] before what a call hands back goes upstream.
//!
//! Chained, the two read the body in step, one byte at a time (or a run of bytes the form
//! scan only passes, in one step): each step, the form scan reads first, then the JSON scan
//! reads what the form handed back. What they find, and the first refusal, come in the order
//! of those steps, which the body's bytes alone decide: the verdict is the same however the
//! network cut the body (a chunk read whole, the form scan would read to its end before the
//! JSON scan read its first byte, and a later form refusal would win over an earlier JSON
//! one).

use bytes::Bytes;

use super::form_override::FormKind;
use super::form_scan::{self, FormScan};
use super::json_scan::{self, JsonScan};
use super::method_override::{InvalidOverride, Override};

/// How a request body may name a method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyKind {
    pub form: Option<FormKind>,
    pub json: bool,
}

impl BodyKind {
    /// The kind of a request with `method` and `content_types` (every `Content-Type` value
    /// it sent), or `None` when no framework reads a method from its body.
    pub fn of(method: &str, content_types: &[&[u8]]) -> Option<BodyKind> {
        let form = FormKind::of(method, content_types.iter().copied());
        let json = json_scan::is_json(method, content_types.iter().copied());
        (form.is_some() || json).then_some(BodyKind { form, json })
    }
}

/// The streaming readers of one body.
#[derive(Debug)]
pub struct BodyScan {
    form: Option<FormScan>,
    json: Option<JsonScan>,
    /// How many of each reader's methods are in `found`.
    seen: (usize, usize),
    /// Every method found, in the order of the steps that found them (within one, the
    /// form's first).
    found: Vec<Override>,
    /// How many of `found` [`BodyScan::take_new`] returned.
    taken: usize,
}

impl BodyScan {
    /// The readers of a body of `kind`; a form no parser would read alike is refused.
    pub fn new(kind: &BodyKind) -> Result<BodyScan, InvalidOverride> {
        Ok(BodyScan {
            form: kind.form.as_ref().map(FormScan::new).transpose()?,
            json: kind.json.then(JsonScan::default),
            seen: (0, 0),
            found: Vec::new(),
            taken: 0,
        })
    }

    /// The next chunk: what may go upstream (once [`BodyScan::take_new`] is judged) is
    /// pushed to `out`, in order.
    pub fn feed(&mut self, chunk: Bytes, out: &mut Vec<Bytes>) -> Result<(), InvalidOverride> {
        let fed = match (&mut self.form, &mut self.json) {
            (Some(form), Some(json)) => {
                let from = out.len();
                let fed = feed_in_step(form, json, &chunk, out, (&mut self.seen, &mut self.found));
                form_scan::coalesce(out, from);
                fed
            }
            (Some(form), None) => form.feed(chunk, out),
            (None, Some(json)) => json.feed(chunk, out),
            (None, None) => {
                out.push(chunk);
                Ok(())
            }
        };
        self.note_found();
        fed
    }

    /// The body ended: what is still held is pushed to `out`, if it may go.
    pub fn finish(&mut self, out: &mut Vec<Bytes>) -> Result<(), InvalidOverride> {
        let finished = match (&mut self.form, &mut self.json) {
            (Some(form), Some(json)) => {
                let mut passed = Vec::new();
                form.finish(&mut passed).and_then(|()| {
                    note(form, json, (&mut self.seen, &mut self.found));
                    passed.into_iter().try_for_each(|b| json.feed(b, out))?;
                    json.finish(out)
                })
            }
            (Some(form), None) => form.finish(out),
            (None, Some(json)) => json.finish(out),
            (None, None) => Ok(()),
        };
        self.note_found();
        finished
    }

    /// The methods found since the last call, in the order they were found (see the
    /// module's doc). Those found before a refusal are here too.
    pub fn take_new(&mut self) -> Vec<Override> {
        let new = self.found[self.taken..].to_vec();
        self.taken = self.found.len();
        new
    }

    /// What the readers found since the last note, added to `found` (form fields first).
    fn note_found(&mut self) {
        let form = self.form.as_ref().map(FormScan::found).unwrap_or_default();
        let json = self.json.as_ref().map(JsonScan::found).unwrap_or_default();
        self.found.extend_from_slice(&form[self.seen.0..]);
        self.found.extend_from_slice(&json[self.seen.1..]);
        self.seen = (form.len(), json.len());
    }
}

/// [`BodyScan::note_found`] for the chained readers, while they are borrowed.
fn note(
    form: &FormScan,
    json: &JsonScan,
    (seen, found): (&mut (usize, usize), &mut Vec<Override>),
) {
    found.extend_from_slice(&form.found()[seen.0..]);
    found.extend_from_slice(&json.found()[seen.1..]);
    *seen = (form.found().len(), json.found().len());
}

/// `chunk` read by the chained readers in step (see the module's doc): each step, the form
/// scan reads one byte, or the run of bytes it only passes, and the JSON scan what the form
/// scan handed back; what they found is noted after each step.
fn feed_in_step(
    form: &mut FormScan,
    json: &mut JsonScan,
    chunk: &Bytes,
    out: &mut Vec<Bytes>,
    (seen, found): (&mut (usize, usize), &mut Vec<Override>),
) -> Result<(), InvalidOverride> {
    let mut passed = Vec::new();
    let mut i = 0;
    while i < chunk.len() {
        let n = form.quiet_len(&chunk[i..]).max(1);
        form.feed(chunk.slice(i..i + n), &mut passed)?;
        passed.drain(..).try_for_each(|b| json.feed(b, out))?;
        note(form, json, (&mut *seen, &mut *found));
        i += n;
    }
    Ok(())
}

/// The methods a whole body of `kind` names, in the order [`BodyScan`] finds them.
pub fn from_body(kind: &BodyKind, body: &[u8]) -> Result<Vec<Override>, InvalidOverride> {
    let mut scan = BodyScan::new(kind)?;
    let mut out = Vec::new();
    scan.feed(Bytes::copy_from_slice(body), &mut out)?;
    scan.finish(&mut out)?;
    Ok(scan.take_new())
}

/// One streaming loop for the readers' tests: a body fed to [`BodyScan`] cut at chosen
/// places, and what came out.
#[cfg(test)]
pub(super) mod streamed {
    use super::*;

    /// What the stream makes of a body: the methods found (or the refusal), the bytes
    /// handed back in order, the most bytes held at once, and whether bytes of the body
    /// from `watch` on were handed back while no method was found (`early`).
    pub struct Streamed {
        pub verdict: Result<Vec<Override>, InvalidOverride>,
        pub out: Vec<u8>,
        pub held_max: usize,
        pub early: bool,
    }

    /// `body` of `kind`, fed in pieces cut at `cuts` (in any order, past the end ignored).
    pub fn stream(kind: &BodyKind, body: &[u8], cuts: &[usize], watch: usize) -> Streamed {
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(body.len())).collect();
        bounds.sort_unstable();
        bounds.dedup();
        bounds.retain(|&b| b > 0 && b < body.len());
        bounds.push(body.len());
        let mut s = Streamed {
            verdict: Ok(Vec::new()),
            out: Vec::new(),
            held_max: 0,
            early: false,
        };
        s.verdict = feed_all(kind, body, &bounds, watch, &mut s);
        s
    }

    /// [`stream`]'s loop: `body` fed up to each of `bounds`, what came out recorded in `s`.
    fn feed_all(
        kind: &BodyKind,
        body: &[u8],
        bounds: &[usize],
        watch: usize,
        s: &mut Streamed,
    ) -> Result<Vec<Override>, InvalidOverride> {
        let mut scan = BodyScan::new(kind)?;
        let mut found = Vec::new();
        let mut from = 0;
        for &to in bounds {
            let mut got = Vec::new();
            scan.feed(Bytes::copy_from_slice(&body[from..to]), &mut got)?;
            found.extend(scan.take_new());
            s.out.extend(got.iter().flat_map(|b| b.iter().copied()));
            s.early |= found.is_empty() && s.out.len() > watch;
            s.held_max = s.held_max.max(to - s.out.len());
            from = to;
        }
        let mut last = Vec::new();
        scan.finish(&mut last)?;
        found.extend(scan.take_new());
        s.out.extend(last.iter().flat_map(|b| b.iter().copied()));
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn methods(kind: &BodyKind, body: &str) -> Vec<String> {
        from_body(kind, body.as_bytes())
            .unwrap()
            .into_iter()
            .map(|o| o.method)
            .collect()
    }

    #[test]
    fn a_body_both_may_read_is_read_as_both() {
        let untyped = BodyKind::of("POST", &[]).unwrap();
        assert_eq!(untyped.form, Some(FormKind::Urlencoded));
        assert!(untyped.json);
        assert_eq!(methods(&untyped, r#"{"_method":"DELETE"}"#), ["DELETE"]);
        assert_eq!(methods(&untyped, "_method=PUT"), ["PUT"]);
        let both = BodyKind::of("POST", &[b"application/x-www-form-urlencoded; x=/json"]).unwrap();
        assert_eq!(
            methods(&both, r#"_method=PUT&{"_method":"DELETE"}"#),
            ["PUT", "DELETE"]
        );
        assert_eq!(BodyKind::of("POST", &[b"text/plain"]), None);
        // Cut anywhere, what the form scan holds is still read by the JSON scan.
        let body = br#"a=1&{"_method":"DELETE"}"#;
        for at in 0..=body.len() {
            let mut scan = BodyScan::new(&untyped).unwrap();
            let mut out = Vec::new();
            scan.feed(Bytes::copy_from_slice(&body[..at]), &mut out)
                .unwrap();
            scan.feed(Bytes::copy_from_slice(&body[at..]), &mut out)
                .unwrap();
            scan.finish(&mut out).unwrap();
            assert_eq!(scan.take_new()[0].method, "DELETE");
            assert_eq!(out.concat(), body);
        }
    }
}
