//! The `_method` fields of a form body, judged while the body streams upstream.
//!
//! Owns [`FormJudge`], the [`Hold`] both transports run on a form body that may name another
//! method (`request.rs` decides which: [`FormCheck`]): `form_scan` holds back each field that
//! may be `_method` (`json_scan` each top-level member of a JSON body; `body_override` chains
//! them) until it is read, each method it names is judged like the request line's,
//! and only then does the field go upstream. A denied or unreadable one stops the body: the
//! transport aborts the upstream request (it never receives the field, nor a complete body)
//! and answers with the refusal [`FormVerdict`] keeps, audited as if the body had been read
//! whole first.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use super::judge::Judged;
use super::record::Record;
use super::request::{BodyPlan, FormCheck, Prepared};
use crate::audit::Engine;
use crate::http::body::{BodyError, Hold};
use crate::http::body_override::BodyScan;
use crate::http::method_override::InvalidOverride;
use crate::http::respond::{Code, Refusal};
use crate::pipeline::caller::identify::Known;
use crate::pipeline::denial::Denial;

/// What judging a streamed form's methods found: the request's judgement with each added,
/// and the refusal when one was refused. Shared between the [`FormJudge`] and its transport.
#[derive(Clone, Debug, Default)]
pub struct FormVerdict(Arc<Mutex<Found>>);

#[derive(Debug, Default)]
struct Found {
    judged: Option<Judged>,
    denied: Option<Denial>,
}

impl FormVerdict {
    /// Into the request's record: the judgement as the body's methods left it; the refusal
    /// if one was refused (the body stopped with [`BodyError::Held`]).
    pub fn apply(&self, rec: &mut Record) -> Option<Denial> {
        let found = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(j) = &found.judged {
            rec.judged(j);
        }
        found.denied.clone()
    }
}

/// The streaming `_method` judgement of one form body.
#[derive(Debug)]
pub struct FormJudge {
    check: Box<FormCheck>,
    known: Known,
    scan: BodyScan,
    /// The request's judgement, each method judged so far added.
    judged: Judged,
    verdict: FormVerdict,
}

/// A form body's streaming judgement, for its transport: the [`Hold`] its body goes
/// through and the [`FormVerdict`] it leaves (both `None`: nothing to judge as it streams).
#[derive(Debug, Default)]
pub struct FormStream {
    pub hold: Option<Box<dyn Hold>>,
    pub verdict: Option<FormVerdict>,
}

/// The streaming judgement of `prepared`'s form body, if it has one to judge as it streams
/// (a body read whole to rewrite is judged whole, in `Exchange::whole_body`); the refusal
/// of a form that cannot be read at all.
pub fn stream(prepared: &mut Prepared, known: &Known) -> Result<FormStream, Denial> {
    if prepared.body == BodyPlan::Rewrite {
        return Ok(FormStream::default());
    }
    let Some(check) = prepared.form.take() else {
        return Ok(FormStream::default());
    };
    let scan = BodyScan::new(check.kind()).map_err(|e| unreadable(&e))?;
    let verdict = FormVerdict::default();
    let judge = FormJudge {
        judged: check.judged().clone(),
        check,
        known: known.clone(),
        scan,
        verdict: verdict.clone(),
    };
    Ok(FormStream {
        hold: Some(Box::new(judge)),
        verdict: Some(verdict),
    })
}

/// The refusal of a form whose `_method` fields cannot be read, as for the query parameter.
fn unreadable(e: &InvalidOverride) -> Denial {
    let refusal = Refusal::new(Code::InvalidMethodOverride, e.to_string());
    Denial::new(Engine::HttpParser, refusal)
}

impl FormJudge {
    /// Judges the methods the scan found since the last call; a refusal stops the body.
    /// The methods found before a refusal of the scan are judged first: they come before it
    /// in the body, and a cut elsewhere would have judged them in an earlier call.
    fn judge_new(&mut self, scanned: Result<(), InvalidOverride>) -> Result<(), BodyError> {
        let named = self.scan.take_new();
        if named.is_empty() && scanned.is_ok() {
            return Ok(());
        }
        let denied = match self.check.also(&self.known).judge(&mut self.judged, &named) {
            Err(boxed) => {
                let (refusal, j) = *boxed;
                self.judged = j;
                Some(Denial::new(self.judged.engine, refusal))
            }
            Ok(()) => scanned.err().map(|e| unreadable(&e)),
        };
        let mut found = self
            .verdict
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        found.judged = Some(self.judged.clone());
        match denied {
            Some(d) => {
                found.denied = Some(d);
                Err(BodyError::Held)
            }
            None => Ok(()),
        }
    }
}

impl Hold for FormJudge {
    fn feed(&mut self, chunk: Bytes, out: &mut Vec<Bytes>) -> Result<(), BodyError> {
        let scanned = self.scan.feed(chunk, out);
        self.judge_new(scanned).inspect_err(|_| out.clear())
    }

    fn finish(&mut self, out: &mut Vec<Bytes>) -> Result<(), BodyError> {
        let scanned = self.scan.finish(out);
        self.judge_new(scanned).inspect_err(|_| out.clear())
    }
}
