//! A gateway group of `sluice serve` processes exporting RBD images on the cluster at
//! `CEPH_CONF`, and hosts that reach it as the tests need them. Two members ("a" and
//! "b") exporting one image unless a test asks for more members ("a", "b", "c", ...),
//! more namespaces (each on its own image, in an ANA group of its own choosing) and
//! preferred owners of ANA groups.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvme_host_client::{ConnectOptions, Controller};
use nvme_spec::ana::{AnaLog, AnaState};
use nvme_spec::log_page::log_id;
use nvme_spec::NamespaceId;

use super::{free_port, scratch_dir, wait_bounded, ServeProcess};

pub const NQN: &str = "nqn.2026-11.io.sluice:ha-test";
pub const NAMESPACE: NamespaceId = NamespaceId(1);
pub const BLOCK_BYTES: usize = 4096;
/// Short leases keep the tests quick; the default (6 s) is measured in docs/results.
pub const LEASE_MS: u64 = 3000;

/// A name unique to this test process.
pub fn unique(what: &str) -> String {
    format!("sluice-gw-{what}-{}", std::process::id())
}

/// The name of member `member`: "a", "b", "c", ... (a group has at most 16).
pub fn member_name(member: usize) -> String {
    assert!(member < 16, "a gateway group has at most 16 members");
    char::from(b'a' + member as u8).to_string()
}

/// One namespace the group exports, on an image of its own.
#[derive(Clone, Debug)]
pub struct GroupNamespace {
    pub nsid: u32,
    pub ana_group: u32,
    /// The RBD image (in pool "rbd").
    pub image: String,
}

/// Members "a", "b", ... of one group exporting its namespaces (by default one, NSID 1
/// in ANA group 1, on `image`).
pub struct Group {
    pub dir: PathBuf,
    pub image: String,
    pub group: String,
    /// Each member's I/O listener, by position.
    pub ports: Vec<u16>,
    pub block_bytes: usize,
    /// The namespaces every member exports; the first is on `image`.
    pub namespaces: Vec<GroupNamespace>,
    /// `[[gateway.ana_group]]` entries: (ANA group, preferred member's position).
    pub preferred: Vec<(u32, usize)>,
}

impl Group {
    /// Two members exporting one namespace.
    pub fn new(test: &str) -> Group {
        Group::with_members(test, 2)
    }

    /// `members` members exporting one namespace.
    pub fn with_members(test: &str, members: usize) -> Group {
        assert!((1..=16).contains(&members), "1..=16 members");
        let dir = scratch_dir(&format!("gateway-{test}"));
        let image = unique(test);
        Group {
            dir,
            namespaces: vec![GroupNamespace { nsid: NAMESPACE.0, ana_group: 1, image: image.clone() }],
            image,
            group: unique(test),
            ports: (0..members).map(|_| free_port()).collect(),
            block_bytes: BLOCK_BYTES,
            preferred: Vec::new(),
        }
    }

    /// Exports these (NSID, ANA group) namespaces instead, each on its own image (the
    /// first on `image`), every ANA group preferred by the member given.
    pub fn with_namespaces(mut self, namespaces: &[(u32, u32, usize)]) -> Group {
        self.namespaces = namespaces
            .iter()
            .enumerate()
            .map(|(index, &(nsid, ana_group, _))| GroupNamespace {
                nsid,
                ana_group,
                image: if index == 0 { self.image.clone() } else { format!("{}-ns{nsid}", self.image) },
            })
            .collect();
        self.preferred.clear();
        for &(_, ana_group, member) in namespaces {
            assert!(member < self.ports.len(), "member {member} of {}", self.ports.len());
            if !self.preferred.iter().any(|(group, _)| *group == ana_group) {
                self.preferred.push((ana_group, member));
            }
        }
        self
    }

    pub fn members(&self) -> usize {
        self.ports.len()
    }

