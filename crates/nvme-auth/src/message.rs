//! The DH-HMAC-CHAP messages carried by Authentication Send and Receive (NVMe Base
//! 2.0, "DH-HMAC-CHAP Protocol"), as Linux lays them out. Every message starts with
//! the same 6 bytes: AUTH-TYPE (byte 0), AUTH-ID (byte 1), reserved (2..3), T_ID
//! (transaction identifier, 4..5, little endian).
//!
//! ```text
//! AUTH_Negotiate          00h/00h  SC_C (6), NAPD (7), NAPD x 64-byte descriptors:
//!                                  AUTHID (0) = 01h, HALEN (2), DHLEN (3),
//!                                  hash ids at 4.., DH group ids at 34..
//! DH-HMAC-CHAP_Challenge  01h/01h  HL (6), HASHID (8), DHGID (9), DHVLEN (10..11),
//!                                  SEQNUM (12..15), C1 (HL bytes), DH value
//! DH-HMAC-CHAP_Reply      01h/02h  HL (6), CVALID (8), DHVLEN (10..11), SEQNUM
//!                                  (12..15), R1 (HL), C2 (HL), DH value
//! DH-HMAC-CHAP_Success1   01h/03h  HL (6), RVALID (8), R2 (HL bytes when RVALID)
//! DH-HMAC-CHAP_Success2   01h/04h  16 bytes, nothing but the header
//! AUTH_Failure2           00h/F0h  REASON CODE (6), EXPLANATION (7)   host -> controller
//! AUTH_Failure1           00h/F1h  REASON CODE (6), EXPLANATION (7)   controller -> host
//! ```
//!
//! Decoding treats the bytes as hostile: every length field is checked against the
//! bytes present and against a named limit before anything is copied, and nothing
//! here panics on any input. Bytes after the message are ignored (Authentication
//! Receive pads the message to the allocation length).

use crate::group::MAX_PUBLIC_VALUE_BYTES;
use crate::hash::MAX_DIGEST_BYTES;

/// Largest message accepted or produced: 4 KiB, the buffer Linux uses for a whole
/// exchange (the biggest real message, a Reply with an ffdhe8192 value and SHA-512,
/// is 1168 bytes).
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Bytes of the fixed part of Challenge, Reply, Success1 and Success2.
pub const FIXED_PART_BYTES: usize = 16;
/// Bytes of the fixed part of AUTH_Negotiate, before the protocol descriptors.
pub const NEGOTIATE_FIXED_BYTES: usize = 8;
/// Bytes of one AUTH_Negotiate protocol descriptor.
pub const PROTOCOL_DESCRIPTOR_BYTES: usize = 64;
/// Bytes of AUTH_Failure1 / AUTH_Failure2.
pub const FAILURE_BYTES: usize = 8;
/// Hash identifiers one descriptor can list (HALEN limit: bytes 4..33).
pub const MAX_HASH_IDS: usize = 30;
/// DH group identifiers one descriptor can list (DHLEN limit: bytes 34..63).
pub const MAX_DH_GROUP_IDS: usize = 30;
/// AUTHID of DH-HMAC-CHAP in a protocol descriptor.
pub const DHCHAP_AUTH_ID: u8 = 0x01;
/// REASON CODE of both failure messages: "authentication failure".
pub const REASON_AUTHENTICATION_FAILURE: u8 = 0x01;

/// AUTH-TYPE values.
mod auth_type {
    pub const COMMON: u8 = 0x00;
    pub const DHCHAP: u8 = 0x01;
}

/// AUTH-ID values.
mod auth_id {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xF0;
    pub const FAILURE1: u8 = 0xF1;
}

/// Reason code explanations of AUTH_Failure1/2 (NVMe Base 2.0, "AUTH_Failure1 and
/// AUTH_Failure2 reason code explanations").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// 01h: authentication failed (wrong response).
    Failed,
    /// 02h: authentication protocol not usable.
    ProtocolNotUsable,
    /// 03h: secure channel concatenation mismatch.
    ConcatenationMismatch,
    /// 04h: no hash function both sides support.
    HashUnusable,
    /// 05h: no DH group both sides support.
    DhGroupUnusable,
    /// 06h: a message field is not acceptable.
    IncorrectPayload,
    /// 07h: a message arrived out of sequence.
    IncorrectMessage,
}

