//! The client's side of one connection: the accepted connection (`accepted`: its id,
//! addresses and stop signal), its streams as the pipeline reads and writes them (`stream`,
//! `counted`), and the signal that stops it (`stop`).

pub(in crate::pipeline) mod accepted;
pub(in crate::pipeline) mod counted;
pub(in crate::pipeline) mod stop;
pub(in crate::pipeline) mod stream;
