//! No data loss: a writer does random writes with FUA and periodic Flush against a
//! namespace of `sluice serve`; the target is killed with SIGKILL at a random moment
//! and restarted; every write acknowledged under FUA, or before a Flush that
//! completed, must read back intact. Four storage layouts, all declared in the TOML
//! config the way a user would:
//! - a file namespace, 20 seeds;
//! - a write-back cache tier (file fast tier over file slow tier, a fast tier much
//!   smaller than the namespace, so lines are evicted and destaged all the time),
//!   20 seeds;
//! - pool carves (thin and thick) on a RAID0 of three files, with and without
//!   Namespace Management on the pool, a few seeds;
//! - a Ceph RBD image (a new one per seed), 10 seeds, when a cluster is given
//!   (`CEPH_CONF`; scripts/test.sh starts one and sets `SLUICE_REQUIRE_CEPH`). There
//!   the kill leaves the image's watch and exclusive lock with a dead owner, and the
//!   restarted target must open and read the image all the same (tests/rbd.rs checks
//!   that it also writes again); each round's image is removed after it.
//!
//! A SIGKILL keeps the page cache, so this proves the target never acknowledges a
//! write before handing it to the kernel with the durability the host asked for (no
//! ordering or ack bugs, no dirty cache line or thin mapping forgotten at restart);
//! power loss itself is not simulated.
//!
//! The assertion that catches a loss is `lost.is_empty()` in `kill_and_verify`.
//! Checked by hand: a volatile namespace (`backend = "ram"`) fails it on the first seed,
//! and so does a write-back cache with a RAM fast tier (which the config refuses; the
//! check was bypassed for that experiment).

mod support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvme_host::commands;
use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::NamespaceId;
use support::{ceph_cluster_given, wait_bounded};

const NQN: &str = "nqn.2026-11.io.sluice:crash";
const BLOCK_BYTES: u32 = 4096;
const BLOCKS: u64 = 2048; // 8 MiB
const QUEUE_DEPTH: usize = 8;
const FLUSH_EVERY_WRITES: usize = 16;
const ROUNDS: u64 = 20;
/// Pool carves on RAID0: a few rounds (thin and thick) on top of the 40 above.
const POOL_ROUNDS: u64 = 4;
/// RBD images: each round needs a cluster round trip per write, so fewer rounds.
const RBD_ROUNDS: u64 = 10;
const NAMESPACE: NamespaceId = NamespaceId(1);

