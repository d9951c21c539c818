//! A WebSocket whose client messages are judged (`protocol: websocket`, spec §5.4): the relay
//! after the `101` runs the client's bytes through `messages` and the upstream's as they
//! are (scrubbed when `scrub` wraps them); each text message is judged as
//! `WEBSOCKET_TEXT <upgrade path>` (with the upgrade's query) by the policy the upgrade was
//! judged by, and audited; a refusal (or any close `messages` decides, or a text
//! message assembled for more than 30 s idle or 120 s in all) sends a close frame with its
//! code to both sides and ends the relay. A reload of the policy closes with 1012, as in the
//! reference: the client reconnects and its upgrade is judged again.

use std::sync::Arc;
use std::time::Duration;

use ring::rand::SecureRandom;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::frame::{self, OpCode};
use super::messages::{ClientFrames, Close, Judge};
use crate::audit::{Engine, Outcome};
use crate::pipeline::caller::identify::Known;
use crate::pipeline::phases::connection;
use crate::pipeline::phases::record::Record;
use crate::pipeline::phases::request::Exchange;
use crate::pipeline::state::live::InForce;
use crate::policy::{Admission, Policy, Verdict};

/// Longest pause inside a text message being assembled.
const ASSEMBLY_IDLE: Duration = Duration::from_secs(30);
/// Longest a text message may take to arrive whole.
const ASSEMBLY_TOTAL: Duration = Duration::from_secs(120);
const BUF: usize = 16 * 1024;

/// Judges the text messages of one WebSocket by the policy its upgrade was judged by.
pub(crate) struct PolicyJudge<'a> {
    x: Exchange<'a>,
    known: &'a Known,
    policy: Arc<Policy>,
    admission: Admission,
    /// The upgrade's target as the client sent it (path and query).
    target: String,
    /// Each message's record starts as a copy of the upgrade's (itself never emitted: the
    /// upgrade's own record went out at the 101).
    upgrade: Option<Record>,
}

impl<'a> PolicyJudge<'a> {
    /// The judge of a WebSocket upgraded by `target`, when its messages are judged: the
    /// endpoints that decided the upgrade are `protocol: websocket`. `rec` is the upgrade's
    /// record (its destination, caller and policy are copied into each message's).
    pub(crate) fn for_upgrade(
        x: Exchange<'a>,
        known: &'a Known,
        target: &str,
        rec: &Record,
    ) -> Option<PolicyJudge<'a>> {
        let policy = x.shared.policy(known.claim());
        let admission = if Arc::ptr_eq(&policy, &x.admitted.policy) {
            x.admitted.admission.clone()
        } else {
            let what = format!("WEBSOCKET_TEXT {}{target}", x.admitted.dst);
            let scheme = x.admitted.scheme;
            connection::admit(x.shared, Ok(known), &x.admitted.dst, scheme, &what)
                .ok()?
                .1
                .admission
        };
        let decision = policy.decide_websocket_text(&admission, target.as_bytes(), b"");
        if !policy.inspects_websocket_messages(&decision) {
            return None;
        }
        Some(PolicyJudge {
            x,
            known,
            policy,
            admission,
            target: target.to_string(),
            upgrade: Some(rec.copy()),
        })
    }
}

impl Judge for PolicyJudge<'_> {
    fn text(&mut self, message: &str) -> Result<(), Close> {
        let Some(mut rec) = self.upgrade.as_ref().map(Record::copy) else {
            return Ok(());
        };
        rec.method = "WEBSOCKET_TEXT".to_string();
        rec.engine = Engine::L7;
        rec.bytes_in = message.len() as u64;
        if !Arc::ptr_eq(&self.x.shared.policy(self.known.claim()), &self.policy) {
            let close = Close::Reload;
            rec.outcome = Outcome::Denied;
            rec.reason = Some(close.reason());
            rec.finish();
            return Err(close);
        }
        let d = self.policy.decide_websocket_text(
            &self.admission,
            self.target.as_bytes(),
            message.as_bytes(),
        );
        if let Some(t) = &d.target {
            rec.path.clone_from(&t.path);
        }
        // The rule that decided the message, not the upgrade's.
        rec.rule = d.rule().map(|r| r.summary());
        if let Some(rule) = d.rule() {
            rec.policy = Some(rule.origin.entry.to_string());
        }
        rec.outcome = match d.verdict {
            Verdict::Allow => Outcome::Allowed,
            Verdict::Audit => Outcome::Audited,
            Verdict::Deny => Outcome::Denied,
        };
        // A GraphQL message: its operations by type and name (never its variables).
        let named = d
            .graphql
            .as_ref()
            .filter(|g| !g.operations.is_empty())
            .map(|g| {
                let ops: Vec<String> = g.operations.iter().map(|o| o.describe()).collect();
                format!(" (graphql: {})", ops.join(", "))
            });
        rec.reason = Some(format!("{}{}", d.reason, named.unwrap_or_default()));
        rec.finish();
        match d.verdict {
            Verdict::Deny => Err(Close::Policy(d.reason)),
            Verdict::Allow | Verdict::Audit => Ok(()),
        }
    }
}

