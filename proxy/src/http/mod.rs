//! HTTP/1 on the client side of sluice: strict request heads (`head`), streamed request
//! bodies (`body`), the responses sluice writes (`respond`), and the request head it sends
//! upstream (`upstream`); hyper's client carries it. `method_override` reads the methods a request names through override
//! headers, for HTTP/1 and HTTP/2 alike.

pub mod body;
pub mod head;
pub mod method_override;
pub mod respond;
pub mod upstream;