impl FailureReason {
    /// The explanation code.
    pub const fn code(self) -> u8 {
        match self {
            FailureReason::Failed => 0x01,
            FailureReason::ProtocolNotUsable => 0x02,
            FailureReason::ConcatenationMismatch => 0x03,
            FailureReason::HashUnusable => 0x04,
            FailureReason::DhGroupUnusable => 0x05,
            FailureReason::IncorrectPayload => 0x06,
            FailureReason::IncorrectMessage => 0x07,
        }
    }

    /// The reason for an explanation code; `None` for reserved codes.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0x01 => Some(FailureReason::Failed),
            0x02 => Some(FailureReason::ProtocolNotUsable),
            0x03 => Some(FailureReason::ConcatenationMismatch),
            0x04 => Some(FailureReason::HashUnusable),
            0x05 => Some(FailureReason::DhGroupUnusable),
            0x06 => Some(FailureReason::IncorrectPayload),
            0x07 => Some(FailureReason::IncorrectMessage),
            _ => None,
        }
    }
}

/// One AUTH_Negotiate protocol descriptor. Identifiers are kept raw: unknown ones
/// are skipped when choosing, not refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolDescriptor {
    /// AUTHID: 01h for DH-HMAC-CHAP.
    pub auth_id: u8,
    /// The HALEN hash identifiers, in the host's order of preference.
    pub hash_ids: Vec<u8>,
    /// The DHLEN DH group identifiers, in the host's order of preference.
    pub dh_group_ids: Vec<u8>,
}

/// AUTH_Negotiate (host to controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiate {
    /// T_ID.
    pub transaction_id: u16,
    /// SC_C: secure channel concatenation; 0 = none.
    pub secure_channel: u8,
    /// NAPD descriptors.
    pub protocols: Vec<ProtocolDescriptor>,
}

/// DH-HMAC-CHAP_Challenge (controller to host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// T_ID.
    pub transaction_id: u16,
    /// HASHID.
    pub hash_id: u8,
    /// DHGID.
    pub dh_group_id: u8,
    /// SEQNUM: S1.
    pub sequence_number: u32,
    /// C1, HL bytes.
    pub challenge: Vec<u8>,
    /// The controller's DH public value, DHVLEN bytes (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply (host to controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// T_ID.
    pub transaction_id: u16,
    /// R1, HL bytes.
    pub response: Vec<u8>,
    /// C2 when CVALID is set: the host asks the controller to authenticate itself.
    pub controller_challenge: Option<Vec<u8>>,
    /// SEQNUM: S2 (0 when the host does not ask for the controller's response).
    pub sequence_number: u32,
    /// The host's DH public value, DHVLEN bytes.
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1 (controller to host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Success1 {
    /// T_ID.
    pub transaction_id: u16,
    /// HL: the negotiated hash length.
    pub hash_length: u8,
    /// R2 when RVALID is set (bidirectional authentication).
    pub response: Option<Vec<u8>>,
}

/// AUTH_Failure1 / AUTH_Failure2 contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// T_ID.
    pub transaction_id: u16,
    /// REASON CODE.
    pub reason_code: u8,
    /// REASON CODE EXPLANATION (see [`FailureReason`]).
    pub explanation: u8,
}

impl Failure {
    /// An authentication failure with `reason`.
    pub fn new(transaction_id: u16, reason: FailureReason) -> Self {
        Failure { transaction_id, reason_code: REASON_AUTHENTICATION_FAILURE, explanation: reason.code() }
    }
}

/// Any DH-HMAC-CHAP message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// AUTH_Negotiate.
    Negotiate(Negotiate),
    /// DH-HMAC-CHAP_Challenge.
    Challenge(Challenge),
    /// DH-HMAC-CHAP_Reply.
    Reply(Reply),
    /// DH-HMAC-CHAP_Success1.
    Success1(Success1),
    /// DH-HMAC-CHAP_Success2.
    Success2 {
        /// T_ID.
        transaction_id: u16,
    },
    /// AUTH_Failure1 (controller to host).
    Failure1(Failure),
    /// AUTH_Failure2 (host to controller).
    Failure2(Failure),
}

