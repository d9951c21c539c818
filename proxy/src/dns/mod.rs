//! The policy DNS: a DNS responder (UDP and TCP) for a sandboxed namespace or pod that
//! answers only names some policy entry could allow, with addresses that pass the SSRF
//! checks, refuses everything else (`REFUSED`), audits each answer and refusal, and remembers
//! which name each handed-out address stands for ([`table::HandedOut`]).
//!
//! `answer` decides one question (which names, which addresses: policy and resolver, no
//! sockets); `server` owns the sockets and the wire format (hickory-proto, no hand-written
//! parser); `table` the handed-out addresses; `limit` the per-client rate limit.

pub mod answer;
pub mod limit;
pub mod server;
pub mod table;
