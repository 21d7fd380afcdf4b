//! The PDU stream of one connection: PDUs read from the host, where the data of the
//! PDU being read goes, and the PDUs queued for sending (responses, read data, R2Ts,
//! a C2HTermReq). It knows nothing of commands beyond the slot a data sink names.

use nvme_spec::{CommandId, CompletionQueueEntry};
use nvme_tcp_wire::{
    CapsuleResponse, DataHeader, FatalErrorStatus, InitializeConnectionRequest, InitializeConnectionResponse,
    PduHeader, PduReader, PduWriter, ReadError, ReadEvent, ReaderLimits, ReadyToTransfer, Role, TerminationRequest,
};
use storage::LentBytes;

use crate::limits::{MAX_C2H_DATA_PDU_BYTES, MAX_H2C_DATA_BYTES, MAX_IN_CAPSULE_DATA_BYTES};
use crate::transmit::{BufferPool, TransmitBatch};

/// Where the data of the PDU being received goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DataSink {
    /// No PDU data expected.
    None,
    /// In-capsule data of the command in `slot`, written at `offset`.
    InCapsule { slot: u16, offset: usize },
    /// H2CData for the command in `slot`, written at `offset`.
    HostData { slot: u16, offset: usize },
}

/// Where a read's data is in the pending batch.
#[derive(Clone, Copy)]
enum DataSource {
    /// An attached buffer the backend filled.
    Buffer(u32),
    /// Attached memory the backend lent.
    Lent(u32),
}

/// What a read sends back before its response.
pub(crate) enum ReadData {
    /// A buffer the backend filled.
    Buffer(Vec<u8>),
    /// Memory the backend lent.
    Lent(LentBytes),
}

/// One connection's PDU reader and writer and its queue of PDUs to send.
pub(crate) struct PduStream {
    reader: PduReader,
    writer: PduWriter,
    /// DDGST negotiated: C2HData PDUs carry a data digest.
    data_digest: bool,
    /// PDUs queued since the runtime last took a batch. Empty with no capacity at
    /// first: it grows to what the connection sends in one batch (an idle
    /// connection's stays a few bytes).
    pending: TransmitBatch,
    /// A sent batch kept for reuse (its capacity), so a steady stream allocates none.
    spare: Option<TransmitBatch>,
    /// Where the data of the PDU being read goes.
    sink: DataSink,
    /// A C2HTermReq was queued: it must be the last PDU on the wire.
    terminated: bool,
}

impl PduStream {
    /// A stream before ICReq: no digests, in-capsule and H2C data within our limits.
    pub(crate) fn new() -> Self {
        PduStream {
            reader: PduReader::new(
                Role::Controller,
                ReaderLimits { max_data_bytes: MAX_IN_CAPSULE_DATA_BYTES.max(MAX_H2C_DATA_BYTES) },
            ),
            writer: PduWriter::new(),
            data_digest: false,
            pending: TransmitBatch::default(),
            spare: None,
            sink: DataSink::None,
            terminated: false,
        }
    }

