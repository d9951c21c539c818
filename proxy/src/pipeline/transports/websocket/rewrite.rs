//! `websocket_credential_rewrite: true` (spec §3.3): the placeholders of the client's
//! WebSocket text messages are swapped for their secrets, by the same rules as a rewritten
//! request body (`credentials::rewrite_body`: only where the credential is bound and placed,
//! only over verified TLS), each message all or nothing. The secret must never come back:
//! the upstream's frames are scrubbed (`scrub`) of the secrets bound to the endpoint at
//! the upgrade, so a message whose secret is not among them (a credential rotated since)
//! closes the WebSocket with 1012 instead of going up. A placeholder that cannot be swapped
//! closes it with 1008 and the finding a request's would raise; one in a binary message or a
//! control frame (`messages` guards them) with 1008 and an uninspectable-traffic finding.
//! A message that carried a secret is audited as `WEBSOCKET_TEXT` with its credentials'
//! names.

use zeroize::Zeroizing;

use super::judged::PolicyJudge;
use super::messages::{Close, Judge, unswapped_reason};
use crate::audit::{Engine, Outcome};
use crate::credentials::{self, BodyError, ScrubSet, Transport};
use crate::pipeline::caller::identify::Known;
use crate::pipeline::phases::inject;
use crate::pipeline::phases::record::Record;
use crate::pipeline::phases::request::Exchange;
use crate::pipeline::state::live::InForce;

/// Swaps the placeholders of one WebSocket's text messages.
pub(super) struct Rewriter<'a> {
    x: Exchange<'a>,
    known: &'a Known,
    /// The canonical path of the upgrade (the credentials' binding is judged on it).
    path: String,
    transport: Transport,
    /// What the upstream's frames are scrubbed of.
    scrubbed: ScrubSet,
    /// A copy of the upgrade's record, for each message's (never emitted itself).
    upgrade: Option<Record>,
}

/// What a [`Rewriter`] is made of, besides the exchange and its caller.
pub(crate) struct Rewrite {
    pub(crate) path: String,
    /// What the upstream's frames are scrubbed of (empty: they are not).
    pub(crate) scrubbed: ScrubSet,
}

impl<'a> Rewriter<'a> {
    pub(super) fn new(
        x: Exchange<'a>,
        known: &'a Known,
        rewrite: Rewrite,
        rec: &Record,
    ) -> Rewriter<'a> {
        Rewriter {
            transport: x.admitted.scheme.transport(),
            x,
            known,
            path: rewrite.path,
            scrubbed: rewrite.scrubbed,
            upgrade: Some(rec.copy()),
        }
    }

    fn record(&self) -> Option<Record> {
        let mut rec = self.upgrade.as_ref().map(Record::copy)?;
        rec.method = "WEBSOCKET_TEXT".to_string();
        rec.engine = Engine::L7;
        Some(rec)
    }
}

impl Judge for Rewriter<'_> {
    fn text(&mut self, _message: &str) -> Result<(), Close> {
        Ok(())
    }

    fn rewrite(&mut self, message: &str) -> Result<Option<Zeroizing<Vec<u8>>>, Close> {
        if !credentials::placeholder::contains_marker(message.as_bytes()) {
            return Ok(None);
        }
        let scope = credentials::RequestScope {
            dst: &self.x.admitted.dst,
            path: &self.path,
            caller: self.known.policy_caller(),
            transport: self.transport,
        };
        // The credentials in force now (a refreshed token, a reload), not the upgrade's: a
        // value the upstream's frames are not scrubbed of is refused below.
        let creds = self.x.shared.credentials(self.known.claim());
        let scoped = creds.scoped(scope);
        let mut rec = self.record();
        let done = match credentials::rewrite_body(
            Some("text/plain; charset=utf-8"),
            message.as_bytes(),
            &scoped,
        ) {
            Ok(done) => done,
            Err(e) => {
                let reason = match &e {
                    BodyError::Credential(e) => {
                        if let Some(rec) = &rec {
                            // The finding (misuse) and the refusal's wording of a request's.
                            let _ =
                                inject::refuse_credential(&rec.dest(self.x.shared, self.known), e);
                        }
                        e.client_message().to_string()
                    }
                    other => other.to_string(),
                };
                let reason = format!("websocket text message refused: {reason}");
                if let Some(mut rec) = rec.take() {
                    rec.outcome = Outcome::Denied;
                    rec.reason = Some(reason.clone());
                    rec.finish();
                }
                return Err(Close::Placeholder(reason));
            }
        };
        if !self.scrubbed.covers(&done.injected.scrub) {
            // Its answer would not be scrubbed of it: refused rather than leaked.
            if let Some(mut rec) = rec.take() {
                rec.outcome = Outcome::Denied;
                rec.reason = Some(Close::Rotated.reason());
                rec.finish();
            }
            return Err(Close::Rotated);
        }
        if let Some(mut rec) = rec.take() {
            rec.credentials = done
                .injected
                .credentials
                .iter()
                .map(ToString::to_string)
                .collect();
            rec.credentials.sort();
            rec.credentials.dedup();
            rec.bytes_in = message.len() as u64;
            rec.outcome = Outcome::Allowed;
            rec.reason =
                Some("websocket text message: credential placeholders swapped".to_string());
            rec.finish();
        }
        Ok(Some(Zeroizing::new(done.body.into_owned())))
    }

    fn guards(&self) -> bool {
        true
    }

    fn unswapped(&mut self, frame: &str) -> Close {
        let reason = unswapped_reason(frame);
        if let Some(rec) = &self.upgrade {
            let d = rec.dest(self.x.shared, self.known);
            d.emit_finding(
                credentials::body::FINDING_TRAFFIC_UNINSPECTABLE,
                format!("WebSocket closed: {reason}"),
                None,
            );
        }
        Close::Placeholder(reason)
    }
}

impl Drop for Rewriter<'_> {
    fn drop(&mut self) {
        if let Some(rec) = self.upgrade.take() {
            rec.discard();
        }
    }
}

/// The judge of a WebSocket's client messages: its policy's (`protocol: websocket`), then
/// the rewrite of its placeholders (`websocket_credential_rewrite`), either or both.
pub(super) struct Messages<'a> {
    pub(super) policy: Option<PolicyJudge<'a>>,
    pub(super) rewrite: Option<Rewriter<'a>>,
}

impl Messages<'_> {
    pub(super) fn is_some(&self) -> bool {
        self.policy.is_some() || self.rewrite.is_some()
    }
}

impl Judge for Messages<'_> {
    fn text(&mut self, message: &str) -> Result<(), Close> {
        match &mut self.policy {
            Some(p) => p.text(message),
            None => Ok(()),
        }
    }

    fn rewrite(&mut self, message: &str) -> Result<Option<Zeroizing<Vec<u8>>>, Close> {
        match &mut self.rewrite {
            Some(r) => r.rewrite(message),
            None => Ok(None),
        }
    }

    fn guards(&self) -> bool {
        self.rewrite.as_ref().is_some_and(Judge::guards)
    }

    fn unswapped(&mut self, frame: &str) -> Close {
        match &mut self.rewrite {
            Some(r) => r.unswapped(frame),
            None => Close::Placeholder(unswapped_reason(frame)),
        }
    }
}
