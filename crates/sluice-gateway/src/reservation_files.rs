//! Persist Through Power Loss on disk: one JSON file per namespace with PTPL on,
//! `<state_dir>/reservations/<NGUID>.json`, written by a thread of its own (write to
//! a temporary file, fsync, rename, fsync the directory) so no runtime thread waits
//! for the disk. Saves are applied in the order the target made them.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

use nvme_target::reservation_store::{NamespaceKey, PersistTicket, ReservationStore};
use nvme_target::reservations::{Holder, Registrant, ReservationState, ReservationType};
use serde::{Deserialize, Serialize};

/// Bumped when the record layout changes; older layouts are refused by name.
const RECORD_FORMAT: u32 = 1;

/// What one file holds.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Record {
    format: u32,
    subsystem_nqn: String,
    nsid: u32,
    /// NGUID, 32 hex digits: the file name, repeated to catch a renamed file.
    nguid: String,
    /// PRGEN.
    generation: u32,
    registrants: Vec<RecordRegistrant>,
    holder: Option<RecordHolder>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordRegistrant {
    /// HOSTID, 32 hex digits.
    host_id: String,
    /// RKEY.
    key: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordHolder {
    /// RTYPE, 1..=6.
    rtype: u8,
    /// HOSTID of the holder; none for the all-registrants types.
    host_id: Option<String>,
}

pub(crate) fn hex(bytes: &[u8; 16]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

pub(crate) fn unhex(text: &str) -> Result<[u8; 16], String> {
    let mut bytes = [0u8; 16];
    // ASCII only, so that the byte slices below fall on character boundaries.
    if text.len() != 32 || !text.is_ascii() {
        return Err(format!("{text:?} is not 32 hex digits"));
    }
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).map_err(|_| format!("{text:?} is not hex"))?;
    }
    Ok(bytes)
}

impl Record {
    fn from_state(key: &NamespaceKey, state: &ReservationState) -> Record {
        Record {
            format: RECORD_FORMAT,
            subsystem_nqn: key.subsystem_nqn.clone(),
            nsid: key.namespace_id.0,
            nguid: hex(&key.nguid),
            generation: state.generation,
            registrants: registrants_to_record(state),
            holder: holder_to_record(state),
        }
    }

    fn into_state(self) -> Result<ReservationState, String> {
        if self.format != RECORD_FORMAT {
            return Err(format!("record format {} (this sluice reads {RECORD_FORMAT})", self.format));
        }
        let registrants = registrants_from_record(&self.registrants)?;
        let holder = holder_from_record(self.holder)?;
        Ok(ReservationState { generation: self.generation, registrants, holder, persist_through_power_loss: true })
    }
}

/// The registrants as a record keeps them (here and in a gateway group's object).
pub(crate) fn registrants_to_record(state: &ReservationState) -> Vec<RecordRegistrant> {
    state
        .registrants
        .iter()
        .map(|registrant| RecordRegistrant { host_id: hex(&registrant.host), key: registrant.key })
        .collect()
}

/// The holder as a record keeps it.
pub(crate) fn holder_to_record(state: &ReservationState) -> Option<RecordHolder> {
    state.holder.map(|holder| RecordHolder { rtype: holder.kind as u8, host_id: holder.host.as_ref().map(hex) })
}

/// The registrants of a record, checked.
pub(crate) fn registrants_from_record(registrants: &[RecordRegistrant]) -> Result<Vec<Registrant>, String> {
    registrants
        .iter()
        .map(|registrant| Ok(Registrant { host: unhex(&registrant.host_id)?, key: registrant.key }))
        .collect()
}

/// The holder of a record, checked.
pub(crate) fn holder_from_record(holder: Option<RecordHolder>) -> Result<Option<Holder>, String> {
    holder
        .map(|holder| {
            Ok(Holder {
                kind: ReservationType::from_u8(holder.rtype)
                    .ok_or_else(|| format!("reservation type {} is not 1..=6", holder.rtype))?,
                host: holder.host_id.as_deref().map(unhex).transpose()?,
            })
        })
        .transpose()
}

/// One save for the writer thread.
struct Job {
    path: PathBuf,
    /// The file's new content; `None` removes it.
    content: Option<Vec<u8>>,
    done: PersistTicket,
}

/// The reservation store of `sluice serve` (`[target] state_dir`).
pub struct ReservationFiles {
    directory: PathBuf,
    jobs: Mutex<Sender<Job>>,
}