    /// The next event of the bytes in `input` (consuming what it read).
    // As the reader's: the error carries the offending header by value.
    #[allow(clippy::result_large_err)]
    pub(crate) fn next_event<'a>(&mut self, input: &mut &'a [u8]) -> Result<Option<ReadEvent<'a>>, ReadError> {
        self.reader.next_event(input)
    }

    /// DDGST: whether C2HData PDUs carry a data digest.
    /// True while part of a PDU has arrived and the rest has not.
    pub(crate) fn is_mid_pdu(&self) -> bool {
        !self.reader.is_at_pdu_boundary()
    }

    pub(crate) fn data_digest(&self) -> bool {
        self.data_digest
    }

    /// True once a C2HTermReq is queued: nothing may follow it.
    pub(crate) fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// Sets where the data of the PDU just read goes.
    pub(crate) fn set_sink(&mut self, sink: DataSink) {
        self.sink = sink;
    }

    /// The sink of the PDU whose data ended, leaving none.
    pub(crate) fn take_sink(&mut self) -> DataSink {
        std::mem::replace(&mut self.sink, DataSink::None)
    }

    /// Where a data chunk of `length` bytes goes (slot and offset), moving the sink
    /// past it; `None` when no data is expected.
    pub(crate) fn advance_sink(&mut self, length: usize) -> Option<(u16, usize)> {
        match &mut self.sink {
            DataSink::None => None,
            DataSink::InCapsule { slot, offset } | DataSink::HostData { slot, offset } => {
                let position = *offset;
                *offset += length;
                Some((*slot, position))
            }
        }
    }

    /// Answers an accepted ICReq and applies what it negotiated (digests, the
    /// alignment our C2H PDUs must honour).
    pub(crate) fn accept_initialize(&mut self, request: &InitializeConnectionRequest) {
        let digests = request.digests;
        let response = InitializeConnectionResponse {
            protocol_format_version: 0,
            controller_pdu_data_alignment: 0,
            digests,
            max_h2c_data_bytes: MAX_H2C_DATA_BYTES,
        };
        self.pending.push_header_with(|out| {
            PduWriter::new().write_header(&PduHeader::IcResp(response), 0, out);
        });
        self.writer.set_digests(digests);
        self.data_digest = digests.data;
        self.writer.set_data_alignment(request.host_pdu_data_alignment);
        self.reader.set_digests(digests);
    }

    /// Queues a C2HTermReq; false (and nothing queued) when one already was.
    pub(crate) fn terminate(&mut self, status: FatalErrorStatus, info: u32, offending_header: &[u8]) -> bool {
        if self.terminated {
            return false;
        }
        self.terminated = true;
        let request = TerminationRequest::new(status, info, offending_header);
        let writer = &self.writer;
        self.pending.push_header_with(|out| {
            writer.write_header(&PduHeader::C2hTermReq(request), 0, out);
        });
        true
    }

    /// Queues an R2T PDU.
    pub(crate) fn push_ready_to_transfer(&mut self, r2t: ReadyToTransfer) {
        let writer = &self.writer;
        self.pending.push_header_with(|out| {
            writer.write_header(&PduHeader::R2t(r2t), 0, out);
        });
    }

    /// Queues a CapsuleResp.
    pub(crate) fn push_response(&mut self, cqe: CompletionQueueEntry) {
        let writer = &self.writer;
        self.pending.push_header_with(|out| {
            writer.write_header(&PduHeader::CapsuleResp(CapsuleResponse { cqe }), 0, out);
        });
    }

    /// Queues C2HData PDUs for the first `send_bytes` of a read's data (at most
    /// MAX_C2H_DATA_PDU_BYTES each, digested when DDGST was negotiated). The caller
    /// checked that `data` holds at least `send_bytes`.
    pub(crate) fn push_read_data(&mut self, command_id: CommandId, send_bytes: usize, data: ReadData) {
        let source = match data {
            ReadData::Buffer(buffer) => DataSource::Buffer(self.pending.attach_buffer(buffer)),
            ReadData::Lent(lent) => DataSource::Lent(self.pending.attach_lent(lent)),
        };
        let writer = &self.writer;
        let mut offset = 0;
        while offset < send_bytes {
            let length = (send_bytes - offset).min(MAX_C2H_DATA_PDU_BYTES as usize);
            let header = DataHeader {
                command_id,
                transfer_tag: 0,
                data_offset: offset as u32,
                data_length: length as u32,
                last: offset + length == send_bytes,
                success: false,
            };
            self.pending.push_header_with(|out| {
                writer.write_header(&PduHeader::C2hData(header), length as u32, out);
            });
            match source {
                DataSource::Buffer(index) => {
                    self.pending.push_data(index, offset, offset + length);
                    if self.data_digest {
                        let piece = self.pending.buffer(index).get(offset..offset + length).unwrap_or_default();
                        let digest = nvme_tcp_wire::crc32c(piece);
                        self.pending.push_header_with(|out| out.extend_from_slice(&digest.to_le_bytes()));
                    }
                }
                DataSource::Lent(index) => {
                    // Reads are lent only without data digests (see `io_read`).
                    debug_assert!(!self.data_digest);
                    self.pending.push_lent(index, offset, offset + length);
                }
            }
            offset += length;
        }
    }

    /// Bytes of data buffers queued for sending or kept with the spare batch.
    pub(crate) fn buffer_bytes(&self) -> u64 {
        self.pending.buffer_bytes() + self.spare.as_ref().map_or(0, TransmitBatch::buffer_bytes)
    }

    /// The PDUs queued so far, if any, replaced by an empty batch.
    pub(crate) fn take_transmit(&mut self) -> Option<TransmitBatch> {
        if self.pending.is_empty() {
            return None;
        }
        let replacement = self.spare.take().unwrap_or_default();
        Some(std::mem::replace(&mut self.pending, replacement))
    }

    /// A batch was sent: its buffers go back to `pool`, the batch is kept for reuse.
    pub(crate) fn transmit_complete(&mut self, mut batch: TransmitBatch, pool: &mut BufferPool) {
        batch.recycle(pool);
        if self.spare.is_none() {
            self.spare = Some(batch);
        }
    }
}
