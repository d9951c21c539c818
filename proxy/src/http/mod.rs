//! HTTP/1 on the client side of sluice: strict request heads (`head`), streamed request
//! bodies (`body`), the responses sluice writes (`respond`), and the request head it sends
//! upstream (`upstream`); hyper's client carries it. `method_override` reads the methods a request names through override
//! headers and the query, `form_override` and `form_scan` those its form body names (as it streams), `json_scan` those
//! its JSON body names (`body_override` chains the two), for HTTP/1 and HTTP/2 alike.

pub(crate) mod body;
pub(crate) mod body_override;
pub(crate) mod form_override;
pub(crate) mod form_scan;
pub mod head;
pub(crate) mod json_scan;
pub(crate) mod method_override;
pub(crate) mod respond;
pub(crate) mod upstream;
