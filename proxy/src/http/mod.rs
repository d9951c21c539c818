//! HTTP/1 on the client side of sluice: strict request heads (`head`), streamed request
//! bodies (`body`), and the responses sluice writes (`respond`). The upstream side uses
//! hyper's client.

pub mod body;
pub mod head;
pub mod respond;
