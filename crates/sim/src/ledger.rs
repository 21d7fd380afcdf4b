//! What hosts were told about the namespaces they manage (Namespace Management and
//! Attachment on the thin pool), and the check that a restarted target's pool table
//! agrees: a create, delete, attach or detach a host saw succeed survives any crash.

use std::collections::BTreeMap;

use storage::CarveRecord;

/// What is known of one fact about a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    Yes,
    No,
    /// A command that would change it went out and its outcome was not seen.
    Unknown,
}

#[derive(Clone, Debug)]
struct Entry {
    /// The host that created and manages it.
    owner_nqn: String,
    exists: Known,
    attached_to_owner: Known,
}

/// Per NSID, what the hosts were told.
#[derive(Debug, Default)]
pub struct NamespaceLedger {
    entries: BTreeMap<u32, Entry>,
    /// Creates that may still run at the target: sent and not answered, or whose
    /// answer was lost (their job may still be queued) until the target crashes.
    floating_creates: u32,
}

impl NamespaceLedger {
    /// A host was told namespace `nsid` was created (unattached).
    pub fn created(&mut self, nsid: u32, owner_nqn: &str) {
        self.entries
            .insert(nsid, Entry { owner_nqn: owner_nqn.to_owned(), exists: Known::Yes, attached_to_owner: Known::No });
    }

    /// A create went out: until it is answered, it may have taken the NSID of any
    /// namespace deleted before (the target hands out the lowest free one).
    pub fn creating(&mut self) {
        self.floating_creates += 1;
        for entry in self.entries.values_mut().filter(|entry| entry.exists == Known::No) {
            entry.exists = Known::Unknown;
            entry.attached_to_owner = Known::Unknown;
        }
    }

    /// The entry of `nsid` while it is still `owner_nqn`'s namespace. Answers can
    /// arrive in another order than the target acted: after host A's delete of NSID 2
    /// ran, host B's create may take NSID 2 and be answered first, and A's answer
    /// then speaks of A's namespace, not B's.
    fn owned(&mut self, nsid: u32, owner_nqn: &str) -> Option<&mut Entry> {
        self.entries.get_mut(&nsid).filter(|entry| entry.owner_nqn == owner_nqn)
    }

    /// A command that may change whether `owner_nqn`'s `nsid` exists went out.
    pub fn existence_changing(&mut self, nsid: u32, owner_nqn: &str) {
        if let Some(entry) = self.owned(nsid, owner_nqn) {
            entry.exists = Known::Unknown;
        }
    }

    /// A create was answered (with or without a namespace): it will not run again.
    pub fn create_answered(&mut self) {
        self.floating_creates = self.floating_creates.saturating_sub(1);
    }

    /// The target crashed: creates it had not run never will.
    pub fn target_crashed(&mut self) {
        self.floating_creates = 0;
    }

    /// The host was told its `nsid` is deleted. While a create may still run, it may
    /// take this NSID again, so the NSID's existence is then unknown, not "no".
    pub fn deleted(&mut self, nsid: u32, owner_nqn: &str) {
        let floating = self.floating_creates > 0;
        if let Some(entry) = self.owned(nsid, owner_nqn) {
            entry.exists = if floating { Known::Unknown } else { Known::No };
        }
    }

    /// An attach or detach of `owner_nqn`'s `nsid` went out.
    pub fn attachment_changing(&mut self, nsid: u32, owner_nqn: &str) {
        if let Some(entry) = self.owned(nsid, owner_nqn) {
            entry.attached_to_owner = Known::Unknown;
        }
    }

    /// The host was told its `nsid` is attached (`true`) or detached.
    pub fn attached(&mut self, nsid: u32, owner_nqn: &str, attached: bool) {
        if let Some(entry) = self.owned(nsid, owner_nqn) {
            entry.attached_to_owner = if attached { Known::Yes } else { Known::No };
        }
    }

    /// Differences between what hosts were told and the pool table of subsystem
    /// `subsystem_nqn` (its carves' bindings), as messages.
    pub fn disagreements(&self, records: &[CarveRecord], subsystem_nqn: &str) -> Vec<String> {
        let bound = |nsid: u32| {
            records.iter().find_map(|record| {
                record
                    .binding
                    .as_ref()
                    .filter(|binding| binding.subsystem_nqn == subsystem_nqn && binding.namespace_id == nsid)
            })
        };
        let mut problems = Vec::new();
        for (&nsid, entry) in &self.entries {
            let binding = bound(nsid);
            match (entry.exists, binding) {
                (Known::Yes, None) => {
                    problems.push(format!("namespace {nsid}: created as a host was told, gone from the pool table"))
                }
                (Known::No, Some(_)) => {
                    problems.push(format!("namespace {nsid}: deleted as a host was told, still in the pool table"))
                }
                _ => {}
            }
            let Some(binding) = binding else { continue };
            let attached = binding.all_hosts || binding.hosts.contains(&entry.owner_nqn);
            match (entry.attached_to_owner, attached) {
                (Known::Yes, false) => problems
                    .push(format!("namespace {nsid}: attached as its host was told, detached in the pool table")),
                (Known::No, true) => problems
                    .push(format!("namespace {nsid}: detached as its host was told, attached in the pool table")),
                _ => {}
            }
        }
        problems
    }
}
