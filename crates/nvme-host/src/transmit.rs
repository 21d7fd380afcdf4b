//! Sending: ICReq, the Fabrics Connect command, command capsules with their
//! in-capsule data, H2CData answering R2Ts, and the H2CTermReq that ends a broken
//! stream. Everything is encoded at `transmit` time into a [`TransmitBatch`]: headers
//! into its own bytes, write data by reference (see `transmit_batch.rs`), so data is
//! never copied in user space on the way out (only small pieces are, where copying
//! is cheaper than a reference).

use std::ops::Range;
use std::sync::Arc;

use nvme_spec::fabrics::{ConnectCommand, ConnectData, CONNECT_DATA_BYTES, RECORD_FORMAT_0};
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType};
use nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER;
use nvme_spec::{SglDescriptor, SubmissionQueueEntry};
use nvme_tcp_wire::{
    CapsuleCommand, DataHeader, InitializeConnectionRequest, PduHeader, PduWriter, PROTOCOL_FORMAT_VERSION_1_0,
};

use crate::queue::{HostQueue, Pending, Phase, Slot, CONNECT_COMMAND_ID};
use crate::transmit_batch::DataPiece;
use crate::{HostError, TransmitBatch, WriteSource};

/// HPDA we announce: 0 (dword alignment), as Linux does; C2H data then follows the
/// header directly.
const HOST_PDU_DATA_ALIGNMENT: u8 = 0;

impl HostQueue {
    /// Appends every pending byte to `out`, data copied: ICReq, the Connect capsule,
    /// command capsules (with in-capsule data), H2CData PDUs answering R2Ts (each at
    /// most MAXH2CDATA, with data digests when negotiated), or the final H2CTermReq
    /// after a fatal error. Returns the number of bytes appended. For paths that
    /// copy anyway (tests, the simulator); drivers send [`HostQueue::transmit_batch`].
    pub fn transmit(&mut self, out: &mut Vec<u8>) -> usize {
        let mut batch = TransmitBatch::copying(std::mem::take(out));
        let appended = self.transmit_batch(&mut batch);
        *out = batch.into_bytes();
        appended
    }

    /// Appends every pending PDU to `batch`, as [`HostQueue::transmit`] does, with
    /// write data referenced rather than copied: send it with one vectored send and
    /// clear (or drop) the batch once the send is over, since commands whose response
    /// arrives while the batch holds their data complete only then. Returns the
    /// number of bytes appended.
    pub fn transmit_batch(&mut self, batch: &mut TransmitBatch) -> usize {
        let start = batch.len();
        if let Some(termination) = self.termination.take() {
            // TermReqs never carry digests; the writer knows.
            self.writer.write_header(&PduHeader::H2cTermReq(termination), 0, batch.bytes_mut());
            batch.close_bytes();
            return batch.len() - start;
        }
        if self.phase == Phase::Failed {
            return 0;
        }
        // `fail` empties `pending`, so a write source that withdrew data an R2T asked
        // for ends the loop.
        while let Some(item) = self.pending.pop_front() {
            match item {
                Pending::InitializeConnection => self.write_initialize_connection(batch.bytes_mut()),
                Pending::Connect => self.write_connect(batch.bytes_mut()),
                Pending::Command { slot, generation } => self.write_command(slot, generation, batch),
                Pending::HostData { slot, generation, transfer_tag, offset, length } => {
                    self.write_host_data(slot, generation, transfer_tag, offset, length, batch)
                }
            }
        }
        batch.close_bytes();
        batch.len() - start
    }

    fn write_initialize_connection(&self, out: &mut Vec<u8>) {
        let request = InitializeConnectionRequest {
            protocol_format_version: PROTOCOL_FORMAT_VERSION_1_0,
            host_pdu_data_alignment: HOST_PDU_DATA_ALIGNMENT,
            digests: self.config.digests,
            max_r2t_outstanding: self.config.max_r2t_outstanding,
        };
        // IC PDUs never carry digests, whatever is negotiated later.
        PduWriter::new().write_header(&PduHeader::IcReq(request), 0, out);
    }

    fn write_connect(&self, out: &mut Vec<u8>) {
        let mut sqe = SubmissionQueueEntry::default();
        sqe.set_cdw0(AdminOpcode::Fabrics as u8, CONNECT_COMMAND_ID, PSDT_SGL_METADATA_BUFFER);
        sqe.set_fabrics_command_type(FabricsCommandType::Connect as u8);
        ConnectCommand {
            record_format: RECORD_FORMAT_0,
            queue_id: self.config.queue_id,
            submission_queue_size: self.config.queue_size - 1,
            connect_attributes: 0,
            keep_alive_timeout_ms: self.config.keep_alive_timeout_ms,
        }
        .encode_into(&mut sqe);
        sqe.set_sgl(&SglDescriptor::in_capsule(0, CONNECT_DATA_BYTES as u32));
        let mut data = [0u8; CONNECT_DATA_BYTES];
        ConnectData::new(
            self.config.host_identifier,
            self.config.controller_id,
            &self.config.subsystem_nqn,
            &self.config.host_nqn,
        )
        .encode(&mut data);
        self.writer.write_header(&PduHeader::CapsuleCmd(CapsuleCommand { sqe }), data.len() as u32, out);
        out.extend_from_slice(&data);
        self.writer.append_data_digest(&[&data], out);
    }

