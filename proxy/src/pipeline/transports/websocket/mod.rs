//! WebSocket: the handshake (`handshake`), the frames as a server sends them (`frame`), the
//! client's messages judged (`messages`, `judged`, within the shared `budget` of messages
//! being assembled), their placeholders swapped (`rewrite`),
//! and the upstream's scrubbed (`scrub`).

mod budget;
pub(crate) mod frame;
pub(in crate::pipeline) mod handshake;
pub(in crate::pipeline) mod judged;
pub(in crate::pipeline) mod messages;
pub(in crate::pipeline) mod rewrite;
pub(crate) mod scrub;