    pub fn address(&self, member: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[member]))
    }

    /// The config of member `member` ("a", "b", ...). `nsid` replaces the first
    /// namespace's NSID (to describe its image differently from the other members).
    pub fn config(&self, member: usize, nsid: u32) -> PathBuf {
        use std::fmt::Write;
        let name = member_name(member);
        let path = self.dir.join(format!("gateway-{name}.toml"));
        let mut text = format!(
            r#"[[listener]]
address = "127.0.0.1:{port}"

[gateway]
name = "{name}"
group = "{group}"
lease_ms = {LEASE_MS}
op_timeout_ms = 5000
"#,
            port = self.ports[member],
            group = self.group,
        );
        for (index, port) in self.ports.iter().enumerate() {
            let _ = write!(
                text,
                "\n[[gateway.member]]\nname = \"{}\"\naddress = \"127.0.0.1:{port}\"\n",
                member_name(index)
            );
        }
        for (ana_group, preferred) in &self.preferred {
            let _ = write!(
                text,
                "\n[[gateway.ana_group]]\nid = {ana_group}\npreferred = \"{}\"\n",
                member_name(*preferred)
            );
        }
        for (index, namespace) in self.namespaces.iter().enumerate() {
            let _ = write!(
                text,
                r#"
[[backend]]
name = "{backend}"
kind = "rbd"
pool = "rbd"
image = "{image}"
size = "64MiB"
block_size = {block_bytes}
op_timeout_ms = 5000
"#,
                backend = backend_name(index),
                image = namespace.image,
                block_bytes = self.block_bytes,
            );
        }
        let _ = write!(text, "\n[[subsystem]]\nnqn = \"{NQN}\"\nallow_any_host = true\n");
        for (index, namespace) in self.namespaces.iter().enumerate() {
            let _ = write!(
                text,
                "\n[[subsystem.namespace]]\nnsid = {nsid}\ndevice = \"{backend}\"\nana_group = {ana_group}\n",
                nsid = if index == 0 { nsid } else { namespace.nsid },
                backend = backend_name(index),
                ana_group = namespace.ana_group,
            );
        }
        text.push_str("\n[runtime]\nthreads = 1\n");
        std::fs::write(&path, text).expect("write gateway config");
        path
    }

    /// The config of member `member` with the group's configuration kept in the
    /// cluster: the whole file (its group part seeds an empty group) or, with
    /// `own_part_only`, just the gateway's own part.
    pub fn cluster_config(&self, member: usize, own_part_only: bool) -> PathBuf {
        let path = self.config(member, NAMESPACE.0);
        let full = std::fs::read_to_string(&path).unwrap().replacen(
            "op_timeout_ms = 5000\n",
            "op_timeout_ms = 5000\nconfig = \"cluster\"\n",
            1,
        );
        let text = if own_part_only {
            let gateway_end = full.find("[[gateway.member]]").unwrap();
            format!("{}[runtime]\nthreads = 1\n", &full[..gateway_end])
        } else {
            full
        };
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn start(&self, member: usize) -> ServeProcess {
        self.start_with_env(member, &[])
    }

    pub fn start_with_env(&self, member: usize, env: &[(&str, &str)]) -> ServeProcess {
        let config = self.config(member, NAMESPACE.0);
        let socket = self.socket(member);
        ServeProcess::start_with_env(&config, &["--rpc-socket", socket.to_str().unwrap()], env)
            .unwrap_or_else(|| panic!("gateway {member} did not start (ports {:?})", self.ports))
    }

    /// Starts member `member` with its config text passed through `edit` first.
    pub fn start_edited(&self, member: usize, edit: impl Fn(String) -> String) -> ServeProcess {
        let config = self.config(member, NAMESPACE.0);
        std::fs::write(&config, edit(std::fs::read_to_string(&config).unwrap())).unwrap();
        let socket = self.socket(member);
        ServeProcess::start_with_env(&config, &["--rpc-socket", socket.to_str().unwrap()], &[])
            .unwrap_or_else(|| panic!("gateway {member} did not start (ports {:?})", self.ports))
    }

    /// Member `member`'s management socket.
    pub fn socket(&self, member: usize) -> PathBuf {
        self.dir.join(format!("{member}.sock"))
    }

    /// `sluice ARGS --socket <member's socket>`, which must succeed; its stdout.
    pub fn manage(&self, member: usize, args: &[&str]) -> String {
        let socket = self.socket(member);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--socket", socket.to_str().unwrap()]);
        let output = super::sluice(&all);
        assert!(output.status.success(), "sluice {args:?} on {member}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

/// The `[[backend]]` name of the namespace at `index`.
fn backend_name(index: usize) -> String {
    if index == 0 {
        "shared".to_string()
    } else {
        format!("shared-{}", index + 1)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let mut removed = true;
        for namespace in &self.namespaces {
            removed &= remove_image(&format!("rbd/{}", namespace.image));
        }
        remove_image(&format!("rbd/{}-2", self.image));
        let _ = Command::new("rados")
            .args(["-p", "rbd", "rm", &format!("sluice.config.{}", self.group)])
            .stderr(Stdio::null())
            .status();
        // The leases and reservation records too, once no gateway holds the images
        // (a gateway still running would only make them again).
        if removed {
            remove_objects(&format!("sluice.gateway.{}", self.group), &format!("sluice.reservations.{}.", self.group));
        }
    }
}

/// Removes the object `exact` and every object whose name starts with `prefix` from
/// pool "rbd" (best effort).
fn remove_objects(exact: &str, prefix: &str) {
    let Ok(listed) = Command::new("rados").args(["-p", "rbd", "ls"]).stderr(Stdio::null()).output() else { return };
    for name in String::from_utf8_lossy(&listed.stdout).lines() {
        if name == exact || name.starts_with(prefix) {
            let _ = Command::new("rados").args(["-p", "rbd", "rm", name]).stderr(Stdio::null()).status();
        }
    }
}

/// Removes an image (retrying while a gateway that just stopped still holds it);
/// false when it is still there after 30 s.
pub fn remove_image(spec: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let child = Command::new("rbd")
            .args(["rm", "--no-progress", spec])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run rbd");
        match wait_bounded(child, Duration::from_secs(60)) {
            Some(output) if output.status.success() || String::from_utf8_lossy(&output.stderr).contains("No such") => {
                return true
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
    false
}

/// Namespace `nsid` through Sluice's multipath host over every member (one I/O
/// queue, round-robin, 30 s command timeout): the multipath and its queue.
pub fn multipath_to(
    group: &Group,
    nsid: u32,
) -> Result<(nvme_host_client::Multipath, nvme_host_client::MultipathQueue), nvme_host_client::ClientError> {
    let paths = (0..group.members())
        .map(|member| {
            let mut options = ConnectOptions::new(group.address(member), NQN);
            options.io_queues = 1;
            options.command_timeout = Duration::from_secs(30);
            options
        })
        .collect();
    let multipath =
        nvme_host_client::Multipath::connect(paths, NamespaceId(nsid), nvme_host_client::PathPolicy::RoundRobin)?;
    let queue = multipath
        .take_io_queue(0)
        .ok_or_else(|| nvme_host_client::ClientError::InvalidArgument("no I/O queue on a path".into()))?;
    Ok((multipath, queue))
}

pub fn connect(address: SocketAddr) -> Controller {
    connect_as(address, None)
}

/// Connects as the host with this identifier (its NQN derived from it), or as the
/// default host.
pub fn connect_as(address: SocketAddr, host: Option<[u8; 16]>) -> Controller {
    let mut options = ConnectOptions::new(address, NQN);
    if let Some(host) = host {
        options.host_identifier = host;
        options.host_nqn = format!("nqn.2014-08.org.nvmexpress:uuid:{}", nvme_host_client::format_uuid(&host));
    }
    options.io_queues = 1;
    options.command_timeout = Duration::from_secs(20);
    options.controller_loss_timeout = Duration::ZERO;
    Controller::connect(options).unwrap_or_else(|error| panic!("connect to {address}: {error}"))
}

/// Bytes read of the ANA log: the most a target can return (every ANA group and
/// every NSID listed), so a group of 4,096 namespaces decodes whole.
const ANA_LOG_READ_BYTES: u32 = (nvme_spec::ana::ANA_LOG_HEADER_BYTES
    + nvme_target::limits::MAX_ANA_GROUP_ID as usize * nvme_spec::ana::ANA_GROUP_DESCRIPTOR_BYTES
    + nvme_target::limits::MAX_NAMESPACE_ID as usize * 4) as u32;

/// The ANA log (0Ch) at `address`, as a host reads it; `None` when the gateway does
/// not answer.
pub fn ana_log(address: SocketAddr) -> Option<AnaLog> {
    let mut options = ConnectOptions::new(address, NQN);
    options.io_queues = 0;
    options.connect_timeout = Duration::from_secs(2);
    options.command_timeout = Duration::from_secs(2);
    options.controller_loss_timeout = Duration::ZERO;
    let controller = Controller::connect(options).ok()?;
    let data = controller
        .get_log_page(log_id::ASYMMETRIC_NAMESPACE_ACCESS, NamespaceId::BROADCAST, 0, ANA_LOG_READ_BYTES)
        .ok()?;
    Some(AnaLog::decode(&data).expect("a well-formed ANA log"))
}

/// The state of ANA group `ana_group` in `log` (which must list it).
pub fn state_in(log: &AnaLog, ana_group: u32) -> AnaState {
    let descriptor = log.groups.iter().find(|group| group.descriptor.group_id.0 == ana_group);
    descriptor.unwrap_or_else(|| panic!("ANA group {ana_group} missing from the log: {log:?}")).descriptor.state
}

/// The state of ANA group `ana_group` at `address`; `None` when the gateway does not
/// answer.
pub fn ana_group_state(address: SocketAddr, ana_group: u32) -> Option<AnaState> {
    ana_log(address).map(|log| state_in(&log, ana_group))
}

/// The state of ANA group 1 at `address`, the only group there, with [`NAMESPACE`]
/// alone in it; `None` when the gateway does not answer.
pub fn group_state(address: SocketAddr) -> Option<AnaState> {
    let log = ana_log(address)?;
    assert_eq!(log.groups.len(), 1, "one ANA group: {log:?}");
    assert_eq!(log.groups[0].namespaces, [NAMESPACE]);
    Some(log.groups[0].descriptor.state)
}

/// ANA group (1..=`ana_groups`) -> the member reporting it optimized, for every group
/// with exactly one such member and every other member reporting it non-optimized;
/// `None` while some group is not settled (or a member cannot be asked).
pub fn owners(group: &Group, ana_groups: u32) -> Option<Vec<usize>> {
    let members = group.members();
    let logs: Vec<_> = (0..members).map(|member| ana_log(group.address(member))).collect::<Option<Vec<_>>>()?;
    (1..=ana_groups)
        .map(|ana_group| {
            let states: Vec<AnaState> = logs.iter().map(|log| state_in(log, ana_group)).collect();
            let optimized: Vec<usize> = (0..members).filter(|&member| states[member] == AnaState::Optimized).collect();
            let rest_non_optimized =
                (0..members).all(|member| optimized.contains(&member) || states[member] == AnaState::NonOptimized);
            match optimized[..] {
                [owner] if rest_non_optimized => Some(owner),
                _ => None,
            }
        })
        .collect()
}

/// Polls [`owners`] until `accept` takes them; fails after `limit`.
pub fn await_owners(
    group: &Group,
    ana_groups: u32,
    accept: impl Fn(&[usize]) -> bool,
    what: &str,
    limit: Duration,
) -> Vec<usize> {
    let start = Instant::now();
    loop {
        if let Some(found) = owners(group, ana_groups).filter(|found| accept(found)) {
            return found;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: not settled within {limit:?}, owners {:?}",
            owners(group, ana_groups)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls until `address` reports `state` for group 1; returns how long it took.
pub fn await_state(address: SocketAddr, state: AnaState, limit: Duration) -> Duration {
    await_until(address, limit, &format!("{state:?}"), || group_state(address) == Some(state))
}

/// Polls until `address` reports `state` for ANA group `ana_group`; returns how long
/// it took.
pub fn await_group_state(address: SocketAddr, ana_group: u32, state: AnaState, limit: Duration) -> Duration {
    let what = format!("{state:?} for ANA group {ana_group}");
    await_until(address, limit, &what, || ana_group_state(address, ana_group) == Some(state))
}

fn await_until(address: SocketAddr, limit: Duration, what: &str, mut reached: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if reached() {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{address} does not report {what} after {limit:?} ({:?})", ana_log(address));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The status a command completed with (panics on a transport failure).
pub fn status_of<T>(result: Result<T, nvme_host_client::ClientError>) -> nvme_spec::Status {
    match result {
        Ok(_) => nvme_spec::Status::SUCCESS,
        Err(nvme_host_client::ClientError::Command { status, .. }) => status.kind(),
        Err(other) => panic!("expected a command status, got {other}"),
    }
}

/// Reservation Register (RREGA `action`).
pub fn register_action(host: &Controller, action: u8, current: u64, key: u64) -> nvme_spec::Status {
    status_of(host.io_command(nvme_host::commands::reservation_register(NAMESPACE, action, false, 0, current, key)))
}

/// Reservation Register of `key`.
pub fn register(host: &Controller, key: u64) -> nvme_spec::Status {
    register_action(host, 0, 0, key)
}

/// Reservation Acquire (RACQA `action`) of Write Exclusive.
pub fn acquire_write_exclusive(host: &Controller, action: u8, key: u64, preempt: u64) -> nvme_spec::Status {
    status_of(host.io_command(nvme_host::commands::reservation_acquire(NAMESPACE, action, false, 1, key, preempt)))
}

/// The holder's Host Identifier in a Reservation Report, or `None`.
pub fn holder(host: &Controller) -> Option<[u8; 16]> {
    let completion = host.io_command(nvme_host::commands::reservation_report(NAMESPACE, 4096, true)).expect("report");
    let data = completion.data;
    let count = u16::from_le_bytes([data[5], data[6]]) as usize;
    (0..count)
        .map(|index| &data[64 + index * 64..128 + index * 64])
        .find(|entry| entry[2] == 1)
        .map(|entry| entry[16..32].try_into().unwrap())
}
