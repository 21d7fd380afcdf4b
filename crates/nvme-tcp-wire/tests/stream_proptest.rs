//! Property tests: random valid PDU sequences written with `PduWriter`, cut into
//! random chunks and read back with `PduReader`, for both roles, with and without
//! digests and at random alignments.

mod common;

use common::*;
use nvme_spec::{CommandId, CompletionQueueEntry, SubmissionQueueEntry};
use nvme_tcp_wire::*;
use proptest::prelude::*;

/// One PDU to send: header and data.
#[derive(Clone, Debug)]
struct Pdu {
    header: PduHeader,
    data: Vec<u8>,
}

#[derive(Clone, Debug)]
struct Scenario {
    role: Role,
    digests: DigestSettings,
    alignment: u8,
    limit: u32,
    pdus: Vec<Pdu>,
    chunks: Vec<usize>,
}

fn data_strategy(limit: u32) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        4 => proptest::collection::vec(any::<u8>(), 1..=limit as usize),
    ]
}

fn data_pdu(h2c: bool, limit: u32) -> impl Strategy<Value = Pdu> {
    (any::<u16>(), any::<u16>(), any::<u32>(), any::<bool>(), any::<bool>(), data_strategy(limit)).prop_map(
        move |(cid, ttag, offset, last, success, data)| {
            let header = DataHeader {
                command_id: CommandId(cid),
                transfer_tag: ttag,
                data_offset: offset,
                data_length: data.len() as u32,
                last: last || (success && !h2c),
                success: success && !h2c,
            };
            let header = if h2c { PduHeader::H2cData(header) } else { PduHeader::C2hData(header) };
            Pdu { header, data }
        },
    )
}

fn controller_bound_pdu(limit: u32) -> impl Strategy<Value = Pdu> {
    prop_oneof![
        (proptest::array::uniform16(any::<u32>()), data_strategy(limit)).prop_map(|(dwords, data)| {
            Pdu { header: PduHeader::CapsuleCmd(CapsuleCommand { sqe: SubmissionQueueEntry { dwords } }), data }
        }),
        data_pdu(true, limit),
    ]
}

fn host_bound_pdu(limit: u32) -> impl Strategy<Value = Pdu> {
    prop_oneof![
        proptest::array::uniform16(any::<u8>()).prop_map(|raw| Pdu {
            header: PduHeader::CapsuleResp(CapsuleResponse { cqe: CompletionQueueEntry::decode(&raw) }),
            data: Vec::new(),
        }),
        data_pdu(false, limit),
        (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(cid, ttag, offset, length)| Pdu {
            header: PduHeader::R2t(ReadyToTransfer { command_id: CommandId(cid), transfer_tag: ttag, offset, length }),
            data: Vec::new(),
        }),
    ]
}

fn termination(role: Role) -> impl Strategy<Value = Pdu> {
    (1u16..=6, any::<u32>(), proptest::collection::vec(any::<u8>(), 0..=MAX_TERMINATION_DATA_BYTES)).prop_map(
        move |(status, info, offending)| {
            let term = TerminationRequest::new(FatalErrorStatus::from_u16(status).unwrap(), info, &offending);
            let header =
                if role == Role::Controller { PduHeader::H2cTermReq(term) } else { PduHeader::C2hTermReq(term) };
            Pdu { header, data: Vec::new() }
        },
    )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop_oneof![Just(Role::Controller), Just(Role::Host)],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0u8), Just(1), Just(3), Just(7), Just(31), 0u8..=31],
        1u32..=2048,
    )
        .prop_flat_map(|(role, header, data, alignment, limit)| {
            let digests = DigestSettings { header, data };
            let body = if role == Role::Controller {
                proptest::collection::vec(controller_bound_pdu(limit).boxed(), 0..10).boxed()
            } else {
                proptest::collection::vec(host_bound_pdu(limit).boxed(), 0..10).boxed()
            };
            (
                Just(role),
                Just(digests),
                Just(alignment),
                Just(limit),
                body,
                proptest::option::of(termination(role)),
                proptest::collection::vec(
                    prop_oneof![4 => 1usize..=16, 2 => 1usize..=300, 1 => 1usize..=10_000],
                    1..20,
                ),
            )
        })
        .prop_map(|(role, digests, alignment, limit, mut pdus, term, chunks)| {
            let ic = if role == Role::Controller {
                PduHeader::IcReq(InitializeConnectionRequest {
                    protocol_format_version: 0,
                    host_pdu_data_alignment: alignment,
                    digests,
                    max_r2t_outstanding: 0,
                })
            } else {
                PduHeader::IcResp(InitializeConnectionResponse {
                    protocol_format_version: 0,
                    controller_pdu_data_alignment: alignment,
                    digests,
                    max_h2c_data_bytes: 8192,
                })
            };
            pdus.insert(0, Pdu { header: ic, data: Vec::new() });
            pdus.extend(term);
            Scenario { role, digests, alignment, limit, pdus, chunks }
        })
}

/// The stream bytes and the start offset of every PDU.
fn encode_all(scenario: &Scenario) -> (Vec<u8>, Vec<usize>) {
    let mut writer = PduWriter::new();
    writer.set_digests(scenario.digests);
    writer.set_data_alignment(scenario.alignment);
    let mut stream = Vec::new();
    let mut starts = Vec::new();
    for pdu in &scenario.pdus {
        starts.push(stream.len());
        let expected_len = writer.pdu_bytes(&pdu.header, pdu.data.len() as u32) as usize;
        let header_len = writer.header_bytes(&pdu.header, pdu.data.len() as u32);
        let written = writer.write_header(&pdu.header, pdu.data.len() as u32, &mut stream);
        assert_eq!(written, header_len);
        stream.extend_from_slice(&pdu.data);
        writer.append_data_digest(&[&pdu.data], &mut stream);
        assert_eq!(stream.len() - starts.last().unwrap(), expected_len);
    }
    (stream, starts)
}

