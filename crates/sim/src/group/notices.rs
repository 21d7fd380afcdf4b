//! The reservation notices a gateway group owes its hosts: an entry in the
//! Reservation Notification log (80h) of each of the host's controllers, announced by
//! an Asynchronous Event (I/O command set specific, log 80h), on every gateway whose
//! copy of the reservations takes the change on.
//!
//! What a controller is owed: when a gateway's copy moves from sequence `p` to `c` (a
//! notice, a reload, the answer to one of its own commands), every notice of the
//! changes `p+1..=c` that the record at `c` still keeps (the group keeps the last 64)
//! for a host with a controller there. The hosts keep an Asynchronous Event Request
//! outstanding and, on a reservation event, read log 80h until it comes back empty (as
//! a Linux host's user space does after the kernel's uevent). Checked:
//! - every entry names the namespace and a notice type, its log page count follows the
//!   previous one (a gap: entries lost to the controller's bound of 64, which the
//!   specification allows; the checks below are then off for that controller);
//! - no more entries of a type than the controller was owed, counting the changes its
//!   gateway took on between the connection's arrival and the host learning its
//!   controller (notices then may or may not reach it);
//! - an empty page means every notice owed before the read was sent has been read;
//! - at the end, with the hosts idle for over a second, every notice owed to a
//!   controller still in use has been read (so the event was raised and delivered).
//!
//! A controller that is lost (the host tears its association down, the gateway
//! crashes or is fenced) loses its log: nothing more is owed to it.

use std::collections::BTreeMap;

use nvme_spec::NamespaceId;

use super::authority::Commit;
use super::reference::host_index;
use crate::host::NAMESPACE;

/// Notice types are 1..=3; index 0 is unused.
const TYPES: usize = 4;

/// One host's current controller, as far as notices go.
struct ControllerNotices {
    /// Its admin connection.
    link: u64,
    /// The host knows its controller (Connect answered).
    ready: bool,
    /// Notices owed since the host knew its controller: (when, type).
    owed: Vec<(u64, u8)>,
    /// Per type: notices its gateway took on before the host knew its controller.
    maybe: [u64; TYPES],
    read: [u64; TYPES],
    /// The last log page count read.
    last_count: u64,
    /// Entries were lost to the log's bound.
    overflowed: bool,
}

impl ControllerNotices {
    fn owed_before(&self, kind: usize, before_ns: u64) -> u64 {
        self.owed.iter().filter(|&&(at_ns, owed)| usize::from(owed) == kind && at_ns < before_ns).count() as u64
    }

    /// Every notice owed before `before_ns` has been read (per type).
    fn check_read(&self, host: u8, before_ns: u64, when: &str) -> Result<(), String> {
        if self.overflowed {
            return Ok(());
        }
        for kind in 1..TYPES {
            let owed = self.owed_before(kind, before_ns);
            if self.read[kind] < owed {
                return Err(format!(
                    "host {host}: {when}, its controller's log 80h gave {} notices of type {kind}, but {owed} were owed (its gateway took the changes on; owed {:?})",
                    self.read[kind], self.owed
                ));
            }
        }
        Ok(())
    }
}

/// What each host's controller is owed and has read.
#[derive(Default)]
pub struct NoticeLedger {
    /// Each gateway process's copy sequence when last looked at.
    copies: BTreeMap<u64, u64>,
    /// The notices the record keeps after each change: (sequence, host, type).
    records: BTreeMap<u64, Vec<(u64, u8, u8)>>,
    controllers: BTreeMap<u8, ControllerNotices>,
    /// Notices owed and entries read, for the summary.
    pub owed: u64,
    pub read: u64,
}

impl NoticeLedger {
    /// The cluster decided a change: the notices its record keeps.
    pub fn committed(&mut self, commit: &Commit) {
        if !commit.status.is_success() {
            return;
        }
        let kept = commit
            .update
            .notices
            .iter()
            .map(|(sequence, host, notice)| (*sequence, host_index(host), *notice as u8))
            .collect();
        self.records.insert(commit.sequence, kept);
    }

    /// Gateway process `instance`'s copy is at `sequence` now: the controllers there
    /// are owed the notices of the changes it took on since last time.
    /// `link_instance` says which process accepted each connection.
    pub fn copy_at(&mut self, instance: u64, sequence: u64, now_ns: u64, link_instance: &BTreeMap<u64, u64>) {
        let previous = self.copies.insert(instance, sequence).unwrap_or(0);
        if sequence <= previous {
            return;
        }
        let Some(kept) = self.records.get(&sequence) else {
            return;
        };
        for &(changed, host, kind) in kept {
            if changed <= previous || changed > sequence {
                continue;
            }
            let Some(controller) = self.controllers.get_mut(&host) else {
                continue;
            };
            if link_instance.get(&controller.link) != Some(&instance) {
                continue;
            }
            if controller.ready {
                controller.owed.push((now_ns, kind));
                self.owed += 1;
            } else if let Some(maybe) = controller.maybe.get_mut(usize::from(kind)) {
                *maybe += 1;
            }
        }
    }

    /// Gateway process `instance` is gone.
    pub fn gateway_gone(&mut self, instance: u64) {
        self.copies.remove(&instance);
    }

    /// Host `host` opened an admin connection (a new controller, once connected).
    pub fn controller_opened(&mut self, host: u8, link: u64) {
        self.controllers.insert(
            host,
            ControllerNotices {
                link,
                ready: false,
                owed: Vec::new(),
                maybe: [0; TYPES],
                read: [0; TYPES],
                last_count: 0,
                overflowed: false,
            },
        );
    }

