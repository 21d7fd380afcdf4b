//! The blocking client against the real target on loopback.

mod support;

use std::time::{Duration, Instant};

use nvme_host_client::{commands, discover, ClientError, Controller, HostCompletion};
use nvme_spec::discovery::subsystem_type;
use nvme_spec::features::feature_id;
use nvme_spec::{NamespaceDescriptor, NamespaceId, Status};
use support::*;

#[test]
fn discovery_lists_the_subsystem() {
    let target = TestTarget::new();
    let entries = discover(target.address, &options(target.address)).expect("discover");
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry.subsystem_nqn_str(), Some(NQN));
    assert_eq!(entry.subsystem_type, subsystem_type::NVME_SUBSYSTEM);
    assert_eq!(entry.transport_address_str(), Some("127.0.0.1"));
    assert_eq!(entry.transport_service_id_str(), Some(target.address.port().to_string().as_str()));
}

#[test]
fn connect_identify_and_io_with_and_without_digests() {
    for (header, data) in [(false, false), (true, true), (true, false)] {
        let target = TestTarget::new();
        let mut options = options(target.address);
        options.header_digest = header;
        options.data_digest = data;
        let controller = Controller::connect(options).expect("connect");
        assert_eq!(controller.io_queue_count(), 2);
        let identify = controller.identify_controller().expect("identify");
        assert_eq!(identify.controller_id, controller.controller_id());
        assert_eq!(controller.identify().controller_id, controller.controller_id());
        assert_eq!(controller.active_namespaces().unwrap(), vec![NAMESPACE]);
        let namespace = controller.identify_namespace(NAMESPACE).unwrap();
        assert_eq!(namespace.namespace_size, NAMESPACE_BLOCKS);
        let descriptors = controller.namespace_descriptors(NAMESPACE).unwrap();
        assert!(descriptors.iter().any(|descriptor| matches!(descriptor, NamespaceDescriptor::Uuid(_))));
        assert_eq!(controller.block_size(NAMESPACE).unwrap(), BLOCK_BYTES);
        let kato = controller.get_feature(feature_id::KEEP_ALIVE_TIMER, NamespaceId::NONE, 0, 0).unwrap();
        assert_eq!(kato, 5000);
        let data = pattern(64 * 1024, 9);
        controller.write(NAMESPACE, 100, &data, false).unwrap();
        assert_eq!(controller.read(NAMESPACE, 100, 128).unwrap(), data);
        controller.flush(NAMESPACE).unwrap();
        controller.disconnect().expect("clean disconnect");
    }
}

#[test]
fn four_mebibytes_round_trip_and_smart_counts() {
    let target = TestTarget::new();
    let controller = Controller::connect(options(target.address)).expect("connect");
    let data = pattern(4 << 20, 4);
    controller.write(NAMESPACE, 2048, &data, false).unwrap();
    let back = controller.read(NAMESPACE, 2048, (data.len() / 512) as u32).unwrap();
    assert!(back == data, "4 MiB read back differs");
    // 128 KiB MDTS: 32 writes and 32 reads.
    let smart = controller.smart_log().unwrap();
    assert_eq!(smart.host_write_commands, 32);
    assert_eq!(smart.host_read_commands, 32);
    assert_eq!(smart.data_units_written, (4u128 << 20).div_ceil(512_000));
}

#[test]
fn nvme_errors_name_the_status() {
    let target = TestTarget::new();
    let controller = Controller::connect(options(target.address)).expect("connect");
    let error = controller.read(NAMESPACE, NAMESPACE_BLOCKS - 1, 2).unwrap_err();
    assert_eq!(error.status().map(Status::kind), Some(Status::LBA_OUT_OF_RANGE));
    assert_eq!(error.to_string(), "Read (I/O 02h) failed: LBA out of range (SCT 0h SC 80h, DNR)");
    let error = controller.get_log_page(0x7E, NamespaceId::BROADCAST, 0, 512).unwrap_err();
    assert!(error.to_string().contains("Invalid log page"), "{error}");
    assert!(matches!(controller.write(NAMESPACE, 0, &[1; 100], false), Err(ClientError::InvalidArgument(_))));
    // The controller still works.
    controller.flush(NAMESPACE).unwrap();
}

