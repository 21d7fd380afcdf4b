//! A gateway group: two or three gateway processes (each a real `Target`) exporting
//! one namespace (same NGUID) from one shared cluster image, with their reservations
//! held by a simulated cluster authority; hosts connect through any gateway and move
//! to another when a path fails.
//!
//! ```text
//!   GroupHost --Link--> gateway 0: Target --+--> SharedStore (atomic compare-and-write)
//!       |      \------> gateway 1: Target --+
//!  GroupOracle      (GatewayAuthority each) +--> Cluster (record, notices, fencing)
//! ```
//! - [`store`]: the image, with compare-and-write as one step, fencing, the log of
//!   the writes that landed, and completions a gateway's finisher may hold.
//! - [`authority`]: the reservation record, its notices, watches, fencing (with its
//!   causes), membership leases and the group's power loss.
//! - [`reference`]: the reference reservation model (states, statuses, notices) and
//!   the checks against it, and the atomic registers of the lock blocks.
//! - [`host`]: hosts issuing reservation commands, reads and writes on data blocks,
//!   and fused Compare and Write on the lock blocks, and reading log 80h on
//!   reservation events.
//! - [`notices`]: the notices each host's controller is owed, and what it read.
//! - [`fences`]: acknowledgements that wait for Preempt and Abort's fence, the
//!   gateway's finisher, and the oracles of safety (no preempted write lands after the
//!   answer) and liveness (no gateway fenced that did nothing wrong).
//! - [`plan`]: what a group seed draws; [`faults`]: the faults injected.
//! - [`ana`]: the ANA group's owner and its moves through the change state.
//! - [`world`]: the step loop, gateway starts, the end phase for notices, and the
//!   checks at rest.

pub mod ana;
pub mod authority;
pub mod context;
pub mod faults;
pub mod fences;
pub mod host;
pub mod notices;
pub mod plan;
pub mod reference;
pub mod store;
pub mod vouch;
pub mod world;

pub use context::{GroupContext, LOCK_BLOCKS};
pub use world::GroupWorld;

/// One seed in four runs a gateway group (chosen from the seed by a hash of its own,
/// so that no draw of the single-target world moves, and the seeds CI replays stay
/// single-target worlds).
pub fn is_group_seed(seed: u64) -> bool {
    let mixed = (seed ^ 0x5EED_6A7E_0000_0011).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 61) % 4 == 3
}
