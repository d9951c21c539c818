//! Transparent interception: what sluice learns about a connection that nftables redirected
//! to it, before the pipeline's phases run.
//!
//! Owns three steps, each with its own entry point:
//!
//! 1. [`origdst::original_destination`]: the address the client dialled (`SO_ORIGINAL_DST`,
//!    `IP6T_SO_ORIGINAL_DST`), read from the accepted socket;
//! 2. [`sniff::sniff`]: the name the client claims, from a TLS ClientHello's SNI or a plain
//!    HTTP request's `Host`, read with a timeout; every byte read is kept for replay;
//! 3. [`target::decide_target`] (pure): the loop guard and the anti-forgery rule: a name
//!    taken from SNI or `Host` stands only if the original destination is one of the name's
//!    addresses, or one the policy DNS handed out for it. [`target::corroborate`] gathers that
//!    evidence (a lookup through `sluice_resolver`, the policy DNS table).
//!
//! [`listener`] puts the three together for one accepted connection and hands the target to
//! the pipeline's tunnel phases (`pipeline::transports::tunnel::tunnel`).
//!
//! It does not judge the connection against policy, dial, or relay: the pipeline's phases do,
//! with the [`target::TransparentTarget`] this module produces.

pub mod listener;
pub mod origdst;
pub mod sniff;
pub mod target;

#[cfg(test)]
mod testns;
