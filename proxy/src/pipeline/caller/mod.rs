//! The caller of a connection: who it is (`identify`: the program policy matches on, what
//! audit records, or a gateway's tenant) and whether it still holds the socket while the
//! connection lasts (`holder`).

pub(in crate::pipeline) mod holder;
pub(in crate::pipeline) mod identify;
