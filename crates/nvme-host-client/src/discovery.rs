//! Discovery: connect to the discovery controller, read the discovery log (log 70h)
//! the way libnvme does, disconnect.

use std::net::SocketAddr;

use nvme_host::commands;
use nvme_spec::discovery::{DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_LOG_RECORD_BYTES, DISCOVERY_NQN};
use nvme_spec::log_page::log_id;
use nvme_spec::NamespaceId;

use crate::admin::{establish, run_admin};
use crate::connection::QueueConnection;
use crate::{ClientError, ConnectOptions};

/// Largest piece of the log read with one command (libnvme's NVME_LOG_PAGE_PDU_SIZE).
const DISCOVERY_CHUNK_BYTES: u32 = 4096;
/// Most records accepted (1 MiB of log): bounds what a hostile discovery controller
/// can make us allocate.
pub const MAX_DISCOVERY_RECORDS: u64 = 1023;
/// Times the log is read again when GENCTR changed under us (libnvme retries 10).
const MAX_DISCOVERY_ATTEMPTS: usize = 10;

/// Reads `length` bytes of the discovery log from `offset`, in 4 KiB pieces.
fn read_log(connection: &mut QueueConnection, offset: u64, length: u32, chunk: u32) -> Result<Vec<u8>, ClientError> {
    let mut data = Vec::with_capacity(length as usize);
    while (data.len() as u32) < length {
        let piece = (length - data.len() as u32).min(chunk);
        let command = commands::get_log_page(log_id::DISCOVERY, NamespaceId::NONE, offset + data.len() as u64, piece);
        let completion = run_admin(connection, command)?;
        if completion.data.len() < piece as usize {
            return Err(ClientError::InvalidController("short discovery log page".into()));
        }
        data.extend_from_slice(&completion.data[..piece as usize]);
    }
    Ok(data)
}

fn header(connection: &mut QueueConnection, chunk: u32) -> Result<DiscoveryLogHeader, ClientError> {
    let raw = read_log(connection, 0, DISCOVERY_LOG_RECORD_BYTES as u32, chunk)?;
    let raw: &[u8; DISCOVERY_LOG_RECORD_BYTES] =
        raw.as_slice().try_into().map_err(|_| ClientError::InvalidController("short discovery log header".into()))?;
    Ok(DiscoveryLogHeader::decode(raw))
}

/// Connects to the discovery controller at `address` (NQN
/// `nqn.2014-08.org.nvmexpress.discovery`, KATO 0; host identity, digests and
/// timeouts from `options`), reads the log header, then the whole log in pieces of
/// at most 4 KiB, checks that GENCTR did not change meanwhile (else reads again, up
/// to 10 times), and disconnects.
pub fn discover(address: SocketAddr, options: &ConnectOptions) -> Result<Vec<DiscoveryLogEntry>, ClientError> {
    let association = establish(options, address, DISCOVERY_NQN, 0, false)?;
    let chunk = DISCOVERY_CHUNK_BYTES.min(association.max_transfer_bytes.max(DISCOVERY_LOG_RECORD_BYTES as u32));
    let mut connection = association.connection;
    for _ in 0..MAX_DISCOVERY_ATTEMPTS {
        let first = header(&mut connection, chunk)?;
        if first.number_of_records > MAX_DISCOVERY_RECORDS {
            return Err(ClientError::InvalidController(format!(
                "discovery log announces {} records (at most {MAX_DISCOVERY_RECORDS} accepted)",
                first.number_of_records
            )));
        }
        let records = first.number_of_records as usize;
        let length = ((records + 1) * DISCOVERY_LOG_RECORD_BYTES) as u32;
        let log = read_log(&mut connection, 0, length, chunk)?;
        let again = header(&mut connection, chunk)?;
        if again.generation_counter != first.generation_counter || again.number_of_records != first.number_of_records {
            tracing::info!("discovery log changed while reading; reading again");
            continue;
        }
        let entries = log[DISCOVERY_LOG_RECORD_BYTES..]
            .chunks_exact(DISCOVERY_LOG_RECORD_BYTES)
            .filter_map(|raw| raw.try_into().ok().map(DiscoveryLogEntry::decode))
            .collect();
        return Ok(entries);
    }
    Err(ClientError::InvalidController("discovery log kept changing while being read".into()))
}
