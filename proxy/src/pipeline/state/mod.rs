//! What a running proxy holds across connections (`shared`): the per-caller limits
//! (`caller_limits`), the live connections a reload re-judges (`live`), the upstream
//! connections kept for reuse (`pool`), the audit form of callers (`seen`) and the thread of
//! periodic caller re-checks (`rechecks`).

pub(in crate::pipeline) mod caller_limits;
pub(in crate::pipeline) mod live;
pub(in crate::pipeline) mod pool;
pub(in crate::pipeline) mod rechecks;
pub(in crate::pipeline) mod seen;
pub(in crate::pipeline) mod shared;
