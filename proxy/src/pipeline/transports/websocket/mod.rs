//! WebSocket: the handshake (`handshake`), the frames as a server sends them (`frame`), the
//! client's messages judged (`messages`, `judged`) and the upstream's scrubbed (`scrub`).

pub(crate) mod frame;
pub(in crate::pipeline) mod handshake;
pub(in crate::pipeline) mod judged;
pub(in crate::pipeline) mod messages;
pub(crate) mod scrub;
