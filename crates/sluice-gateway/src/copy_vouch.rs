//! How long this gateway's copies of the group's reservations may answer from
//! themselves (`nvme_target::group_reservations::CopyVouch`).
//!
//! A gateway that misses a reservation notice (lost, or its watch thread stalled)
//! stays silent, and the gateway that made the change fences (blocklists) it before
//! answering. Until then the silent gateway still has its old copy, and its reads and
//! writes fail at the OSDs once it is fenced, but a Reservation Conflict or a
//! Reservation Report is answered from the copy alone. Before issue 49 it went on
//! doing so until its watch was reported lost or its coordinator's next renewal found
//! it blocklisted: up to a quarter lease after the change was answered.
//!
//! Now the copies are vouched for only until [`copy_vouch_bound`] after the start of
//! the last round trip to the cluster that succeeded (a read of an attribute of the
//! group's object, every quarter of the bound, on a thread of its own so a slow
//! change never delays it). A fenced gateway's round trips fail, so its copies stop
//! answering within the bound of its last success before the fence; the gateway that
//! fenced it answers the change only [`fenced_answer_delay`] after the fence, which is
//! longer. The cost is one small read per gateway every quarter of the bound
//! (whatever the number of namespaces) and, only when a gateway had to be fenced, a
//! later answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_target::group_reservations::CopyVouch;
use runtime::{ClusterSpec, RadosObject};

/// How long a successful round trip vouches for the copies: a quarter of the notify
/// timeout (the group's lease), so that the gateway that fences a silent one waits
/// only that much more before answering.
pub fn copy_vouch_bound(notify_timeout: Duration) -> Duration {
    notify_timeout / 4
}

/// How long after fencing a silent gateway the change is answered: the bound, plus
/// time for the OSDs to learn of the blocklist (the monitor has committed it when
/// the fence returns; an OSD refuses the fenced client once its map has it, which
/// takes milliseconds on a healthy cluster).
pub fn fenced_answer_delay(notify_timeout: Duration) -> Duration {
    copy_vouch_bound(notify_timeout) + BLOCKLIST_PROPAGATION
}

/// See [`fenced_answer_delay`].
const BLOCKLIST_PROPAGATION: Duration = Duration::from_millis(500);

/// The attribute read as the round trip (it never exists: the read costs one OSD
/// operation and returns nothing).
const ROUND_TRIP_ATTRIBUTE: &str = "sluice.vouch";

/// The attribute of the group's object naming member `member`'s current cluster
/// client: "<global id> <address>". A gateway that does not acknowledge a reservation
/// notice is named there by the id the notify reports, also when its membership
/// lease lapsed meanwhile (a gateway stopped longer than a lease is alive when it
/// resumes, and must be fenced like any silent one).
pub fn client_attribute(member: &str) -> String {
    format!("sluice.client.{member}")
}

/// Where the thread renews from.
pub struct VouchSource {
    pub cluster: ClusterSpec,
    pub pool: String,
    /// The group's object.
    pub object: String,
    /// This gateway's member name (its [`client_attribute`]).
    pub member: String,
}

/// Starts the thread that renews `vouch` while this gateway's round trips to the
/// group's object succeed, and records this gateway's cluster client there
/// ([`client_attribute`]) each time it opens the object; it ends when `vouch` is the
/// last reference left (the authority went away).
pub fn start(source: VouchSource, notify_timeout: Duration, vouch: Arc<CopyVouch>) -> Result<(), String> {
    let bound = copy_vouch_bound(notify_timeout);
    std::thread::Builder::new()
        .name("sluice-vouch".into())
        .spawn(move || renew(&source, bound, &vouch))
        .map(|_| ())
        .map_err(|error| format!("cannot start the reservation vouch thread: {error}"))
}

/// Opens the group's object through the process's current cluster client and
/// records that client under this member's name.
fn open_and_record(source: &VouchSource) -> Option<RadosObject> {
    let object = RadosObject::open(&source.cluster, &source.pool, &source.object).ok()?;
    let client = object.my_address().map(|address| format!("{} {address}", object.instance_id()));
    match client.and_then(|client| object.set_attribute(&client_attribute(&source.member), client.as_bytes())) {
        Ok(()) => Some(object),
        Err(errno) => {
            tracing::debug!(%errno, "cannot record this gateway's cluster client yet");
            None
        }
    }
}

fn renew(source: &VouchSource, bound: Duration, vouch: &Arc<CopyVouch>) {
    let mut object = open_and_record(source);
    let mut failing = false;
    while Arc::strong_count(vouch) > 1 {
        let started = Instant::now();
        let result = match &object {
            Some(object) => object
                .attribute(ROUND_TRIP_ATTRIBUTE)
                .map(|_| ())
                .map_err(|errno| format!("{}: {errno}", object.describe())),
            None => Err(format!("{}/{}: cannot open it or record this gateway's client", source.pool, source.object)),
        };
        match result {
            Ok(()) => {
                vouch.extend_to(started + bound);
                if failing {
                    tracing::info!(object = %source.object, "reservation copies vouched for again");
                    failing = false;
                }
            }
            Err(error) => {
                if !failing {
                    tracing::warn!(%error, bound_ms = bound.as_millis() as u64,
                        "the cluster did not answer this gateway's round trip: its reservation copies stop answering \
                         Reservation Report and Conflict (path errors) once the bound passes, until it answers again");
                    failing = true;
                }
                // A fenced gateway rejoins with a new cluster client: open again.
                object = open_and_record(source);
            }
        }
        std::thread::sleep((bound / 4).saturating_sub(started.elapsed()));
    }
}