    fn write_command(&mut self, index: u16, generation: u32, batch: &mut TransmitBatch) {
        let Some(slot) = self.slots.get(usize::from(index)) else { return };
        if !slot.in_use || slot.generation != generation {
            // Completed (e.g. failed by the target) before it was sent.
            return;
        }
        let header = PduHeader::CapsuleCmd(CapsuleCommand { sqe: slot.sqe });
        let data_bytes = slot.data_out_bytes as usize;
        // Data in the caller's memory is looked up before anything is encoded: data
        // that is not there any more keeps the whole command off the wire, R2T data
        // included (nothing could answer the R2Ts).
        let available =
            slot.write_source.is_none() || data_piece(slot, self.write_source.as_ref(), 0..data_bytes).is_some();
        if !available {
            self.refuse_withdrawn(index);
            return;
        }
        if !slot.in_capsule {
            self.writer.write_header(&header, 0, batch.bytes_mut());
            return;
        }
        let Some(piece) = data_piece(slot, self.write_source.as_ref(), 0..data_bytes) else { return };
        self.writer.write_header(&header, data_bytes as u32, batch.bytes_mut());
        batch.push_data(&piece);
        self.writer.append_data_digest(&[piece.bytes], batch.bytes_mut());
    }

    /// Completes a command whose write source no longer has its data, without
    /// sending it: Command Aborted By Host, do not retry.
    fn refuse_withdrawn(&mut self, index: u16) {
        let slot = &mut self.slots[usize::from(index)];
        slot.transport_error = Some(HostError::WriteSourceWithdrawn { command_id: index });
        let cqe = nvme_spec::CompletionQueueEntry {
            command_id: slot.sqe.command_id(),
            submission_queue_id: self.config.queue_id,
            status: crate::status::COMMAND_ABORTED_BY_HOST.with_do_not_retry(),
            ..nvme_spec::CompletionQueueEntry::default()
        };
        self.complete(index, cqe);
    }

    fn write_host_data(
        &mut self,
        index: u16,
        generation: u32,
        transfer_tag: u16,
        offset: u32,
        length: u32,
        batch: &mut TransmitBatch,
    ) {
        let max_pdu_bytes = self.max_h2c_data_bytes.max(4) as usize;
        let writer = self.writer;
        let Some(slot) = self.slots.get_mut(usize::from(index)) else { return };
        if !slot.in_use || slot.generation != generation {
            return;
        }
        slot.r2t_pending = slot.r2t_pending.saturating_sub(1);
        let slot = &self.slots[usize::from(index)];
        let command_id = slot.sqe.command_id();
        let (offset, end) = (offset as usize, offset as usize + length as usize);
        let mut sent = offset;
        while sent < end {
            let piece_bytes = (end - sent).min(max_pdu_bytes);
            // The R2T was checked against the command's length, so only a write
            // source that withdrew its data fails here, before this PDU's header.
            let Some(piece) = data_piece(slot, self.write_source.as_ref(), sent..sent + piece_bytes) else {
                self.fail(HostError::WriteSourceWithdrawn { command_id: index }, None);
                return;
            };
            let header = DataHeader {
                command_id,
                transfer_tag,
                data_offset: sent as u32,
                data_length: piece_bytes as u32,
                last: sent + piece_bytes == end,
                success: false,
            };
            writer.write_header(&PduHeader::H2cData(header), piece_bytes as u32, batch.bytes_mut());
            batch.push_data(&piece);
            writer.append_data_digest(&[piece.bytes], batch.bytes_mut());
            sent += piece_bytes;
        }
    }
}

/// `range` of the write data of the command in `slot`: from its own buffer, or from
/// the caller's memory through `write_source`. `None` when the range is outside the
/// data (a bug the R2T checks rule out) or the write source withdrew the data.
fn data_piece<'a>(
    slot: &'a Slot,
    write_source: Option<&'a Arc<dyn WriteSource>>,
    range: Range<usize>,
) -> Option<DataPiece<'a>> {
    let (bytes, source) = match slot.write_source {
        None => (slot.data_out.get(range.clone())?, None),
        Some(buffer) => {
            let write_source = write_source?;
            let bytes = write_source.data(buffer.source, range.start, range.len())?;
            (bytes, Some((write_source, buffer.source)))
        }
    };
    (bytes.len() == range.len()).then_some(DataPiece { bytes, lease: &slot.data_out, source, range })
}
