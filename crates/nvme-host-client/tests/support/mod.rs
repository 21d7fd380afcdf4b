//! The real target on the io_uring runtime, in-process on loopback, started through
//! the same `target-server` glue as `sluice serve`.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use nvme_host_client::ConnectOptions;
use nvme_spec::NamespaceId;
use nvme_target::{
    AddressFamily, ListenerSpec, NamespaceSpec, SecureChannel, SubsystemSpec, Target, TargetSettings, TargetSpec,
};
use storage::{Backend, Geometry, RamBackend};
use target_server::LoopbackTarget;

pub const NQN: &str = "nqn.2026-11.io.sluice:client-test";
pub const BLOCK_BYTES: u32 = 512;
pub const NAMESPACE_BLOCKS: u64 = 65536; // 32 MiB
pub const NAMESPACE: NamespaceId = NamespaceId(1);

/// A RAM namespace that outlives target restarts.
pub fn ram_backend() -> Arc<RamBackend> {
    RamBackend::new(Geometry { block_size_bytes: BLOCK_BYTES, block_count: NAMESPACE_BLOCKS })
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// A running target serving `backend` as namespace 1 of [`NQN`] (and discovery) on
/// 127.0.0.1:`port`.
pub struct TestTarget {
    /// The target's state (ANA states, namespaces) while it runs.
    pub target: Arc<Target>,
    served: Option<LoopbackTarget>,
    pub address: SocketAddr,
    pub backend: Arc<RamBackend>,
}

impl TestTarget {
    pub fn start(port: u16, backend: Arc<RamBackend>) -> TestTarget {
        Self::start_on_threads(port, backend, 1)
    }

    /// `start` with `threads` runtime threads (connections spread over them).
    pub fn start_on_threads(port: u16, backend: Arc<RamBackend>, threads: usize) -> TestTarget {
        Self::start_with(port, backend, threads, TargetSettings::default())
    }

    /// `start` with ANA reporting on (CMIC bit 3, log 0Ch): one path of a
    /// multipath namespace.
    pub fn start_reporting_ana(port: u16, backend: Arc<RamBackend>) -> TestTarget {
        Self::start_with(port, backend, 1, TargetSettings { ana_reporting: true, ..TargetSettings::default() })
    }

    fn start_with(port: u16, backend: Arc<RamBackend>, threads: usize, settings: TargetSettings) -> TestTarget {
        Self::start_custom(port, backend, threads, settings, SecureChannel::None, nvme_target::HostAccess::allow_any())
    }

    /// A target whose listener has `secure_channel` and whose subsystem admits `hosts`.
    pub fn start_secure(secure_channel: SecureChannel, hosts: nvme_target::HostAccess) -> TestTarget {
        Self::start_custom(free_port(), ram_backend(), 1, TargetSettings::default(), secure_channel, hosts)
    }

    fn start_custom(
        port: u16,
        backend: Arc<RamBackend>,
        threads: usize,
        settings: TargetSettings,
        secure_channel: SecureChannel,
        hosts: nvme_target::HostAccess,
    ) -> TestTarget {
        let shared: Arc<dyn Backend> = backend.clone();
        let target = Target::new(TargetSpec {
            listeners: vec![ListenerSpec {
                address: "127.0.0.1".into(),
                port,
                family: AddressFamily::Ipv4,
                discovery_only: false,
                secure_channel,
            }],
            subsystems: vec![SubsystemSpec {
                hosts,
                pool: None,
                nqn: NQN.into(),
                serial_number: None,
                model_number: None,
                namespaces: vec![NamespaceSpec {
                    id: NAMESPACE,
                    backend: shared,
                    nguid: None,
                    uuid: None,
                    ana_group: None,
                }],
            }],
            settings,
        })
        .expect("target");
        let mut attempts = 0;
        let served = loop {
            match LoopbackTarget::start(target.clone(), port, threads) {
                Ok(served) => break served,
                Err(error) if attempts < 50 => {
                    attempts += 1;
                    eprintln!("target start failed ({error}); retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(error) => panic!("cannot start the target: {error}"),
            }
        };
        let address = served.address();
        TestTarget { target, served: Some(served), address, backend }
    }

    /// A target on a free port with a fresh namespace.
    pub fn new() -> TestTarget {
        Self::start(free_port(), ram_backend())
    }

    /// Stops the runtime: every connection closes.
    pub fn stop(&mut self) {
        if let Some(mut served) = self.served.take() {
            served.stop().expect("runtime stops cleanly");
        }
    }
}

impl Drop for TestTarget {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Options for tests: short timeouts so a broken test fails fast.
pub fn options(address: SocketAddr) -> ConnectOptions {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 2;
    options.queue_size = 64;
    options.command_timeout = Duration::from_secs(10);
    options.connect_timeout = Duration::from_secs(5);
    options.reconnect_delay = Duration::from_millis(200);
    options.controller_loss_timeout = Duration::from_secs(20);
    options
}

pub fn pattern(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..length)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}