    /// The host learnt its controller.
    pub fn controller_ready(&mut self, host: u8) {
        if let Some(controller) = self.controllers.get_mut(&host) {
            controller.ready = true;
        }
    }

    /// The host let its controller go: its log is gone.
    pub fn controller_lost(&mut self, host: u8) {
        self.controllers.remove(&host);
    }

    /// Host `host` read `page` of log 80h on admin connection `link`, with a command
    /// sent at `sent_ns`. Ok(true) when the page was empty.
    pub fn page_read(&mut self, host: u8, link: u64, page: &[u8], sent_ns: u64) -> Result<bool, String> {
        let Some(controller) = self.controllers.get_mut(&host).filter(|controller| controller.link == link) else {
            return Ok(false);
        };
        if page.len() < 16 {
            return Err(format!("host {host}: a log 80h page of {} bytes", page.len()));
        }
        let word = |offset: usize| u64::from_le_bytes(page[offset..offset + 8].try_into().unwrap_or([0; 8]));
        let count = word(0);
        if count == 0 {
            controller.check_read(host, sent_ns, "at an empty read")?;
            return Ok(true);
        }
        let kind = usize::from(page[8]);
        let nsid = u32::from_le_bytes(page[12..16].try_into().unwrap_or([0; 4]));
        if !(1..TYPES).contains(&kind) || NamespaceId(nsid) != NAMESPACE {
            return Err(format!("host {host}: a log 80h entry of type {kind} for namespace {nsid}"));
        }
        if count <= controller.last_count {
            return Err(format!("host {host}: log 80h page count {count} after {}", controller.last_count));
        }
        if count != controller.last_count + 1 {
            controller.overflowed = true;
        }
        controller.last_count = count;
        controller.read[kind] += 1;
        self.read += 1;
        let owed = controller.owed_before(kind, u64::MAX) + controller.maybe[kind];
        if controller.read[kind] > owed {
            return Err(format!(
                "host {host}: its controller's log 80h gave {} notices of type {kind}, more than the {owed} its gateway's changes owe it",
                controller.read[kind]
            ));
        }
        Ok(false)
    }

    /// The end: every notice owed to `host`'s controller before `before_ns` has been
    /// read, if the host still uses the controller on connection `link`.
    pub fn check_end(&self, host: u8, link: u64, before_ns: u64) -> Result<(), String> {
        match self.controllers.get(&host) {
            Some(controller) if controller.link == link && controller.ready => {
                controller.check_read(host, before_ns, "at the end")
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use nvme_spec::Status;
    use nvme_target::group_reservations::GroupUpdate;
    use nvme_target::reservations::Notice;

    use super::*;
    use crate::group::reference::host_identifier;

    fn commit(sequence: u64, notices: Vec<(u64, HostNotice)>) -> Commit {
        Commit {
            instance: 1,
            call: 0,
            host: None,
            change: None,
            status: Status::SUCCESS,
            sequence,
            update: GroupUpdate {
                sequence,
                notices: notices
                    .into_iter()
                    .map(|(changed, (host, notice))| (changed, host_identifier(host), notice))
                    .collect(),
                ..GroupUpdate::default()
            },
        }
    }

    type HostNotice = (usize, Notice);

    fn page(count: u64, kind: u8) -> Vec<u8> {
        let mut page = vec![0; 64];
        page[0..8].copy_from_slice(&count.to_le_bytes());
        page[8] = kind;
        page[12..16].copy_from_slice(&NAMESPACE.0.to_le_bytes());
        page
    }

    #[test]
    fn a_controller_is_owed_what_its_gateway_took_on_and_must_read_it() {
        let mut ledger = NoticeLedger::default();
        let links = BTreeMap::from([(7, 3)]);
        ledger.controller_opened(0, 7);
        ledger.controller_ready(0);
        ledger.committed(&commit(1, vec![(1, (0, Notice::RegistrationPreempted))]));
        ledger.committed(&commit(
            2,
            vec![(1, (0, Notice::RegistrationPreempted)), (2, (1, Notice::ReservationReleased))],
        ));
        // Gateway process 3 jumps from 0 to 2: host 0 is owed the notice of 1 only.
        ledger.copy_at(3, 2, 100, &links);
        assert_eq!(ledger.owed, 1);
        assert!(ledger.page_read(0, 7, &[0; 64], 50).is_ok(), "a read sent before the change");
        assert!(ledger.page_read(0, 7, &[0; 64], 150).is_err(), "empty, though one is owed");
        assert_eq!(ledger.page_read(0, 7, &page(1, 1), 160), Ok(false));
        assert_eq!(ledger.page_read(0, 7, &[0; 64], 170), Ok(true));
        assert!(ledger.page_read(0, 7, &page(2, 1), 180).is_err(), "one more than owed");
    }

    #[test]
    fn a_gap_in_the_counts_means_entries_were_lost_to_the_bound() {
        let mut ledger = NoticeLedger::default();
        let links = BTreeMap::from([(7, 3)]);
        ledger.controller_opened(0, 7);
        ledger.controller_ready(0);
        ledger.committed(&commit(
            1,
            vec![(1, (0, Notice::ReservationPreempted)), (1, (0, Notice::ReservationPreempted))],
        ));
        ledger.copy_at(3, 1, 100, &links);
        assert_eq!(ledger.page_read(0, 7, &page(2, 3), 110), Ok(false));
        assert_eq!(ledger.page_read(0, 7, &[0; 64], 120), Ok(true), "overflowed: not checked");
        assert!(ledger.check_end(0, 7, 1_000).is_ok());
        ledger.controller_lost(0);
        assert!(ledger.check_end(0, 7, 1_000).is_ok());
    }
}
