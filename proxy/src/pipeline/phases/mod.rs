//! The phases every transport runs, each written once: the connection phase (`connection`:
//! target, caller, L4 decision, dial), then per request the request phase (`request`), its
//! judgement (`judge`, `form`, `protocol_body`), the credential steps (`inject`), the exchange
//! that orders them (`exchange`) and the audit record they fill in (`record`).

pub(in crate::pipeline) mod connection;
pub(in crate::pipeline) mod exchange;
pub(in crate::pipeline) mod form;
pub(in crate::pipeline) mod graphql_judged;
pub(in crate::pipeline) mod inject;
pub(in crate::pipeline) mod judge;
pub(in crate::pipeline) mod protocol_body;
pub(in crate::pipeline) mod record;
pub(in crate::pipeline) mod request;
