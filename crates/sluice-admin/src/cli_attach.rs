//! `sluice ns attach` and `sluice ns detach`: the arguments of the `ns_attach` and
//! `ns_detach` methods, and how their answer and a namespace's hosts read.

use clap::Args;
use management_client::api;
use serde_json::Value;

/// Which namespace and host. The subsystem and NSID are positional like the other
/// `sluice ns` commands, or given as `--nqn` and `--nsid`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Subsystem NQN (or --nqn).
    #[arg(required_unless_present = "nqn_option", conflicts_with = "nqn_option")]
    pub nqn: Option<String>,
    /// Namespace ID (or --nsid).
    #[arg(required_unless_present = "nsid_option", conflicts_with = "nsid_option")]
    pub nsid: Option<u32>,
    /// Subsystem NQN.
    #[arg(long = "nqn", value_name = "NQN")]
    pub nqn_option: Option<String>,
    /// Namespace ID.
    #[arg(long = "nsid", value_name = "NSID")]
    pub nsid_option: Option<u32>,
    /// Host NQN whose controllers gain (attach) or lose (detach) the namespace.
    #[arg(long)]
    pub host: String,
}

impl AttachArgs {
    /// The `ns_attach` / `ns_detach` parameters.
    /// The `ns_attach` request (clap requires the NQN and NSID, as a position or an
    /// option).
    pub fn into_attach(self) -> api::NamespaceAttach {
        let (nqn, nsid, host) = self.parts();
        api::NamespaceAttach { nqn, nsid, host }
    }

    /// The `ns_detach` request.
    pub fn into_detach(self) -> api::NamespaceDetach {
        let (nqn, nsid, host) = self.parts();
        api::NamespaceDetach { nqn, nsid, host }
    }

    fn parts(self) -> (String, u32, String) {
        (
            self.nqn.or(self.nqn_option).unwrap_or_default(),
            self.nsid.or(self.nsid_option).unwrap_or_default(),
            self.host,
        )
    }
}

/// One line for an `ns_attach` / `ns_detach` answer.
pub fn render_changed(result: &Value) -> String {
    let text = |key: &str| result.get(key).and_then(Value::as_str).unwrap_or("?").to_string();
    let nsid = result.get("nsid").and_then(Value::as_u64).unwrap_or(0);
    let what = match text("change").as_str() {
        "attached" => "attached",
        "detached" => "detached",
        _ => "unchanged:",
    };
    format!(
        "{what} namespace {nsid} of {} {} host {}; now seen by {}\n",
        text("nqn"),
        if what == "detached" { "from" } else { "to" },
        text("host"),
        hosts_summary(result)
    )
}

/// "every allowed host", "no host", or the list.
pub fn hosts_summary(namespace: &Value) -> String {
    match namespace.get("hosts").and_then(Value::as_array) {
        None => "every allowed host".to_string(),
        Some(hosts) if hosts.is_empty() => "no host".to_string(),
        Some(hosts) => hosts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "),
    }
}
