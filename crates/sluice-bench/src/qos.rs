//! Whether the target under test held the suite back with QoS limits, so that
//! nobody benchmarks a limit by mistake: the limits on the namespace and its
//! throttle counters are read before and after the suite, from the embedded target
//! itself or from `sluice serve`'s management socket (`ns_list`), and a suite that
//! ran against a limit says so on stderr, in its notes and in the result's `qos`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bench_results::QosObservation;
use nvme_target::Target;
use serde_json::{json, Value};

use super::exec::Endpoint;

/// Where the target's QoS state is read.
pub enum QosSource {
    Embedded(Arc<Target>),
    Socket(PathBuf),
}

/// The limits on the namespace and its throttle counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QosReading {
    pub limits: Vec<String>,
    pub throttled_commands: u64,
    pub throttled_seconds: f64,
}

impl QosSource {
    /// The embedded target; for `--target`, the socket given with
    /// `--target-rpc-socket`, else the default management socket when the target is
    /// on this machine and that socket exists (it may belong to another target: then
    /// it does not serve the NQN and nothing is read).
    pub fn of(endpoint: &Endpoint, socket: Option<&Path>) -> Option<QosSource> {
        if let Some(embedded) = &endpoint.embedded {
            return Some(QosSource::Embedded(Arc::clone(&embedded.target)));
        }
        if let Some(socket) = socket {
            return Some(QosSource::Socket(socket.to_path_buf()));
        }
        let local = endpoint.address.ip().is_loopback();
        management_client::default_socket_path().filter(|path| local && path.exists()).map(QosSource::Socket)
    }

    /// How results name it.
    pub fn describe(&self) -> String {
        match self {
            QosSource::Embedded(_) => "embedded".to_string(),
            QosSource::Socket(path) => format!("management socket {}", path.display()),
        }
    }

    /// The limits and counters of namespace `nsid` of `nqn` now.
    pub fn read(&self, nqn: &str, nsid: u32) -> Result<QosReading, String> {
        match self {
            QosSource::Embedded(target) => {
                let namespace = target
                    .subsystem_by_nqn(nqn)
                    .and_then(|subsystem| subsystem.namespace(nvme_spec::NamespaceId(nsid)))
                    .ok_or_else(|| format!("the embedded target has no namespace {nsid} of {nqn}"))?;
                let (throttled_commands, throttled_seconds) = namespace.qos.namespace.throttled();
                let mut limits = pairs(&sluice_config::qos::describe(&namespace.qos.namespace.limits()), None);
                for (host, host_limits) in namespace.qos.host_limits() {
                    limits.extend(pairs(&sluice_config::qos::describe(&host_limits), Some(&host)));
                }
                Ok(QosReading { limits, throttled_commands, throttled_seconds })
            }
            QosSource::Socket(path) => {
                let client = management_client::Client::new(management_client::Endpoint::Unix(path.clone()));
                let answer = client.call("ns_list", json!({ "nqn": nqn })).map_err(|error| error.to_string())?;
                let namespace = answer
                    .get("namespaces")
                    .and_then(Value::as_array)
                    .and_then(|namespaces| {
                        namespaces
                            .iter()
                            .find(|namespace| namespace.get("nsid").and_then(Value::as_u64) == Some(u64::from(nsid)))
                    })
                    .ok_or_else(|| format!("{} serves no namespace {nsid} of {nqn}", path.display()))?;
                let mut limits = pairs(namespace.get("qos").unwrap_or(&Value::Null), None);
                for host in namespace.get("host_qos").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
                    let name = host.get("host").and_then(Value::as_str).unwrap_or("?");
                    limits.extend(pairs(host.get("limits").unwrap_or(&Value::Null), Some(name)));
                }
                Ok(QosReading {
                    limits,
                    throttled_commands: namespace.get("qos_throttled_commands").and_then(Value::as_u64).unwrap_or(0),
                    throttled_seconds: namespace.get("qos_throttled_seconds").and_then(Value::as_f64).unwrap_or(0.0),
                })
            }
        }
    }
}

/// `key=value` pairs of a limits object, prefixed with the host's NQN for its own.
fn pairs(limits: &Value, host: Option<&str>) -> Vec<String> {
    let Some(limits) = limits.as_object() else { return Vec::new() };
    limits
        .iter()
        .map(|(key, value)| match host {
            Some(host) => format!("{host}: {key}={value}"),
            None => format!("{key}={value}"),
        })
        .collect()
}

/// What the suite met: the limits at the end and what they delayed between the two
/// readings; and the notes (also printed) that say so.
pub fn observe(source: &QosSource, before: &QosReading, after: &QosReading) -> (QosObservation, Vec<String>) {
    let observation = QosObservation {
        source: source.describe(),
        limits: after.limits.clone(),
        throttled_commands: after.throttled_commands.saturating_sub(before.throttled_commands),
        throttled_seconds: (after.throttled_seconds - before.throttled_seconds).max(0.0),
    };
    let mut notes = Vec::new();
    let limits = if observation.limits.is_empty() { "none now".to_string() } else { observation.limits.join(", ") };
    if observation.throttled_commands > 0 {
        notes.push(format!(
            "THROTTLED: the target's QoS limits delayed {} command(s) of this suite by {:.3} s in all (limits: {limits}); \
             the results measure the limit, not the target",
            observation.throttled_commands, observation.throttled_seconds
        ));
    } else if !observation.limits.is_empty() {
        notes.push(format!("the namespace has QoS limits ({limits}); none delayed a command of this suite"));
    }
    (observation, notes)
}
