//! NVMe/TCP transport binding codec (NVM Express TCP Transport Specification 1.0):
//! PDU header layouts, an incremental [`PduReader`] for the receive side, a
//! [`PduWriter`] for the send side, and the CRC32C header / data digests.
//!
//! Pure and allocation-free on the hot path: no I/O, no sockets, no unsafe. The
//! reader borrows data from the caller's input and stages only the fixed-size header
//! in an array; the writer appends to a caller-owned `Vec<u8>`. Network input is
//! treated as hostile: no input makes the reader panic, and every length field is
//! checked against a named limit before anything past the fixed-size header is
//! consumed. Field names are spelled out; the spec mnemonic is in each doc comment.
//!
//! A controller uses it like this:
//!
//! ```
//! use nvme_tcp_wire::*;
//!
//! let mut reader = PduReader::new(Role::Controller, ReaderLimits { max_data_bytes: 8192 });
//! let mut writer = PduWriter::new();
//!
//! // What a host sends first.
//! let mut wire = Vec::with_capacity(IC_PDU_BYTES);
//! let icreq = InitializeConnectionRequest {
//!     protocol_format_version: 0,
//!     host_pdu_data_alignment: 0,
//!     digests: DigestSettings { header: true, data: true },
//!     max_r2t_outstanding: 0,
//! };
//! writer.write_header(&PduHeader::IcReq(icreq), 0, &mut wire);
//!
//! let mut input = &wire[..];
//! match reader.next_event(&mut input) {
//!     Ok(Some(ReadEvent::Header { header: PduHeader::IcReq(request), .. })) => {
//!         // Grant what was asked; both directions use the digests from now on.
//!         reader.set_digests(request.digests);
//!         writer.set_digests(request.digests);
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! assert!(input.is_empty());
//! ```
#![forbid(unsafe_code)]
// Network input must never panic the codec (a failure is a status or an error); tests may index.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::unreachable)
)]
#![warn(missing_docs)]

pub mod digest;
pub mod error;
pub mod pdu;
pub mod reader;
pub mod writer;

pub use digest::{crc32c, crc32c_append, DataDigest, DIGEST_BYTES};
pub use error::{FatalErrorStatus, ReadError, ReadErrorKind};
pub use pdu::{
    flags, offsets, CapsuleCommand, CapsuleResponse, DataHeader, DigestSettings, InitializeConnectionRequest,
    InitializeConnectionResponse, PduHeader, PduType, ReadyToTransfer, TerminationRequest,
    CAPSULE_COMMAND_HEADER_BYTES, CAPSULE_RESPONSE_HEADER_BYTES, COMMON_HEADER_BYTES, DATA_HEADER_BYTES, IC_PDU_BYTES,
    MAX_DATA_ALIGNMENT_DWORDS, MAX_TERMINATION_DATA_BYTES, MAX_TERMINATION_PDU_BYTES, PROTOCOL_FORMAT_VERSION_1_0,
    R2T_HEADER_BYTES, TERMINATION_HEADER_BYTES,
};
pub use reader::{PduReader, ReadEvent, ReaderLimits, Role};
pub use writer::PduWriter;