#[test]
fn io_queue_keeps_32_reads_in_flight() {
    let target = TestTarget::new();
    let controller = Controller::connect(options(target.address)).expect("connect");
    let data = pattern(64 * 4096, 7);
    controller.write(NAMESPACE, 0, &data, false).unwrap();
    let mut queue = controller.take_io_queue(1).expect("queue 1");
    assert!(controller.take_io_queue(1).is_none(), "taken already");
    assert!(controller.take_io_queue(5).is_none(), "out of range");
    assert_eq!(queue.depth(), 63);
    assert_eq!(queue.block_size(NAMESPACE), Some(BLOCK_BYTES));
    let mut completions: Vec<HostCompletion> = Vec::new();
    let mut next = 0u64;
    let started = Instant::now();
    let mut recycled: Vec<Vec<u8>> = Vec::new();
    let mut seen = [false; 64];
    while completions.len() < 64 {
        while next < 64 && queue.in_flight() < 32 {
            let mut command = commands::read(NAMESPACE, next * 8, 8, BLOCK_BYTES);
            command.user_tag = next;
            if let Some(mut buffer) = recycled.pop() {
                // A read's data_out must be empty: only its capacity is reused.
                buffer.clear();
                command.data_out = buffer;
            }
            queue.submit(command).unwrap();
            next += 1;
        }
        assert!(queue.in_flight() <= 32);
        let before = completions.len();
        queue.reap(1, Duration::from_secs(5), &mut completions).unwrap();
        for completion in &mut completions[before..] {
            assert!(completion.cqe.status.is_success());
            let index = completion.user_tag as usize;
            assert!(!seen[index]);
            seen[index] = true;
            assert!(completion.data == data[index * 4096..(index + 1) * 4096]);
            recycled.push(std::mem::take(&mut completion.data));
        }
        assert!(started.elapsed() < Duration::from_secs(30));
    }
    assert_eq!(queue.in_flight(), 0);
    // Nothing in flight: reap returns at once.
    let quick = Instant::now();
    assert_eq!(queue.reap(1, Duration::from_secs(5), &mut completions).unwrap(), 0);
    assert!(quick.elapsed() < Duration::from_secs(1));
    drop(queue);
    assert!(controller.take_io_queue(1).is_some(), "a dropped queue comes back");
}

#[test]
fn reap_honours_its_timeout() {
    let target = TestTarget::new();
    let controller = Controller::connect(options(target.address)).expect("connect");
    let mut queue = controller.take_io_queue(0).unwrap();
    // An Asynchronous Event Request never completes... on an I/O queue the target
    // refuses it; use a flush and ask for two completions instead.
    queue.submit(commands::flush(NAMESPACE)).unwrap();
    let mut out = Vec::new();
    let started = Instant::now();
    let got = queue.reap(2, Duration::from_millis(300), &mut out).unwrap();
    assert_eq!(got, 1);
    assert!(started.elapsed() < Duration::from_secs(2));
    // Nothing arrived yet for min 0: returns at once.
    assert_eq!(queue.reap(0, Duration::from_secs(5), &mut out).unwrap(), 0);
}

#[test]
fn keep_alive_keeps_the_controller() {
    let target = TestTarget::new();
    let mut options = options(target.address);
    options.keep_alive_timeout_ms = 1000; // the target rounds to whole seconds
    let controller = Controller::connect(options).expect("connect");
    let id = controller.controller_id();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(controller.controller_id(), id, "no reconnect was needed");
    assert_eq!(controller.reconnect_count(), 0);
    controller.flush(NAMESPACE).unwrap();
    controller.identify_controller().unwrap();
}