impl Drop for PolicyJudge<'_> {
    fn drop(&mut self) {
        if let Some(rec) = self.upgrade.take() {
            rec.discard();
        }
    }
}

/// The four halves of a WebSocket's two connections.
pub(crate) struct Halves<CR, CW, UR, UW> {
    pub(crate) client_rd: CR,
    pub(crate) client_wr: CW,
    pub(crate) upstream_rd: UR,
    pub(crate) upstream_wr: UW,
}

/// Relays a WebSocket whose client frames go through `judge` until either side closes, the
/// relay is idle for `idle`, or a close is decided (then sent to both sides). `leftover`:
/// client bytes read past the handshake.
pub(crate) async fn relay<CR, CW, UR, UW>(
    halves: Halves<CR, CW, UR, UW>,
    leftover: &[u8],
    idle: Duration,
    judge: &mut (dyn Judge + Send),
) -> Option<Close>
where
    CR: AsyncRead + Unpin + Send,
    CW: AsyncWrite + Unpin + Send,
    UR: AsyncRead + Unpin + Send,
    UW: AsyncWrite + Unpin + Send,
{
    let Halves {
        mut client_rd,
        mut client_wr,
        mut upstream_rd,
        mut upstream_wr,
    } = halves;
    let mut frames = ClientFrames::default();
    let mut up = Vec::new();
    let mut cbuf = vec![0u8; BUF];
    let mut ubuf = vec![0u8; BUF];
    let (mut client_open, mut upstream_open) = (true, true);
    let mut assembly: Option<(Instant, Instant)> = None;
    let mut permit = None;
    let mut pending = leftover.to_vec();
    let end = loop {
        if !pending.is_empty() {
            let res = frames.push(&pending, judge, &mut up);
            pending.clear();
            if !up.is_empty() && upstream_wr.write_all(&up).await.is_err() {
                break None;
            }
            up.clear();
            if let Err(close) = res {
                break Some(close);
            }
            let now = Instant::now();
            assembly = frames
                .assembling()
                .then(|| (assembly.map_or(now, |(start, _)| start), now));
            // A message in progress holds one of the process's assembly slots until judged.
            match (frames.assembling(), permit.is_some()) {
                (true, false) => match super::budget::SHARED.take(ASSEMBLY_IDLE).await {
                    Ok(p) => permit = Some(p),
                    Err(_) => break Some(Close::Capacity),
                },
                (false, true) => permit = None,
                _ => {}
            }
        }
        if !client_open && !upstream_open {
            break None;
        }
        let deadline =
            assembly.map(|(start, last)| (start + ASSEMBLY_TOTAL).min(last + ASSEMBLY_IDLE));
        tokio::select! {
            r = client_rd.read(&mut cbuf), if client_open => match r {
                Ok(n) if n > 0 => pending.extend_from_slice(&cbuf[..n]),
                _ => {
                    client_open = false;
                    let _ = upstream_wr.shutdown().await;
                }
            },
            r = upstream_rd.read(&mut ubuf), if upstream_open => match r {
                Ok(n) if n > 0 => {
                    if client_wr.write_all(&ubuf[..n]).await.is_err() {
                        break None;
                    }
                }
                Ok(_) => {
                    upstream_open = false;
                    let _ = client_wr.shutdown().await;
                }
                // A frame the upstream should not have sent (`scrub`): both sides close.
                Err(_) => break None,
            },
            () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                break Some(Close::Protocol("websocket text message assembly timed out".to_string()));
            }
            () = tokio::time::sleep(idle) => break None,
        }
    };
    if let Some(close) = &end {
        let payload = close.payload();
        let mut to_upstream = Vec::new();
        frame::encode_masked(true, OpCode::Close, &payload, mask(), &mut to_upstream);
        let _ = upstream_wr.write_all(&to_upstream).await;
        let mut to_client = Vec::new();
        frame::encode(true, OpCode::Close, &payload, &mut to_client);
        let _ = client_wr.write_all(&to_client).await;
    }
    let _ = upstream_wr.shutdown().await;
    let _ = client_wr.shutdown().await;
    end
}

/// A fresh masking key (RFC 6455 §5.3: unpredictable).
fn mask() -> [u8; 4] {
    let mut key = [0u8; 4];
    // A failed draw leaves zeros: the frame is still valid, only predictable.
    let _ = ring::rand::SystemRandom::new().fill(&mut key);
    key
}
