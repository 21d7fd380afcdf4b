//! Benchmark workloads for Sluice: the job model ([`JobSpec`]), a deterministic offset
//! generator, open-loop arrival schedules, HDR latency recording, the SNIA PTS
//! steady-state rule and a driver-agnostic run loop ([`run_worker`]) that any I/O
//! engine (NVMe/TCP queue, local backend queue, a test fake) plugs into.
//!
//! Nothing here opens sockets: the CLI (`sluice bench`) supplies the engines.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod job;
mod latency;
mod offsets;
mod rng;
mod runner;
pub mod schedule;
pub mod steady_state;

pub use job::{parse_duration, JobError, JobSpec, Pattern};
pub use latency::{LatencyRecorder, LatencySummary, SecondSample, PERCENTILES};
pub use offsets::{IoKind, IoPlan, OffsetGenerator};
pub use rng::Rng;
pub use runner::{run_worker, Arrivals, Completion, Engine, RunControl, Shared, WorkerConfig, WorkerResult};
pub use schedule::{LagStats, Schedule, LATE_THRESHOLD};
pub use steady_state::SteadyState;
