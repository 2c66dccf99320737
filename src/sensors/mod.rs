//! OS readings: the RAM total (with the cgroup bound), the child's anonymous
//! memory, and (for the brake) pressure and paging, one provider per OS.

pub mod footprint;
pub mod ram;