/// Why bytes are not a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the message's fields say it has.
    #[error("message truncated: {needed} bytes needed, {available} present")]
    Truncated {
        /// Bytes the fields call for.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// More than [`MAX_MESSAGE_BYTES`].
    #[error("message of {0} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLong(usize),
    /// An AUTH-TYPE / AUTH-ID pair that names no message.
    #[error("unknown message: AUTH-TYPE {auth_type:#04x}, AUTH-ID {auth_id:#04x}")]
    Unknown {
        /// AUTH-TYPE.
        auth_type: u8,
        /// AUTH-ID.
        auth_id: u8,
    },
    /// A length field above its limit.
    #[error("{field} is {value}, above the limit of {limit}")]
    FieldTooLarge {
        /// The field's mnemonic.
        field: &'static str,
        /// Its value.
        value: usize,
        /// The limit.
        limit: usize,
    },
}

/// Bounds-checked view of the received bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn need(&self, length: usize) -> Result<(), DecodeError> {
        if self.bytes.len() < length {
            return Err(DecodeError::Truncated { needed: length, available: self.bytes.len() });
        }
        Ok(())
    }

    fn u8(&self, offset: usize) -> u8 {
        self.bytes[offset]
    }

    fn u16(&self, offset: usize) -> u16 {
        u16::from_le_bytes([self.bytes[offset], self.bytes[offset + 1]])
    }

    fn u32(&self, offset: usize) -> u32 {
        u32::from_le_bytes([self.bytes[offset], self.bytes[offset + 1], self.bytes[offset + 2], self.bytes[offset + 3]])
    }

    fn slice(&self, offset: usize, length: usize) -> &'a [u8] {
        &self.bytes[offset..offset + length]
    }
}

fn limit(field: &'static str, value: usize, limit: usize) -> Result<(), DecodeError> {
    if value > limit {
        return Err(DecodeError::FieldTooLarge { field, value, limit });
    }
    Ok(())
}