/// A tiny deterministic generator (splitmix64) so each seed replays exactly.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The block content of `lba` in round `seed`: every byte depends on both, so a
/// block from another round or place is caught.
fn block(seed: u64, lba: u64) -> Vec<u8> {
    let mut random = Random(seed.wrapping_mul(1_000_003) ^ lba);
    (0..BLOCK_BYTES / 8).flat_map(|_| random.next().to_le_bytes()).collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_target(config: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        // No management socket: the tests run at once, and none needs one.
        .args(["serve", "--no-rpc-socket", "--config"])
        .arg(config)
        .env("SLUICE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sluice serve starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "sluice serve did not get ready in 30 s");
        match lines.next() {
            Some(Ok(line)) if line.contains("sluice: ready") => break,
            Some(Ok(_)) => continue,
            _ => panic!("sluice serve exited before it was ready"),
        }
    }
    // Keep draining stdout so the target never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

fn options(address: SocketAddr) -> ConnectOptions {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(5);
    options.reconnect_delay = Duration::from_millis(100);
    // Fail fast once the target is gone: outstanding commands complete with errors
    // instead of being replayed to the restarted target.
    options.controller_loss_timeout = Duration::from_millis(300);
    options
}

/// Writes until the target dies; returns the LBAs whose writes are durable by the
/// rules (FUA completed, or completed before a completed Flush).
fn write_until_killed(address: SocketAddr, seed: u64, kill_after: Duration, mut target: Child) -> HashSet<u64> {
    let controller = Controller::connect(options(address)).expect("connect");
    let mut queue = controller.take_io_queue(0).expect("an I/O queue");
    let mut random = Random(seed);
    let mut order: Vec<u64> = (0..BLOCKS).collect();
    for index in (1..order.len()).rev() {
        order.swap(index, (random.next() % (index as u64 + 1)) as usize);
    }
    // user_tag: LBA for writes (bit 63 marks FUA), u64::MAX - n for the n-th flush.
    const FUA_TAG: u64 = 1 << 63;
    let mut durable = HashSet::new();
    let mut completed_unflushed: Vec<u64> = Vec::new();
    let mut flush_covers: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut next = 0;
    let mut writes_since_flush = 0;
    let mut flushes = 0u64;
    let mut completions = Vec::new();
    let started = Instant::now();
    let mut killed = false;
    loop {
        if !killed && started.elapsed() >= kill_after {
            // SIGKILL (Child::kill sends SIGKILL on Unix).
            let _ = target.kill();
            killed = true;
        }
        while queue.in_flight() < QUEUE_DEPTH && next < order.len() && !killed {
            if writes_since_flush == FLUSH_EVERY_WRITES {
                writes_since_flush = 0;
                flushes += 1;
                // The flush covers every write completed before it was submitted.
                flush_covers.push((u64::MAX - flushes, std::mem::take(&mut completed_unflushed)));
                let mut flush = commands::flush(NAMESPACE);
                flush.user_tag = u64::MAX - flushes;
                if queue.submit(flush).is_err() {
                    break;
                }
                continue;
            }
            let lba = order[next];
            next += 1;
            writes_since_flush += 1;
            let fua = random.next().is_multiple_of(2);
            let mut write = commands::write(NAMESPACE, lba, block(seed, lba), BLOCK_BYTES, fua);
            write.user_tag = if fua { lba | FUA_TAG } else { lba };
            if queue.submit(write).is_err() {
                break;
            }
        }
        if queue.in_flight() == 0 && (killed || next == order.len()) {
            break;
        }
        completions.clear();
        if queue.reap(1, Duration::from_millis(100), &mut completions).is_err() {
            break;
        }
        for completion in &completions {
            if !completion.cqe.status.is_success() {
                continue;
            }
            let tag = completion.user_tag;
            if let Some(position) = flush_covers.iter().position(|(flush_tag, _)| *flush_tag == tag) {
                let (_, covered) = flush_covers.remove(position);
                durable.extend(covered);
            } else if tag & FUA_TAG != 0 {
                durable.insert(tag & !FUA_TAG);
            } else {
                completed_unflushed.push(tag);
            }
        }
    }
    if !killed {
        let _ = target.kill();
    }
    drop(queue);
    drop(controller);
    let _ = target.wait();
    durable
}

/// A storage layout under test: how many kill rounds, and the config after the listener:
/// `[[backend]]`, `[[pool]]`, the subsystem (written `{subsystem}`, then any keys of
/// its own) and its `[[subsystem.namespace]]` (`{dir}` is the round's scratch
/// directory). Every layout offers NSID 1 with `BLOCKS` blocks of `BLOCK_BYTES`.
struct Layout {
    name: &'static str,
    rounds: u64,
    storage: fn(seed: u64) -> String,
    /// Cleans up what the round left outside its scratch directory (run also when the
    /// round fails).
    after_round: Option<fn(seed: u64)>,
}

/// Runs the layout's `after_round` when dropped, so a failed round cleans up too.
struct RoundCleanup<'a> {
    layout: &'a Layout,
    seed: u64,
}

impl Drop for RoundCleanup<'_> {
    fn drop(&mut self) {
        if let Some(after_round) = self.layout.after_round {
            after_round(self.seed);
        }
    }
}

/// The restarted target, stopped with SIGTERM when dropped (also when the round
/// fails), so it closes its storage (an RBD image's lock and watch go with it);
/// SIGKILL if it has not stopped within 10 s.
struct Restarted(Child);