impl ReservationFiles {
    /// Opens (creating it, mode 0700) `<state_dir>/reservations` and starts the
    /// writer thread.
    pub fn open(state_dir: &Path) -> Result<ReservationFiles, String> {
        let directory = state_dir.join("reservations");
        let create = || -> std::io::Result<()> {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new().recursive(true).mode(0o700).create(&directory)?;
            // Fails early when the directory is not writable.
            let probe = directory.join(".probe");
            File::create(&probe)?;
            fs::remove_file(&probe)
        };
        create().map_err(|error| {
            format!(
                "[target] state_dir: cannot use {}: {error}; create it writable for sluice or choose another directory",
                directory.display()
            )
        })?;
        let (sender, receiver) = channel::<Job>();
        let sync_directory = directory.clone();
        std::thread::Builder::new()
            .name("sluice-ptpl".into())
            .spawn(move || {
                for job in receiver {
                    let result =
                        write_job(&job, &sync_directory).map_err(|error| format!("{}: {error}", job.path.display()));
                    job.done.finish(result);
                }
            })
            .map_err(|error| format!("cannot start the reservation writer thread: {error}"))?;
        Ok(ReservationFiles { directory, jobs: Mutex::new(sender) })
    }

    fn path_of(&self, nguid: &[u8; 16]) -> PathBuf {
        self.directory.join(format!("{}.json", hex(nguid)))
    }
}

fn write_job(job: &Job, directory: &Path) -> std::io::Result<()> {
    match &job.content {
        // Written whole, durably, the rename included.
        Some(content) => return storage::durable_file::write_atomically(&job.path, content),
        None => match fs::remove_file(&job.path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        },
    }
    // The rename or removal itself is durable once the directory is.
    File::open(directory)?.sync_all()
}

impl ReservationStore for ReservationFiles {
    fn load(&self, nguid: &[u8; 16]) -> Result<Option<ReservationState>, String> {
        storage::service::debug_assert_may_block("reading a reservation record");
        let path = self.path_of(nguid);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("{}: {error}", path.display())),
        };
        let record: Record = serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
        if record.nguid != hex(nguid) {
            return Err(format!("{}: holds NGUID {}, not the namespace's", path.display(), record.nguid));
        }
        record.into_state().map_err(|error| format!("{}: {error}", path.display())).map(Some)
    }

    fn save(&self, key: NamespaceKey, state: Option<ReservationState>, done: PersistTicket) {
        let content = state.map(|state| {
            let mut text = serde_json::to_vec_pretty(&Record::from_state(&key, &state)).unwrap_or_default();
            text.push(b'\n');
            text
        });
        let job = Job { path: self.path_of(&key.nguid), content, done };
        let sent = self.jobs.lock().unwrap_or_else(|poison| poison.into_inner()).send(job);
        if let Err(std::sync::mpsc::SendError(job)) = sent {
            job.done.finish(Err("the reservation writer thread is gone".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::NamespaceId;

    #[test]
    fn a_saved_state_loads_back_and_removal_forgets_it() {
        let dir = std::env::temp_dir().join(format!("sluice-ptpl-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let files = ReservationFiles::open(&dir).unwrap();
        let key = NamespaceKey {
            subsystem_nqn: "nqn.2026-11.io.sluice:t".into(),
            namespace_id: NamespaceId(3),
            nguid: [7; 16],
        };
        let state = ReservationState {
            generation: 5,
            registrants: vec![Registrant { host: [0xA; 16], key: 0xA1 }, Registrant { host: [0xB; 16], key: 0xB2 }],
            holder: Some(Holder { kind: ReservationType::WriteExclusive, host: Some([0xA; 16]) }),
            persist_through_power_loss: true,
        };
        let wait = |ticket: &PersistTicket| {
            for _ in 0..500 {
                if let Some(result) = ticket.take() {
                    return result;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            panic!("save never finished");
        };
        let ticket = PersistTicket::new(None);
        files.save(key.clone(), Some(state.clone()), ticket.clone());
        wait(&ticket).unwrap();
        assert_eq!(files.load(&[7; 16]).unwrap(), Some(state));
        assert_eq!(files.load(&[8; 16]).unwrap(), None);
        let ticket = PersistTicket::new(None);
        files.save(key, None, ticket.clone());
        wait(&ticket).unwrap();
        assert_eq!(files.load(&[7; 16]).unwrap(), None);
        // A damaged record is an error naming the file, not a panic.
        fs::write(dir.join("reservations").join(format!("{}.json", hex(&[9; 16]))), "{ not json").unwrap();
        assert!(files.load(&[9; 16]).unwrap_err().contains(".json"));
        let _ = fs::remove_dir_all(&dir);
    }
}