impl Message {
    /// Decodes one message from the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(DecodeError::TooLong(bytes.len()));
        }
        let reader = Reader { bytes };
        reader.need(6)?;
        let (kind, id) = (reader.u8(0), reader.u8(1));
        let transaction_id = reader.u16(4);
        match (kind, id) {
            (auth_type::COMMON, auth_id::NEGOTIATE) => decode_negotiate(&reader, transaction_id),
            (auth_type::DHCHAP, auth_id::CHALLENGE) => decode_challenge(&reader, transaction_id),
            (auth_type::DHCHAP, auth_id::REPLY) => decode_reply(&reader, transaction_id),
            (auth_type::DHCHAP, auth_id::SUCCESS1) => {
                reader.need(FIXED_PART_BYTES)?;
                let hash_length = reader.u8(6);
                limit("HL", usize::from(hash_length), MAX_DIGEST_BYTES)?;
                let response = if reader.u8(8) & 1 != 0 {
                    reader.need(FIXED_PART_BYTES + usize::from(hash_length))?;
                    Some(reader.slice(FIXED_PART_BYTES, usize::from(hash_length)).to_vec())
                } else {
                    None
                };
                Ok(Message::Success1(Success1 { transaction_id, hash_length, response }))
            }
            (auth_type::DHCHAP, auth_id::SUCCESS2) => {
                reader.need(FIXED_PART_BYTES)?;
                Ok(Message::Success2 { transaction_id })
            }
            (auth_type::COMMON, auth_id::FAILURE1 | auth_id::FAILURE2) => {
                reader.need(FAILURE_BYTES)?;
                let failure = Failure { transaction_id, reason_code: reader.u8(6), explanation: reader.u8(7) };
                Ok(if id == auth_id::FAILURE1 { Message::Failure1(failure) } else { Message::Failure2(failure) })
            }
            (auth_type, auth_id) => Err(DecodeError::Unknown { auth_type, auth_id }),
        }
    }

    /// Encodes the message, appending to `out`. Fields longer than their length
    /// fields can express are our bug (the state machines build them from bounded
    /// values) and are caught by debug assertions.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let header = |out: &mut Vec<u8>, kind: u8, id: u8, transaction_id: u16| {
            out.extend_from_slice(&[kind, id, 0, 0]);
            out.extend_from_slice(&transaction_id.to_le_bytes());
        };
        match self {
            Message::Negotiate(message) => {
                header(out, auth_type::COMMON, auth_id::NEGOTIATE, message.transaction_id);
                out.push(message.secure_channel);
                out.push(message.protocols.len() as u8);
                for protocol in &message.protocols {
                    debug_assert!(protocol.hash_ids.len() <= MAX_HASH_IDS);
                    debug_assert!(protocol.dh_group_ids.len() <= MAX_DH_GROUP_IDS);
                    let mut descriptor = [0u8; PROTOCOL_DESCRIPTOR_BYTES];
                    descriptor[0] = protocol.auth_id;
                    let hashes = protocol.hash_ids.len().min(MAX_HASH_IDS);
                    let groups = protocol.dh_group_ids.len().min(MAX_DH_GROUP_IDS);
                    descriptor[2] = hashes as u8;
                    descriptor[3] = groups as u8;
                    descriptor[4..4 + hashes].copy_from_slice(&protocol.hash_ids[..hashes]);
                    descriptor[34..34 + groups].copy_from_slice(&protocol.dh_group_ids[..groups]);
                    out.extend_from_slice(&descriptor);
                }
            }
            Message::Challenge(message) => {
                debug_assert!(message.challenge.len() <= MAX_DIGEST_BYTES);
                header(out, auth_type::DHCHAP, auth_id::CHALLENGE, message.transaction_id);
                out.extend_from_slice(&[message.challenge.len() as u8, 0, message.hash_id, message.dh_group_id]);
                out.extend_from_slice(&(message.dh_value.len() as u16).to_le_bytes());
                out.extend_from_slice(&message.sequence_number.to_le_bytes());
                out.extend_from_slice(&message.challenge);
                out.extend_from_slice(&message.dh_value);
            }
            Message::Reply(message) => {
                let hash_length = message.response.len();
                debug_assert!(hash_length <= MAX_DIGEST_BYTES);
                header(out, auth_type::DHCHAP, auth_id::REPLY, message.transaction_id);
                let valid = u8::from(message.controller_challenge.is_some());
                out.extend_from_slice(&[hash_length as u8, 0, valid, 0]);
                out.extend_from_slice(&(message.dh_value.len() as u16).to_le_bytes());
                out.extend_from_slice(&message.sequence_number.to_le_bytes());
                out.extend_from_slice(&message.response);
                // C2 is always present on the wire (zeros without CVALID), as Linux
                // lays it out: DHVLEN's value starts after 2 x HL either way.
                match &message.controller_challenge {
                    Some(challenge) => {
                        debug_assert_eq!(challenge.len(), hash_length);
                        let mut padded = challenge.clone();
                        padded.resize(hash_length, 0);
                        out.extend_from_slice(&padded);
                    }
                    None => out.resize(out.len() + hash_length, 0),
                }
                out.extend_from_slice(&message.dh_value);
            }
            Message::Success1(message) => {
                header(out, auth_type::DHCHAP, auth_id::SUCCESS1, message.transaction_id);
                let valid = u8::from(message.response.is_some());
                out.extend_from_slice(&[message.hash_length, 0, valid]);
                out.extend_from_slice(&[0; 7]);
                if let Some(response) = &message.response {
                    out.extend_from_slice(response);
                }
            }
            Message::Success2 { transaction_id } => {
                header(out, auth_type::DHCHAP, auth_id::SUCCESS2, *transaction_id);
                out.extend_from_slice(&[0; 10]);
            }
            Message::Failure1(failure) | Message::Failure2(failure) => {
                let id = if matches!(self, Message::Failure1(_)) { auth_id::FAILURE1 } else { auth_id::FAILURE2 };
                header(out, auth_type::COMMON, id, failure.transaction_id);
                out.extend_from_slice(&[failure.reason_code, failure.explanation]);
            }
        }
    }

    /// The encoded message in a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FIXED_PART_BYTES + 2 * MAX_DIGEST_BYTES);
        self.encode(&mut out);
        out
    }

    /// The message's name as the spec spells it, for log lines.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate(_) => "AUTH_Negotiate",
            Message::Challenge(_) => "DH-HMAC-CHAP_Challenge",
            Message::Reply(_) => "DH-HMAC-CHAP_Reply",
            Message::Success1(_) => "DH-HMAC-CHAP_Success1",
            Message::Success2 { .. } => "DH-HMAC-CHAP_Success2",
            Message::Failure1(_) => "AUTH_Failure1",
            Message::Failure2(_) => "AUTH_Failure2",
        }
    }

    /// T_ID.
    pub fn transaction_id(&self) -> u16 {
        match self {
            Message::Negotiate(message) => message.transaction_id,
            Message::Challenge(message) => message.transaction_id,
            Message::Reply(message) => message.transaction_id,
            Message::Success1(message) => message.transaction_id,
            Message::Success2 { transaction_id } => *transaction_id,
            Message::Failure1(failure) | Message::Failure2(failure) => failure.transaction_id,
        }
    }
}

