//! What a gateway-group seed draws.

use super::authority::ClusterFaults;
use super::context::LOCK_BLOCKS;
use super::host::GroupHostSettings;
use crate::network::NetworkFaults;
use crate::rng::Rng;

const MS: u64 = 1_000_000;

/// What a group seed draws.
#[derive(Clone, Debug)]
pub(super) struct GroupPlan {
    pub(super) gateways: usize,
    pub(super) hosts: usize,
    pub(super) namespace_blocks: u64,
    pub(super) host: GroupHostSettings,
    pub(super) network: NetworkFaults,
    pub(super) store_latency_max_ns: u64,
    pub(super) cluster: ClusterFaults,
    pub(super) mean_fault_interval_ns: u64,
    /// Mean time between two moves of the ANA group (a drain, a balancing move).
    pub(super) mean_ana_move_interval_ns: u64,
    pub(super) run_ns: u64,
    pub(super) max_commands: u64,
}

impl GroupPlan {
    pub(super) fn draw(rng: &mut Rng) -> GroupPlan {
        let mut plan = Self::draw_shape(rng);
        // Each host's pace spends the command budget over about the whole run.
        plan.host.think_ns = plan.run_ns * plan.hosts as u64 / plan.max_commands;
        plan
    }

    fn draw_shape(rng: &mut Rng) -> GroupPlan {
        let calm = rng.chance(250_000);
        let queue_size = rng.between(4, 16) as u16;
        GroupPlan {
            gateways: rng.between(2, 3) as usize,
            hosts: rng.between(2, 4) as usize,
            namespace_blocks: LOCK_BLOCKS + rng.between(8, 64),
            host: GroupHostSettings {
                queue_size,
                queue_depth: rng.between(2, u64::from(queue_size - 1).min(8)) as usize,
                keep_alive_timeout_ms: rng.between(1_000, 4_000) as u32,
                command_timeout_ms: rng.between(1_500, 5_000),
                max_io_blocks: rng.between(1, 8),
                think_ns: 0,
            },
            network: NetworkFaults {
                latency_min_ns: 5_000,
                latency_max_ns: rng.between(5_000, 300_000),
                max_segment_bytes: [1460, 9000, 65536][rng.below(3) as usize],
                tiny_segment_per_million: [0, 10_000][rng.below(2) as usize],
                corrupt_per_million: 0,
            },
            store_latency_max_ns: rng.between(50_000, 2 * MS),
            cluster: ClusterFaults {
                change_latency_max_ns: rng.between(100_000, 3 * MS),
                notice_delay_max_ns: rng.between(50_000, 5 * MS),
                lost_notice_per_million: if calm { 0 } else { [0, 40_000, 150_000][rng.below(3) as usize] },
                lease_ns: rng.between(20 * MS, 200 * MS),
            },
            mean_fault_interval_ns: if calm { 0 } else { rng.between(10 * MS, 150 * MS) },
            mean_ana_move_interval_ns: rng.between(20 * MS, 150 * MS),
            run_ns: 300 * MS,
            max_commands: 3_000,
        }
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "gateway group: {} gateways, {} hosts, {} x 512 B blocks ({LOCK_BLOCKS} lock blocks), queue of {} at QD {}, \
             store latency <= {} us, changes <= {} us, notices <= {} us ({} ppm lost), lease {} ms, faults every ~{} ms, ANA moves every ~{} ms",
            self.gateways,
            self.hosts,
            self.namespace_blocks,
            self.host.queue_size,
            self.host.queue_depth,
            self.store_latency_max_ns / 1_000,
            self.cluster.change_latency_max_ns / 1_000,
            self.cluster.notice_delay_max_ns / 1_000,
            self.cluster.lost_notice_per_million,
            self.cluster.lease_ns / MS,
            self.mean_fault_interval_ns / MS,
            self.mean_ana_move_interval_ns / MS,
        )
    }
}
