//! Sending: ICReq, the Fabrics Connect command, command capsules with their
//! in-capsule data, H2CData answering R2Ts, and the H2CTermReq that ends a broken
//! stream. Everything is encoded straight into the caller's buffer at `transmit`
//! time, so command data is copied once (into that buffer) and never earlier.

use nvme_spec::fabrics::{ConnectCommand, ConnectData, CONNECT_DATA_BYTES, RECORD_FORMAT_0};
use nvme_spec::opcode::{AdminOpcode, FabricsCommandType};
use nvme_spec::sqe::PSDT_SGL_METADATA_BUFFER;
use nvme_spec::{SglDescriptor, SubmissionQueueEntry};
use nvme_tcp_wire::{
    CapsuleCommand, DataHeader, InitializeConnectionRequest, PduHeader, PduWriter, PROTOCOL_FORMAT_VERSION_1_0,
};

use crate::queue::{HostQueue, Pending, Phase, CONNECT_COMMAND_ID};

/// HPDA we announce: 0 (dword alignment), as Linux does; C2H data then follows the
/// header directly.
const HOST_PDU_DATA_ALIGNMENT: u8 = 0;

impl HostQueue {
    /// Appends every pending byte to `out`: ICReq, the Connect capsule, command
    /// capsules (with in-capsule data), H2CData PDUs answering R2Ts (each at most
    /// MAXH2CDATA, with data digests when negotiated), or the final H2CTermReq after
    /// a fatal error. Returns the number of bytes appended.
    pub fn transmit(&mut self, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        if let Some(termination) = self.termination.take() {
            // TermReqs never carry digests; the writer knows.
            self.writer.write_header(&PduHeader::H2cTermReq(termination), 0, out);
            return out.len() - start;
        }
        if self.phase == Phase::Failed {
            return 0;
        }
        while let Some(item) = self.pending.pop_front() {
            match item {
                Pending::InitializeConnection => self.write_initialize_connection(out),
                Pending::Connect => self.write_connect(out),
                Pending::Command { slot, generation } => self.write_command(slot, generation, out),
                Pending::HostData { slot, generation, transfer_tag, offset, length } => {
                    self.write_host_data(slot, generation, transfer_tag, offset, length, out)
                }
            }
        }
        out.len() - start
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

    fn write_command(&self, index: u16, generation: u32, out: &mut Vec<u8>) {
        let Some(slot) = self.slots.get(usize::from(index)) else { return };
        if !slot.in_use || slot.generation != generation {
            // Completed (e.g. failed by the target) before it was sent.
            return;
        }
        let data: &[u8] = if slot.in_capsule { &slot.data_out } else { &[] };
        let header = PduHeader::CapsuleCmd(CapsuleCommand { sqe: slot.sqe });
        self.writer.write_header(&header, data.len() as u32, out);
        out.extend_from_slice(data);
        self.writer.append_data_digest(&[data], out);
    }

    fn write_host_data(
        &mut self,
        index: u16,
        generation: u32,
        transfer_tag: u16,
        offset: u32,
        length: u32,
        out: &mut Vec<u8>,
    ) {
        let max_pdu_bytes = self.max_h2c_data_bytes.max(4);
        let writer = self.writer;
        let Some(slot) = self.slots.get_mut(usize::from(index)) else { return };
        if !slot.in_use || slot.generation != generation {
            return;
        }
        slot.r2t_pending = slot.r2t_pending.saturating_sub(1);
        let command_id = slot.sqe.command_id();
        // The R2T was checked against the buffer; `get` keeps a bug from panicking.
        let Some(data) = slot.data_out.get(offset as usize..(offset as usize + length as usize)) else {
            return;
        };
        let mut sent = 0usize;
        while sent < data.len() {
            let piece_bytes = (data.len() - sent).min(max_pdu_bytes as usize);
            let piece = &data[sent..sent + piece_bytes];
            let header = DataHeader {
                command_id,
                transfer_tag,
                data_offset: offset + sent as u32,
                data_length: piece_bytes as u32,
                last: sent + piece_bytes == data.len(),
                success: false,
            };
            writer.write_header(&PduHeader::H2cData(header), piece_bytes as u32, out);
            out.extend_from_slice(piece);
            writer.append_data_digest(&[piece], out);
            sent += piece_bytes;
        }
    }
}
