//! The bound in time of each gateway's copy of the reservations (`CopyVouch`), as
//! `sluice serve` keeps it (`crates/sluice-gateway/src/copy_vouch.rs`): every quarter of
//! the bound, a round trip to the cluster that succeeds (the gateway is not fenced,
//! the cluster not restarting) vouches for the copy until the bound after it; a copy
//! not vouched for answers no Reservation Report or Conflict from itself (a path
//! error instead).
//!
//! A fenced gateway is cut off from storage at once but learns of the fence only
//! 10-100 ms later (its watch reported lost), and marks its copy unknown then;
//! meanwhile only the vouch, which its failing round trips no longer renew, stops its
//! copy from answering, and the gateway that fenced it answers the change only
//! `fenced_answer_delay_ns` after the fence. The `no-copy-vouch` canary takes the
//! vouch away: the fenced gateway answers from its stale copy after the change was
//! answered, which the reservation oracle catches.

use super::authority::copy_vouch_bound_ns;
use super::world::{GroupWorld, NGUID};

impl GroupWorld {
    /// Renews the vouch of every gateway whose round trip is due and succeeds, and
    /// marks unknown the copies of fenced gateways that learn of their fence now.
    pub(super) fn renew_vouches(&mut self) -> bool {
        let now_ns = self.context.clock.elapsed_ns();
        let bound_ns = copy_vouch_bound_ns(self.plan.cluster.lease_ns);
        let mut moved = false;
        for index in 0..self.gateways.len() {
            let gateway = &mut self.gateways[index];
            let Some(target) = gateway.target.clone() else {
                continue;
            };
            if gateway.mark_unknown_at_ns.is_some_and(|at| at <= now_ns) {
                gateway.mark_unknown_at_ns = None;
                target.mark_group_reservations_unknown(&NGUID);
                moved = true;
                self.context.note(|| format!("gateway {index} learns it was fenced: reservations unknown"));
            }
            let gateway = &mut self.gateways[index];
            let Some(vouch) = gateway.vouch.clone() else {
                continue;
            };
            if gateway.next_renewal_ns > now_ns {
                continue;
            }
            gateway.next_renewal_ns = now_ns + (bound_ns / 4).max(1);
            if self.context.cluster.round_trip_succeeds(index, gateway.instance) {
                vouch.extend_to(self.context.clock.instant_at(now_ns + bound_ns));
            }
            moved = true;
        }
        moved
    }

    /// When the vouches next need the world: a round trip due, a fenced gateway
    /// learning of its fence, or a vouch running out (for the trouble spans).
    pub(super) fn vouch_events_ns(&self) -> Vec<u64> {
        let now_ns = self.context.clock.elapsed_ns();
        let mut events = Vec::new();
        for gateway in self.gateways.iter().filter(|gateway| gateway.target.is_some()) {
            events.extend(gateway.mark_unknown_at_ns);
            if let Some(vouch) = &gateway.vouch {
                events.push(gateway.next_renewal_ns);
                let until_ns = vouch.until().map(|until| self.context.clock.ns_of(until));
                events.extend(until_ns.filter(|&until| until > now_ns));
            }
        }
        events
    }
}
