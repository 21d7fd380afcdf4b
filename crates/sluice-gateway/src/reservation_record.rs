//! The record of one namespace's reservations in the cluster: the object's name, its
//! JSON layout (with a format number; other formats are refused by name) and reading
//! it. The whole record is rewritten on every change under a sequence compare
//! (`reservations.rs`).

use nvme_target::group_reservations::GroupUpdate;
use nvme_target::reservation_store::NamespaceKey;
use nvme_target::reservations::{Notice, ReservationState, MAX_REGISTRANTS};
use runtime::RadosObject;
use serde::{Deserialize, Serialize};

use crate::reservation_files::{
    hex, holder_from_record, holder_to_record, registrants_from_record, registrants_to_record, unhex, RecordHolder,
    RecordRegistrant,
};

/// Bumped when the record layout changes; other layouts are refused by name.
const RECORD_FORMAT: u32 = 1;
/// The object of one namespace.
pub fn reservation_object(group: &str, nguid: &[u8; 16]) -> String {
    format!("sluice.reservations.{group}.{}", hex(nguid))
}

/// What the object holds (JSON).
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct GroupRecord {
    format: u32,
    subsystem_nqn: String,
    nsid: u32,
    /// NGUID, 32 hex digits (also in the object's name).
    nguid: String,
    /// The group sequence: bumped by every change.
    sequence: u64,
    /// PRGEN.
    generation: u32,
    registrants: Vec<RecordRegistrant>,
    holder: Option<RecordHolder>,
    /// PTPL as the hosts set it (the cluster keeps the state either way).
    persist_through_power_loss: bool,
    /// The notices of recent changes, oldest first.
    notices: Vec<RecordNotice>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct RecordNotice {
    sequence: u64,
    host_id: String,
    /// Reservation Notification log page type: 1 registration preempted, 2
    /// reservation released, 3 reservation preempted.
    kind: u8,
}

fn notice_from(kind: u8) -> Result<Notice, String> {
    match kind {
        1 => Ok(Notice::RegistrationPreempted),
        2 => Ok(Notice::ReservationReleased),
        3 => Ok(Notice::ReservationPreempted),
        other => Err(format!("notice type {other} is not 1..=3")),
    }
}

impl GroupRecord {
    fn from_update(key: &NamespaceKey, update: &GroupUpdate) -> GroupRecord {
        let state = &update.state;
        GroupRecord {
            format: RECORD_FORMAT,
            subsystem_nqn: key.subsystem_nqn.clone(),
            nsid: key.namespace_id.0,
            nguid: hex(&key.nguid),
            sequence: update.sequence,
            generation: state.generation,
            registrants: registrants_to_record(state),
            holder: holder_to_record(state),
            persist_through_power_loss: state.persist_through_power_loss,
            notices: update
                .notices
                .iter()
                .map(|(sequence, host, notice)| RecordNotice {
                    sequence: *sequence,
                    host_id: hex(host),
                    kind: *notice as u8,
                })
                .collect(),
        }
    }

    fn into_update(self) -> Result<GroupUpdate, String> {
        if self.format != RECORD_FORMAT {
            return Err(format!("record format {} (this sluice reads {RECORD_FORMAT})", self.format));
        }
        let registrants = registrants_from_record(&self.registrants)?;
        if registrants.len() > MAX_REGISTRANTS {
            return Err(format!("{} registrants (at most {MAX_REGISTRANTS})", registrants.len()));
        }
        let holder = holder_from_record(self.holder)?;
        let notices = self
            .notices
            .iter()
            .map(|notice| Ok((notice.sequence, unhex(&notice.host_id)?, notice_from(notice.kind)?)))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(GroupUpdate {
            sequence: self.sequence,
            state: ReservationState {
                generation: self.generation,
                registrants,
                holder,
                persist_through_power_loss: self.persist_through_power_loss,
            },
            notices,
        })
    }
}

pub(crate) fn encode(key: &NamespaceKey, update: &GroupUpdate) -> Vec<u8> {
    serde_json::to_vec(&GroupRecord::from_update(key, update)).unwrap_or_default()
}

pub(crate) fn decode(bytes: &[u8]) -> Result<GroupUpdate, String> {
    serde_json::from_slice::<GroupRecord>(bytes).map_err(|error| error.to_string())?.into_update()
}

/// The record in `object`, `None` when there is none yet.
pub(crate) fn read(object: &RadosObject) -> Result<Option<GroupUpdate>, String> {
    match object.read_record() {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => decode(&bytes).map(Some).map_err(|error| format!("{}: {error}", object.describe())),
        Err(errno) => Err(format!("reading {}: {errno}", object.describe())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::NamespaceId;
    use nvme_target::reservations::{Holder, Registrant, ReservationType};

    #[test]
    fn records_round_trip_and_foreign_formats_are_refused() {
        let key = NamespaceKey {
            subsystem_nqn: "nqn.2026-11.io.sluice:t".into(),
            namespace_id: NamespaceId(2),
            nguid: [9; 16],
        };
        let update = GroupUpdate {
            sequence: 12,
            state: ReservationState {
                generation: 4,
                registrants: vec![Registrant { host: [0xA; 16], key: 0xA1 }],
                holder: Some(Holder { kind: ReservationType::WriteExclusive, host: Some([0xA; 16]) }),
                persist_through_power_loss: true,
            },
            notices: vec![(11, [0xB; 16], Notice::RegistrationPreempted)],
        };
        let bytes = encode(&key, &update);
        assert_eq!(decode(&bytes).unwrap(), update);
        let text = String::from_utf8(bytes).unwrap().replace("\"format\":1", "\"format\":9");
        assert!(decode(text.as_bytes()).unwrap_err().contains("record format 9"));
        assert!(decode(b"{}").is_err());
        assert_eq!(reservation_object("g1", &[0xAB; 16]), format!("sluice.reservations.g1.{}", "ab".repeat(16)));
    }
}
