//! `sluice ns qos`: the arguments of the `ns_qos` method and how its answer and a
//! namespace's limits read in `sluice ns list`.

use clap::Args;
use management_client::api::{self, Quantity};
use serde_json::Value;

/// The limits `sluice ns qos` sets (each optional) and removes.
#[derive(Debug, Args)]
pub struct QosArgs {
    /// Subsystem NQN.
    pub nqn: String,
    /// Namespace ID.
    pub nsid: u32,
    /// Limit this host's I/O on the namespace (its [[subsystem.host]] entry) instead
    /// of all hosts' together.
    #[arg(long)]
    pub host: Option<String>,
    /// Read and write commands per second.
    #[arg(long, allow_hyphen_values = true)]
    pub rw_ios_per_second: Option<String>,
    /// Read and write data, MiB (2^20 bytes) per second.
    #[arg(long, allow_hyphen_values = true)]
    pub rw_mbytes_per_second: Option<String>,
    /// Read data, MiB per second.
    #[arg(long, allow_hyphen_values = true)]
    pub r_mbytes_per_second: Option<String>,
    /// Write data, MiB per second.
    #[arg(long, allow_hyphen_values = true)]
    pub w_mbytes_per_second: Option<String>,
    /// Bucket depth as time at each limit's rate [default: 100].
    #[arg(long, allow_hyphen_values = true)]
    pub burst_ms: Option<String>,
    /// Removes these limits (comma-separated keys, e.g. rw_ios_per_second), first.
    #[arg(long)]
    pub remove: Option<String>,
    /// Removes every limit (of the namespace, or of --host on it).
    #[arg(long, conflicts_with = "remove")]
    pub clear: bool,
}

impl QosArgs {
    /// The `ns_qos` parameters (numbers as given: the target checks them).
    /// The `ns_qos` request: the limits as written (the daemon checks them as the
    /// file's keys), `--clear` as `remove = "all"`.
    pub fn into_request(self) -> api::NamespaceQos {
        let text = |value: Option<String>| value.map(Quantity::Text);
        api::NamespaceQos {
            nqn: self.nqn,
            nsid: self.nsid,
            host: self.host,
            rw_ios_per_second: text(self.rw_ios_per_second),
            rw_mbytes_per_second: text(self.rw_mbytes_per_second),
            r_mbytes_per_second: text(self.r_mbytes_per_second),
            w_mbytes_per_second: text(self.w_mbytes_per_second),
            burst_ms: text(self.burst_ms),
            remove: if self.clear { Some("all".to_string()) } else { self.remove },
        }
    }
}

/// "rw_ios_per_second=5000 burst_ms=100", or "-" without limits.
pub fn summary(limits: Option<&Value>) -> String {
    let Some(limits) = limits.and_then(Value::as_object).filter(|limits| !limits.is_empty()) else {
        return "-".to_string();
    };
    limits.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>().join(" ")
}

/// The answer of `ns_qos`.
pub fn render_changed(result: &Value) -> String {
    let whose = match result.get("host").and_then(Value::as_str) {
        Some(host) => format!("host {host} on namespace"),
        None => "namespace".to_string(),
    };
    format!(
        "QoS of {whose} {} of {}: {}\n",
        result.get("nsid").and_then(Value::as_u64).unwrap_or(0),
        result.get("nqn").and_then(Value::as_str).unwrap_or(""),
        match summary(result.get("qos")).as_str() {
            "-" => "no limits".to_string(),
            limits => limits.to_string(),
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_read_as_key_value_pairs() {
        assert_eq!(
            summary(Some(&json!({"rw_ios_per_second": 5000, "burst_ms": 100}))),
            "rw_ios_per_second=5000 burst_ms=100"
        );
        assert_eq!(summary(Some(&json!({}))), "-");
        let text = render_changed(&json!({"nqn": "nqn.x", "nsid": 1, "host": null, "qos": {}}));
        assert_eq!(text, "QoS of namespace 1 of nqn.x: no limits\n");
    }
}
