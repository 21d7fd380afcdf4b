//! An in-process Sluice target (`target_server::start`, what `sluice serve` runs) on
//! an ephemeral loopback port, for tests that need a real NVMe/TCP controller.
#![allow(dead_code)]

use std::net::SocketAddr;

use nvme_spec::NamespaceId;
use nvme_target::{ListenerSpec, NamespaceSpec, SubsystemSpec, Target, TargetSettings, TargetSpec};
use storage::{Geometry, RamBackend};
use target_server::LoopbackTarget;

pub const NQN: &str = "nqn.2026-11.io.sluice:ffi-test";
pub const BLOCK_BYTES: u32 = 512;
pub const NAMESPACE_BLOCKS: u64 = 32768; // 16 MiB

/// A running target; stopped on drop.
pub struct InProcessTarget {
    /// Serves until dropped.
    _served: LoopbackTarget,
    pub address: SocketAddr,
}

impl InProcessTarget {
    pub fn start() -> InProcessTarget {
        let target = Target::new(TargetSpec {
            listeners: vec![ListenerSpec::tcp("127.0.0.1", 4420)],
            subsystems: vec![SubsystemSpec {
                hosts: nvme_target::HostAccess::allow_any(),
                pool: None,
                nqn: NQN.into(),
                serial_number: None,
                model_number: None,
                namespaces: vec![NamespaceSpec {
                    id: NamespaceId(1),
                    backend: RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: NAMESPACE_BLOCKS }),
                    nguid: None,
                    uuid: None,
                    ana_group: None,
                }],
            }],
            settings: TargetSettings::default(),
        })
        .expect("valid test target");
        let served = LoopbackTarget::start(target, 0, 1).expect("target starts");
        InProcessTarget { address: served.address(), _served: served }
    }
}
