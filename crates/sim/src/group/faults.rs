//! The faults a group seed injects: a gateway crash, the group's power loss (every
//! gateway down at once, for half a lease to three), a host partitioned, a connection
//! reset, a broken watch, a cluster restart, and a stall of one gateway's storage.

use super::world::{GroupWorld, MS};

impl GroupWorld {
    /// The gateway's process dies: its connections reset; each storage request and
    /// reservation change it had in flight reached the cluster or not.
    pub(super) fn crash_gateway(&mut self, index: usize, down_ns: u64, why: &str) {
        self.crashes += 1;
        self.context.store.gateway_crashed(index);
        self.context.cluster.gateway_crashed(index);
        self.fences.gateway_crashed(index);
        self.ana_gateway_crashed(index);
        self.context.notices.gateway_gone(self.gateways[index].instance);
        let gateway = &mut self.gateways[index];
        gateway.target = None;
        gateway.loaded = false;
        gateway.restart_at_ns = None;
        let links: Vec<u64> = gateway.connections.keys().chain(gateway.draining.keys()).copied().collect();
        gateway.connections.clear();
        gateway.draining.clear();
        gateway.down_until_ns = self.context.clock.elapsed_ns() + down_ns;
        for id in links {
            if let Some(link) = self.context.links.get_mut(&id) {
                link.reset();
                link.target_gone = true;
            }
            self.context.oracle.settle_link(id);
        }
        self.context.note(|| format!("gateway {index} went down: {why}"));
    }

    pub(super) fn schedule_fault(&mut self) {
        let mean = self.plan.mean_fault_interval_ns;
        self.next_fault_ns = if mean == 0 {
            u64::MAX
        } else {
            self.context.clock.elapsed_ns() + self.context.rng.between(mean / 4, mean * 2)
        };
    }

    pub(super) fn inject_fault(&mut self) {
        self.faults_injected += 1;
        let now_ns = self.context.clock.elapsed_ns();
        let gateway = self.context.rng.below(self.gateways.len() as u64) as usize;
        match self.context.rng.below(20) {
            0..=3 => {
                if self.gateways[gateway].target.is_some() {
                    let down_ns = self.context.rng.between(MS, 200 * MS);
                    self.crash_gateway(gateway, down_ns, "fault: crashed");
                }
            }
            4..=6 => {
                let victim = self.context.rng.below(self.hosts.len() as u64) as usize;
                let until = now_ns + self.context.rng.between(MS, 3_000 * MS);
                for link in self.context.links.values_mut().filter(|link| link.owner.host == victim) {
                    link.held_until_ns = link.held_until_ns.max(until);
                }
                self.context.note(|| format!("fault: host {victim} partitioned for {} ms", (until - now_ns) / MS));
            }
            7..=9 => {
                let ids: Vec<u64> = self.context.links.keys().copied().collect();
                if ids.is_empty() {
                    return;
                }
                let id = ids[self.context.rng.below(ids.len() as u64) as usize];
                if let Some(link) = self.context.links.get_mut(&id) {
                    link.reset();
                }
                self.context.note(|| format!("fault: link {id} reset"));
            }
            10..=13 => {
                let again_ns = self.context.rng.between(MS, 1_000 * MS);
                self.watch_breaks += 1;
                self.context.cluster.break_watch(gateway, again_ns);
                self.context.note(|| format!("fault: gateway {gateway}'s watch broke"));
            }
            16 => self.power_loss(),
            17..=19 => {
                let until = now_ns + self.context.rng.between(MS, self.plan.cluster.lease_ns);
                self.context.store.stall(gateway, until);
                self.fences.stalled(gateway, now_ns, until);
                self.context
                    .note(|| format!("fault: gateway {gateway}'s storage stalls for {} ms", (until - now_ns) / MS));
            }
            _ => {
                // 14 and 15: the cluster restarts.
                let until = now_ns + self.context.rng.between(MS, 500 * MS);
                self.cluster_restarts += 1;
                self.context.store.pause_until(until);
                self.context.cluster.restart(until);
                self.context.note(|| format!("fault: the cluster restarts for {} ms", (until - now_ns) / MS));
            }
        }
    }

    /// Every gateway goes down at once; with PTPL off the registrations and the
    /// reservation do not survive it if none comes back within a lease (their
    /// membership leases run out first).
    fn power_loss(&mut self) {
        let lease_ns = self.plan.cluster.lease_ns;
        self.power_losses += 1;
        for index in 0..self.gateways.len() {
            if self.gateways[index].target.is_some() {
                let down_ns = self.context.rng.between(lease_ns / 2, lease_ns * 3);
                self.crash_gateway(index, down_ns, "fault: the group's power loss");
            }
        }
    }
}