fn expected_items(scenario: &Scenario) -> Vec<Item> {
    let mut items = Vec::new();
    for pdu in &scenario.pdus {
        items.push(Item::Header(pdu.header, pdu.data.len() as u32));
        if !pdu.data.is_empty() {
            items.push(Item::Data(pdu.data.clone()));
            items.push(Item::DataEnd(true));
        }
    }
    items
}

fn reader_for(scenario: &Scenario) -> PduReader {
    let mut reader = PduReader::new(scenario.role, ReaderLimits { max_data_bytes: scenario.limit });
    reader.set_data_alignment(scenario.alignment);
    reader
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_streams_round_trip(scenario in scenario()) {
        let (stream, _) = encode_all(&scenario);
        let expected = expected_items(&scenario);
        let items = drive(&mut reader_for(&scenario), &stream, &scenario.chunks, scenario.digests);
        prop_assert_eq!(&items, &expected);
        // The same stream in one piece gives the same items.
        let whole = drive(&mut reader_for(&scenario), &stream, &[], scenario.digests);
        prop_assert_eq!(&whole, &expected);
    }

    #[test]
    fn corrupted_data_fails_only_its_digest(scenario in scenario(), pick in any::<prop::sample::Index>(), bit in 0u8..8) {
        prop_assume!(scenario.digests.data);
        let with_data: Vec<usize> = (0..scenario.pdus.len()).filter(|&i| !scenario.pdus[i].data.is_empty()).collect();
        prop_assume!(!with_data.is_empty());
        let victim = with_data[pick.index(with_data.len())];
        let (mut stream, starts) = encode_all(&scenario);
        let pdu = &scenario.pdus[victim];
        let writer_pdo = stream[starts[victim] + 3] as usize;
        let byte = starts[victim] + writer_pdo + (pick.index(pdu.data.len()));
        stream[byte] ^= 1 << bit;

        let mut expected = Vec::new();
        for (index, pdu) in scenario.pdus.iter().enumerate() {
            expected.push(Item::Header(pdu.header, pdu.data.len() as u32));
            if !pdu.data.is_empty() {
                let mut data = pdu.data.clone();
                if index == victim {
                    data[byte - starts[victim] - writer_pdo] ^= 1 << bit;
                }
                expected.push(Item::Data(data));
                expected.push(Item::DataEnd(index != victim));
            }
        }
        let items = drive(&mut reader_for(&scenario), &stream, &scenario.chunks, scenario.digests);
        prop_assert_eq!(items, expected);
    }

    #[test]
    fn corrupted_header_is_a_header_digest_error(scenario in scenario(), pick in any::<prop::sample::Index>(), bit in 0u8..8) {
        prop_assume!(scenario.digests.header);
        // IC PDUs and TermReqs carry no header digest.
        let candidates: Vec<usize> = (0..scenario.pdus.len())
            .filter(|&i| scenario.pdus[i].header.pdu_type().carries_digests())
            .collect();
        prop_assume!(!candidates.is_empty());
        let victim = candidates[pick.index(candidates.len())];
        let (mut stream, starts) = encode_all(&scenario);
        let hlen = scenario.pdus[victim].header.pdu_type().header_length();
        // Bytes 3.. (PDO, PLEN, PSH): the common-header checks on type, flags and HLEN
        // come first and would report those fields instead.
        let byte = starts[victim] + 3 + pick.index(hlen - 3);
        stream[byte] ^= 1 << bit;

        let mut expected = expected_items(&Scenario { pdus: scenario.pdus[..victim].to_vec(), ..scenario.clone() });
        let items = drive(&mut reader_for(&scenario), &stream, &scenario.chunks, scenario.digests);
        let Some((Item::Error(error), before)) = items.split_last().map(|(l, b)| (l.clone(), b.to_vec())) else {
            return Err(TestCaseError::fail(format!("no error: {items:?}")));
        };
        prop_assert_eq!(error.status, FatalErrorStatus::HeaderDigestError);
        prop_assert_eq!(error.offending_header(), &stream[starts[victim]..starts[victim] + hlen]);
        let received = u32::from_le_bytes(stream[starts[victim] + hlen..starts[victim] + hlen + 4].try_into().unwrap());
        prop_assert_eq!(error.info, received);
        expected.truncate(before.len());
        prop_assert_eq!(before, expected);
    }

    /// Arbitrary bytes after a valid IC PDU: never a panic, and chunking never
    /// changes the outcome.
    #[test]
    fn garbage_is_chunking_independent(scenario in scenario(), garbage in proptest::collection::vec(any::<u8>(), 0..600)) {
        let (mut stream, _) = encode_all(&Scenario { pdus: scenario.pdus[..1].to_vec(), ..scenario.clone() });
        stream.extend_from_slice(&garbage);
        let chunked = drive(&mut reader_for(&scenario), &stream, &scenario.chunks, scenario.digests);
        let whole = drive(&mut reader_for(&scenario), &stream, &[], scenario.digests);
        let bytewise = drive(&mut reader_for(&scenario), &stream, &[1], scenario.digests);
        prop_assert_eq!(&chunked, &whole);
        prop_assert_eq!(&bytewise, &whole);
    }
}