fn decode_negotiate(reader: &Reader<'_>, transaction_id: u16) -> Result<Message, DecodeError> {
    reader.need(NEGOTIATE_FIXED_BYTES)?;
    let secure_channel = reader.u8(6);
    let count = usize::from(reader.u8(7));
    // NAPD is at most 255, so this cannot overflow; the total length check also
    // bounds it by MAX_MESSAGE_BYTES.
    reader.need(NEGOTIATE_FIXED_BYTES + count * PROTOCOL_DESCRIPTOR_BYTES)?;
    let mut protocols = Vec::with_capacity(count);
    for index in 0..count {
        let base = NEGOTIATE_FIXED_BYTES + index * PROTOCOL_DESCRIPTOR_BYTES;
        let hashes = usize::from(reader.u8(base + 2));
        let groups = usize::from(reader.u8(base + 3));
        limit("HALEN", hashes, MAX_HASH_IDS)?;
        limit("DHLEN", groups, MAX_DH_GROUP_IDS)?;
        protocols.push(ProtocolDescriptor {
            auth_id: reader.u8(base),
            hash_ids: reader.slice(base + 4, hashes).to_vec(),
            dh_group_ids: reader.slice(base + 34, groups).to_vec(),
        });
    }
    Ok(Message::Negotiate(Negotiate { transaction_id, secure_channel, protocols }))
}

fn decode_challenge(reader: &Reader<'_>, transaction_id: u16) -> Result<Message, DecodeError> {
    reader.need(FIXED_PART_BYTES)?;
    let hash_length = usize::from(reader.u8(6));
    let dh_length = usize::from(reader.u16(10));
    limit("HL", hash_length, MAX_DIGEST_BYTES)?;
    limit("DHVLEN", dh_length, MAX_PUBLIC_VALUE_BYTES)?;
    reader.need(FIXED_PART_BYTES + hash_length + dh_length)?;
    Ok(Message::Challenge(Challenge {
        transaction_id,
        hash_id: reader.u8(8),
        dh_group_id: reader.u8(9),
        sequence_number: reader.u32(12),
        challenge: reader.slice(FIXED_PART_BYTES, hash_length).to_vec(),
        dh_value: reader.slice(FIXED_PART_BYTES + hash_length, dh_length).to_vec(),
    }))
}