#[test]
fn reconnect_after_a_target_restart_loses_nothing() {
    let mut target = TestTarget::new();
    let port = target.address.port();
    let backend = target.backend.clone();
    let controller = Controller::connect(options(target.address)).expect("connect");
    let mut queue = controller.take_io_queue(0).expect("queue 0");

    let acknowledged = pattern(256 * 1024, 1);
    let mut out = Vec::new();
    for (index, chunk) in acknowledged.chunks(32 * 1024).enumerate() {
        let mut command = commands::write(NAMESPACE, index as u64 * 64, chunk.to_vec(), BLOCK_BYTES, false);
        command.user_tag = index as u64;
        queue.submit(command).unwrap();
    }
    while out.len() < 8 {
        queue.reap(8 - out.len(), Duration::from_secs(5), &mut out).unwrap();
    }
    assert!(out.iter().all(|completion| completion.cqe.status.is_success()));

    target.stop();
    // Written while the target is down: outstanding across the gap.
    let across = pattern(128 * 1024, 2);
    for (index, chunk) in across.chunks(16 * 1024).enumerate() {
        let mut command = commands::write(NAMESPACE, 4096 + index as u64 * 32, chunk.to_vec(), BLOCK_BYTES, false);
        command.user_tag = 100 + index as u64;
        queue.submit(command).unwrap();
    }
    let mut read = commands::read(NAMESPACE, 0, 256, BLOCK_BYTES);
    read.user_tag = 200;
    queue.submit(read).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let restarted = TestTarget::start(port, backend);

    let mut after = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while after.len() < 9 {
        assert!(Instant::now() < deadline, "commands across the gap never completed");
        queue.reap(9 - after.len(), Duration::from_secs(1), &mut after).unwrap();
    }
    for completion in &after {
        assert!(completion.cqe.status.is_success(), "tag {} {:?}", completion.user_tag, completion.cqe.status);
        if completion.user_tag == 200 {
            assert!(completion.data == acknowledged[..128 * 1024], "acknowledged data survived");
        }
    }
    drop(queue);
    assert!(controller.read(NAMESPACE, 4096, 256).unwrap() == across);
    assert!(controller.read(NAMESPACE, 0, 512).unwrap() == acknowledged);
    controller.identify_controller().expect("admin works after reconnect");
    assert!(controller.reconnect_count() >= 1);
    drop(restarted);
}