impl Drop for Restarted {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn file_namespace(_seed: u64) -> String {
    format!(
        "{{subsystem}}\n[[subsystem.namespace]]\nbackend = \"file\"\npath = \"{{dir}}/namespace.img\"\nsize = {}\nblock_size = {BLOCK_BYTES}\n",
        BLOCKS * u64::from(BLOCK_BYTES)
    )
}

/// A 1 MiB fast tier (about 50 lines of 16 KiB) in front of the 8 MiB namespace.
fn write_back_cache(_seed: u64) -> String {
    format!(
        r#"
[[backend]]
name = "flash"
kind = "file"
path = "{{dir}}/fast.img"
size = "1MiB"
block_size = {BLOCK_BYTES}

[[backend]]
name = "disk"
kind = "file"
path = "{{dir}}/slow.img"
size = {}
block_size = {BLOCK_BYTES}

[[backend]]
name = "tier"
kind = "cache"
fast = "flash"
slow = "disk"
mode = "write-back"
line_size = "16KiB"

{{subsystem}}

[[subsystem.namespace]]
nsid = 1
device = "tier"
"#,
        BLOCKS * u64::from(BLOCK_BYTES)
    )
}

/// An 8 MiB carve (thin on odd seeds, thick on even) of a pool on RAID0 of three 4 MiB
/// files with 64 KiB strips. Seeds 1, 4, 5, ... turn on Namespace Management with that
/// pool, so the target itself finds the carve by its binding after the restart.
fn pool_carve_on_raid0(seed: u64) -> String {
    let members: String = (0..3)
        .map(|member| {
            format!(
                "[[backend]]\nname = \"disk{member}\"\nkind = \"file\"\npath = \"{{dir}}/disk{member}.img\"\n\
                 size = \"4MiB\"\nblock_size = {BLOCK_BYTES}\n\n"
            )
        })
        .collect();
    format!(
        r#"{members}
[[backend]]
name = "stripe"
kind = "raid0"
members = ["disk0", "disk1", "disk2"]
strip_size = "64KiB"

[[pool]]
name = "capacity"
device = "stripe"
table = "{{dir}}/capacity.table.json"

{{subsystem}}{}

[[subsystem.namespace]]
nsid = 1
pool = "capacity"
size = {}
thin = {}
"#,
        if seed % 4 <= 1 { "pool = \"capacity\"" } else { "" },
        BLOCKS * u64::from(BLOCK_BYTES),
        seed % 2 == 1
    )
}

/// The round's RBD image: new for every seed (a fresh image reads zeroes).
fn rbd_image(seed: u64) -> String {
    format!("sluice-crash-{}-{seed}", std::process::id())
}

/// An 8 MiB RBD image with 4096-byte blocks in pool `rbd` of the cluster at $CEPH_CONF,
/// created at the first start of the round.
fn rbd_namespace(seed: u64) -> String {
    format!(
        "[[backend]]\nname = \"image\"\nkind = \"rbd\"\npool = \"rbd\"\nimage = \"{}\"\nsize = {}\n\
         block_size = {BLOCK_BYTES}\n\n{{subsystem}}\n[[subsystem.namespace]]\nnsid = 1\ndevice = \"image\"\n",
        rbd_image(seed),
        BLOCKS * u64::from(BLOCK_BYTES)
    )
}

/// Removals of round images under way (see [`remove_rbd_image`]).
static IMAGE_REMOVALS: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Removes the round's image on a thread of its own, so the next round need not wait
/// for it: the watch of the target killed mid-round outlives it by the cluster's
/// watch timeout, and `rbd rm` refuses an image with watchers until then.
/// [`AwaitImageRemovals`] waits for them at the end of the test.
fn remove_rbd_image(seed: u64) {
    let removal = std::thread::spawn(move || remove_rbd_image_now(seed));
    IMAGE_REMOVALS.lock().unwrap_or_else(PoisonError::into_inner).push(removal);
}

/// Waits for every [`remove_rbd_image`] when dropped (also when the test fails).
struct AwaitImageRemovals;

impl Drop for AwaitImageRemovals {
    fn drop(&mut self) {
        let removals = std::mem::take(&mut *IMAGE_REMOVALS.lock().unwrap_or_else(PoisonError::into_inner));
        for removal in removals {
            let _ = removal.join();
        }
    }
}

/// `rbd rm` of the round's image, retried for up to 30 s while it fails. Best effort:
/// never fails the test.
fn remove_rbd_image_now(seed: u64) {
    let spec = format!("rbd/{}", rbd_image(seed));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Ok(child) = Command::new("rbd")
            .args(["rm", "--no-progress", &spec])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
        else {
            return;
        };
        let Some(output) = wait_bounded(child, Duration::from_secs(20)) else { return };
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.success() || stderr.contains("No such file") || Instant::now() >= deadline {
            if !output.status.success() && !stderr.contains("No such file") {
                eprintln!("crash test (rbd): could not remove {spec}: {}", stderr.trim());
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn config_file(directory: &Path, port: u16, layout: &Layout, seed: u64) -> PathBuf {
    let path = directory.join("sluice.toml");
    let storage = (layout.storage)(seed)
        .replace("{dir}", &directory.display().to_string())
        .replace("{subsystem}", &format!("[[subsystem]]\nnqn = \"{NQN}\"\nallow_any_host = true\n"));
    let text = format!("[[listener]]\naddress = \"127.0.0.1:{port}\"\n\n{storage}\n[runtime]\nthreads = 1\n");
    std::fs::write(&path, text).unwrap();
    path
}

/// Kills and restarts the target `layout.rounds` times; returns the number of durable
/// writes checked (all of them intact, or the test fails).
fn kill_and_verify(layout: &Layout) -> usize {
    let started = Instant::now();
    let mut total_checked = 0usize;
    for seed in 1..=layout.rounds {
        let _cleanup = RoundCleanup { layout, seed };
        // CARGO_TARGET_TMPDIR is on the build filesystem, which supports O_DIRECT
        // (tmpfs does not).
        let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "crash-{}-{}-{seed}",
            layout.name,
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        let port = free_port();
        let config = config_file(&directory, port, layout, seed);
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let kill_after = Duration::from_millis(30 + Random(seed).next() % 300);

        let target = start_target(&config);
        let durable = write_until_killed(address, seed, kill_after, target);

        let restarted = Restarted(start_target(&config));
        let controller = Controller::connect(options(address)).expect("reconnect after restart");
        let data = controller.read(NAMESPACE, 0, BLOCKS as u32).expect("read back");
        let mut lost = Vec::new();
        for lba in 0..BLOCKS {
            let stored = &data[(lba * u64::from(BLOCK_BYTES)) as usize..((lba + 1) * u64::from(BLOCK_BYTES)) as usize];
            let expected = block(seed, lba);
            if durable.contains(&lba) {
                if stored != expected.as_slice() {
                    lost.push(lba);
                }
            } else {
                // Not acknowledged as durable: either never written or fully written.
                assert!(
                    stored == expected.as_slice() || stored.iter().all(|&byte| byte == 0),
                    "{} seed {seed}: LBA {lba} holds neither zeroes nor its block",
                    layout.name
                );
            }
        }
        drop(controller);
        drop(restarted);
        let _ = std::fs::remove_dir_all(&directory);
        // This is the assertion that catches data loss.
        assert!(
            lost.is_empty(),
            "{} seed {seed}: {} durable writes lost, e.g. LBAs {:?}",
            layout.name,
            lost.len(),
            &lost[..lost.len().min(8)]
        );
        total_checked += durable.len();
    }
    // The test must have checked something: most rounds acknowledge writes before the kill.
    let rounds = layout.rounds;
    assert!(
        total_checked as u64 > 5 * rounds,
        "{}: only {total_checked} durable writes checked over {rounds} rounds",
        layout.name
    );
    eprintln!(
        "crash test ({}): {total_checked} durable writes checked over {rounds} kills, 0 lost, {:.1} s",
        layout.name,
        started.elapsed().as_secs_f64()
    );
    total_checked
}

#[test]
fn acknowledged_writes_survive_a_target_kill() {
    kill_and_verify(&Layout { name: "file", rounds: ROUNDS, storage: file_namespace, after_round: None });
}

#[test]
fn acknowledged_writes_survive_a_target_kill_with_a_write_back_cache_tier() {
    kill_and_verify(&Layout { name: "write-back-cache", rounds: ROUNDS, storage: write_back_cache, after_round: None });
}

#[test]
fn acknowledged_writes_survive_a_target_kill_on_pool_carves_on_raid0_of_files() {
    kill_and_verify(&Layout {
        name: "pool-on-raid0",
        rounds: POOL_ROUNDS,
        storage: pool_carve_on_raid0,
        after_round: None,
    });
}

#[test]
fn acknowledged_writes_survive_a_target_kill_on_an_rbd_image() {
    if !ceph_cluster_given("acknowledged_writes_survive_a_target_kill_on_an_rbd_image") {
        return;
    }
    let _removals = AwaitImageRemovals;
    kill_and_verify(&Layout {
        name: "rbd",
        rounds: RBD_ROUNDS,
        storage: rbd_namespace,
        after_round: Some(remove_rbd_image),
    });
}