fn decode_reply(reader: &Reader<'_>, transaction_id: u16) -> Result<Message, DecodeError> {
    reader.need(FIXED_PART_BYTES)?;
    let hash_length = usize::from(reader.u8(6));
    let dh_length = usize::from(reader.u16(10));
    limit("HL", hash_length, MAX_DIGEST_BYTES)?;
    limit("DHVLEN", dh_length, MAX_PUBLIC_VALUE_BYTES)?;
    reader.need(FIXED_PART_BYTES + 2 * hash_length + dh_length)?;
    let challenge_valid = reader.u8(8) & 1 != 0;
    Ok(Message::Reply(Reply {
        transaction_id,
        response: reader.slice(FIXED_PART_BYTES, hash_length).to_vec(),
        controller_challenge: challenge_valid
            .then(|| reader.slice(FIXED_PART_BYTES + hash_length, hash_length).to_vec()),
        sequence_number: reader.u32(12),
        dh_value: reader.slice(FIXED_PART_BYTES + 2 * hash_length, dh_length).to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(message: Message) {
        let bytes = message.to_bytes();
        assert_eq!(Message::decode(&bytes), Ok(message.clone()), "{}", message.name());
        // Padding after the message (Authentication Receive's allocation length).
        let mut padded = bytes.clone();
        padded.resize(bytes.len() + 100, 0);
        assert_eq!(Message::decode(&padded), Ok(message.clone()));
        // Every truncation is refused, never a panic.
        for cut in 0..bytes.len() {
            let decoded = Message::decode(&bytes[..cut]);
            assert!(
                matches!(decoded, Err(DecodeError::Truncated { .. })),
                "{} cut at {cut}: {decoded:?}",
                message.name()
            );
        }
    }

    #[test]
    fn every_message_round_trips() {
        round_trip(Message::Negotiate(Negotiate {
            transaction_id: 0x1234,
            secure_channel: 0,
            protocols: vec![ProtocolDescriptor {
                auth_id: DHCHAP_AUTH_ID,
                hash_ids: vec![1, 2, 3],
                dh_group_ids: vec![0, 1, 2, 3, 4, 5],
            }],
        }));
        round_trip(Message::Challenge(Challenge {
            transaction_id: 7,
            hash_id: 1,
            dh_group_id: 1,
            sequence_number: 0xDEAD_BEEF,
            challenge: vec![0xAA; 32],
            dh_value: vec![0x55; 256],
        }));
        round_trip(Message::Reply(Reply {
            transaction_id: 7,
            response: vec![1; 48],
            controller_challenge: Some(vec![2; 48]),
            sequence_number: 9,
            dh_value: vec![3; 384],
        }));
        round_trip(Message::Reply(Reply {
            transaction_id: 7,
            response: vec![1; 32],
            controller_challenge: None,
            sequence_number: 0,
            dh_value: Vec::new(),
        }));
        round_trip(Message::Success1(Success1 { transaction_id: 7, hash_length: 64, response: Some(vec![4; 64]) }));
        round_trip(Message::Success1(Success1 { transaction_id: 7, hash_length: 32, response: None }));
        round_trip(Message::Success2 { transaction_id: 7 });
        round_trip(Message::Failure1(Failure::new(7, FailureReason::Failed)));
        round_trip(Message::Failure2(Failure::new(7, FailureReason::HashUnusable)));
    }

    #[test]
    fn layout_matches_linux() {
        // The host's negotiate as Linux sends it: T_ID 1, one descriptor, SHA-256/
        // 384/512 and the six groups. 72 bytes.
        let bytes = Message::Negotiate(Negotiate {
            transaction_id: 1,
            secure_channel: 0,
            protocols: vec![ProtocolDescriptor {
                auth_id: DHCHAP_AUTH_ID,
                hash_ids: vec![1, 2, 3],
                dh_group_ids: vec![0, 1, 2, 3, 4, 5],
            }],
        })
        .to_bytes();
        assert_eq!(bytes.len(), 72);
        assert_eq!(&bytes[..8], &[0, 0, 0, 0, 1, 0, 0, 1]);
        assert_eq!(&bytes[8..15], &[1, 0, 3, 6, 1, 2, 3]);
        assert_eq!(&bytes[42..48], &[0, 1, 2, 3, 4, 5]);
        let reply = Message::Reply(Reply {
            transaction_id: 2,
            response: vec![0xAB; 32],
            controller_challenge: None,
            sequence_number: 0,
            dh_value: vec![0xCD; 256],
        })
        .to_bytes();
        assert_eq!(reply.len(), 16 + 64 + 256);
        assert_eq!(&reply[10..12], &256u16.to_le_bytes());
        assert_eq!(reply[16 + 64], 0xCD);
        assert_eq!(Message::Success2 { transaction_id: 3 }.to_bytes().len(), 16);
        assert_eq!(
            Message::Failure1(Failure::new(3, FailureReason::Failed)).to_bytes(),
            vec![0, 0xF1, 0, 0, 3, 0, 1, 1]
        );
    }

    #[test]
    fn oversized_fields_are_refused() {
        let mut challenge = vec![0u8; 16];
        challenge[0] = 1;
        challenge[1] = 1;
        challenge[6] = 65;
        assert!(matches!(Message::decode(&challenge), Err(DecodeError::FieldTooLarge { field: "HL", .. })));
        challenge[6] = 32;
        challenge[10..12].copy_from_slice(&2000u16.to_le_bytes());
        assert!(matches!(Message::decode(&challenge), Err(DecodeError::FieldTooLarge { field: "DHVLEN", .. })));
        let mut negotiate = vec![0u8; 72];
        negotiate[7] = 1;
        negotiate[10] = 31;
        assert!(matches!(Message::decode(&negotiate), Err(DecodeError::FieldTooLarge { field: "HALEN", .. })));
        negotiate[7] = 2;
        assert!(matches!(Message::decode(&negotiate), Err(DecodeError::Truncated { needed: 136, .. })));
        assert_eq!(Message::decode(&[0u8; 5000]), Err(DecodeError::TooLong(5000)));
        assert_eq!(Message::decode(&[9, 9, 0, 0, 0, 0]), Err(DecodeError::Unknown { auth_type: 9, auth_id: 9 }));
    }
}