#[test]
fn controller_loss_timeout_gives_controller_lost() {
    let mut target = TestTarget::new();
    let mut options = options(target.address);
    options.reconnect_delay = Duration::from_millis(100);
    options.controller_loss_timeout = Duration::from_millis(1500);
    let controller = Controller::connect(options).expect("connect");
    let mut queue = controller.take_io_queue(0).unwrap();
    target.stop();
    let started = Instant::now();
    queue.submit(commands::read(NAMESPACE, 0, 8, BLOCK_BYTES)).unwrap();
    let mut out = Vec::new();
    let mut result = Ok(0);
    while out.is_empty() && started.elapsed() < Duration::from_secs(20) {
        result = queue.reap(1, Duration::from_secs(1), &mut out);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(out.len(), 1, "the outstanding read fails: {result:?}");
    assert_eq!(out[0].cqe.status.kind(), nvme_host_client::status::HOST_PATHING_ERROR);
    assert!(matches!(queue.submit(commands::flush(NAMESPACE)), Err(ClientError::ControllerLost)));
    assert!(matches!(controller.read(NAMESPACE, 0, 1), Err(ClientError::ControllerLost)));
    assert!(matches!(controller.identify_controller(), Err(ClientError::ControllerLost)));
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn connecting_to_nothing_fails_fast() {
    let address = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let error = Controller::connect(options(address)).unwrap_err();
    assert!(matches!(error, ClientError::Connect { .. }), "{error}");
    let target = TestTarget::new();
    let mut wrong = options(target.address);
    wrong.subsystem_nqn = "nqn.2026-11.io.sluice:nobody".into();
    let error = Controller::connect(wrong).unwrap_err();
    assert!(error.to_string().contains("rejected Connect"), "{error}");
}

#[test]
fn queues_on_threads_while_admin_commands_run() {
    let target = TestTarget::new();
    let controller = std::sync::Arc::new(Controller::connect(options(target.address)).expect("connect"));
    let workers: Vec<_> = (0..2)
        .map(|index| {
            let mut queue = controller.take_io_queue(index).expect("queue");
            std::thread::spawn(move || {
                let base = index as u64 * 16384;
                let mut out = Vec::new();
                for round in 0..20u64 {
                    let data = pattern(8192, round * 7 + index as u64);
                    let mut write = commands::write(NAMESPACE, base + round * 16, data.clone(), BLOCK_BYTES, false);
                    write.user_tag = round;
                    queue.submit(write).unwrap();
                    out.clear();
                    while out.is_empty() {
                        queue.reap(1, Duration::from_secs(5), &mut out).unwrap();
                    }
                    assert!(out[0].cqe.status.is_success());
                    let mut read = commands::read(NAMESPACE, base + round * 16, 16, BLOCK_BYTES);
                    read.user_tag = round;
                    queue.submit(read).unwrap();
                    out.clear();
                    while out.is_empty() {
                        queue.reap(1, Duration::from_secs(5), &mut out).unwrap();
                    }
                    assert!(out[0].data == data);
                }
            })
        })
        .collect();
    for _ in 0..20 {
        controller.identify_controller().unwrap();
        controller.smart_log().unwrap();
    }
    for worker in workers {
        worker.join().expect("worker");
    }
    assert_eq!(controller.smart_log().unwrap().host_write_commands, 40);
}

/// Block content of the race below: round `round` written by contender `writer`,
/// every byte depending on both and on its position, so a block mixed from two
/// writers never equals one writer's content.
fn race_content(round: u64, writer: u64, bytes: usize) -> Vec<u8> {
    let mut data: Vec<u8> = (0..bytes)
        .map(|index| (index as u64).wrapping_mul(0x9E37).wrapping_add(round * 131 + writer * 17) as u8)
        .collect();
    data[..8].copy_from_slice(&round.to_le_bytes());
    data[8..16].copy_from_slice(&writer.to_le_bytes());
    data
}

#[test]
fn fused_compare_and_write_races_have_exactly_one_winner() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};
    const CONTENDERS: u64 = 8;
    const ROUNDS: u64 = 10_000;
    // 8 blocks of 512 bytes: a torn write would mix blocks of two contenders.
    const RACE_BLOCKS: usize = 8;
    const LBA: u64 = 64;
    let target = TestTarget::start_on_threads(free_port(), ram_backend(), 2);
    let bytes = RACE_BLOCKS * BLOCK_BYTES as usize;
    let setup = Controller::connect(options(target.address)).expect("connect");
    setup.write(NAMESPACE, LBA, &race_content(0, 0, bytes), false).unwrap();
    // A plain compare agrees with what was written.
    assert!(setup.compare(NAMESPACE, LBA, &race_content(0, 0, bytes)).unwrap());
    assert!(!setup.compare(NAMESPACE, LBA, &race_content(0, 1, bytes)).unwrap());

    let barrier = Arc::new(Barrier::new(CONTENDERS as usize));
    // Per round: the winner's id + 1 (0: none yet) and the number of winners.
    let winner_of = Arc::new((0..ROUNDS).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let wins_in = Arc::new((0..ROUNDS).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let address = target.address;
    let contenders: Vec<_> = (0..CONTENDERS)
        .map(|me| {
            let (barrier, winner_of, wins_in) = (barrier.clone(), winner_of.clone(), wins_in.clone());
            std::thread::spawn(move || {
                let controller = Controller::connect(options(address)).expect("connect");
                let mut current = race_content(0, 0, bytes);
                for round in 0..ROUNDS {
                    let new = race_content(round + 1, me, bytes);
                    let won = controller.compare_and_write(NAMESPACE, LBA, &current, &new).expect("fused command");
                    if won {
                        wins_in[round as usize].fetch_add(1, Ordering::SeqCst);
                        winner_of[round as usize].store(me + 1, Ordering::SeqCst);
                    }
                    barrier.wait();
                    let winner = winner_of[round as usize].load(Ordering::SeqCst);
                    assert_ne!(winner, 0, "round {round}: nobody won");
                    current = race_content(round + 1, winner - 1, bytes);
                    if me == 0 && round % 1000 == 999 {
                        // The blocks hold exactly the winner's data.
                        assert!(
                            controller.read(NAMESPACE, LBA, RACE_BLOCKS as u32).unwrap() == current,
                            "round {round}: torn or lost"
                        );
                    }
                    barrier.wait();
                }
            })
        })
        .collect();
    for contender in contenders {
        contender.join().expect("contender");
    }
    for round in 0..ROUNDS as usize {
        assert_eq!(wins_in[round].load(Ordering::SeqCst), 1, "round {round}: not exactly one winner");
    }
    let last = winner_of[ROUNDS as usize - 1].load(Ordering::SeqCst) - 1;
    assert!(setup.read(NAMESPACE, LBA, RACE_BLOCKS as u32).unwrap() == race_content(ROUNDS, last, bytes));
}
