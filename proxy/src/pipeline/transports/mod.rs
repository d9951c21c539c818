//! The transports that carry requests through the phases, each calling the one exchange
//! (`phases/exchange.rs`) and doing only its wire's work: HTTP/1.1 (`http1`: absolute-form
//! requests and the requests inside a tunnel; `http1_route`: its upstream connections), HTTP/2 (`http2`), tunnels (`tunnel`: CONNECT
//! and transparent connections; `inspect`: TLS terminated, `lease`: its hold on a pooled
//! upstream connection), WebSocket (`websocket`), and what a refused client is still sending
//! (`unread`).

pub(in crate::pipeline) mod http1;
pub(in crate::pipeline) mod http1_route;
pub(in crate::pipeline) mod http2;
pub(in crate::pipeline) mod inspect;
pub(in crate::pipeline) mod lease;
/// The tunnel entry (`tunnel::tunnel`), where a transparent listener enters too.
pub(crate) mod tunnel;
pub(in crate::pipeline) mod unread;
pub(crate) mod websocket;
