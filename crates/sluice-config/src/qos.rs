//! QoS limits in the config: `[subsystem.namespace.qos]` (the namespace, all hosts
//! together) and `[[subsystem.host.qos]]` (one host on one namespace, or on each
//! namespace of the subsystem when `nsid` is left out). Named as Ceph's NVMe-oF
//! gateway names them (`namespace set_qos`), with megabytes of 2^20 bytes as SPDK's
//! bdev QoS counts them, so operators need not translate. Applied live: at start,
//! at every reload and after every management change (`apply`), never needing a
//! restart or a reconnect.
//!
//! Values are read as TOML values and checked here, so that a zero, a negative, an
//! absurd or a non-numeric limit is refused with the key it was given for.

use serde::Deserialize;

use nvme_target::qos::{QosLimits, MAX_QOS_BURST_MS, MAX_QOS_RATE};
use nvme_target::Target;

use super::{invalid, Config, ConfigError, NamespaceConfig};

/// Declares a QoS table: the five limit keys (every one optional), any fields of the
/// table's own before them, and `limits`, which checks them. One list for both tables,
/// so the namespace's and the host's keys cannot drift apart (serde's `flatten` would
/// share them too, but it does not work with `deny_unknown_fields`).
macro_rules! qos_table {
    ($(#[$meta:meta])* $name:ident { $($(#[$field_meta:meta])* $field:ident: $field_type:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Deserialize, Clone, Default, PartialEq)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$field_meta])* #[serde(default)] pub $field: $field_type,)*
            #[serde(default)]
            pub rw_ios_per_second: Option<toml::Value>,
            #[serde(default)]
            pub rw_mbytes_per_second: Option<toml::Value>,
            #[serde(default)]
            pub r_mbytes_per_second: Option<toml::Value>,
            #[serde(default)]
            pub w_mbytes_per_second: Option<toml::Value>,
            #[serde(default)]
            pub burst_ms: Option<toml::Value>,
        }

        impl $name {
            /// The limits, checked; `location` names the table.
            pub fn limits(&self, location: &str) -> Result<QosLimits, ConfigError> {
                Ok(QosLimits {
                    rw_ios_per_second: rate(&self.rw_ios_per_second, RATE_KEYS[0], location)?,
                    rw_mbytes_per_second: rate(&self.rw_mbytes_per_second, RATE_KEYS[1], location)?,
                    r_mbytes_per_second: rate(&self.r_mbytes_per_second, RATE_KEYS[2], location)?,
                    w_mbytes_per_second: rate(&self.w_mbytes_per_second, RATE_KEYS[3], location)?,
                    burst_ms: burst(&self.burst_ms, location)?,
                })
            }
        }
    };
}

qos_table! {
    /// `[subsystem.namespace.qos]`: limits on a namespace.
    QosConfig {}
}

qos_table! {
    /// `[[subsystem.host.qos]]`: a host's limits on namespace `nsid`, or on each
    /// namespace of the subsystem (each with its own bucket) when `nsid` is absent.
    HostQosConfig {
        nsid: Option<u32>,
    }
}

/// The rate keys, in the order they are documented and shown.
pub const RATE_KEYS: [&str; 4] =
    ["rw_ios_per_second", "rw_mbytes_per_second", "r_mbytes_per_second", "w_mbytes_per_second"];

/// A limit as given: a whole number in 1..=2^40.
fn rate(value: &Option<toml::Value>, key: &str, location: &str) -> Result<Option<u64>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    let refuse = |what: String| {
        invalid(
            format!("{location}.{key}"),
            format!(
                "{what}: a limit is a whole number from 1 to {MAX_QOS_RATE} (2^40); for no limit leave `{key}` out"
            ),
        )
    };
    match value {
        toml::Value::Integer(number) if *number <= 0 => Err(refuse(format!("{number} is not above zero"))),
        toml::Value::Integer(number) if *number as u64 > MAX_QOS_RATE => Err(refuse(format!("{number} is above 2^40"))),
        toml::Value::Integer(number) => Ok(Some(*number as u64)),
        other => Err(refuse(format!("{other} is not a whole number"))),
    }
}

/// `burst_ms` as given: a whole number of milliseconds in 0..=60000.
fn burst(value: &Option<toml::Value>, location: &str) -> Result<Option<u64>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    let refuse = |what: String| {
        invalid(
            format!("{location}.burst_ms"),
            format!(
                "{what}: burst_ms is a whole number of milliseconds from 0 (no burst) to {MAX_QOS_BURST_MS}; \
                 leave it out for the default ({} ms)",
                nvme_target::qos::DEFAULT_QOS_BURST_MS
            ),
        )
    };
    match value {
        toml::Value::Integer(number) if *number < 0 => Err(refuse(format!("{number} is negative"))),
        toml::Value::Integer(number) if *number as u64 > MAX_QOS_BURST_MS => {
            Err(refuse(format!("{number} is above {MAX_QOS_BURST_MS}")))
        }
        toml::Value::Integer(number) => Ok(Some(*number as u64)),
        other => Err(refuse(format!("{other} is not a whole number"))),
    }
}

/// The limits of one subsystem: per namespace, and per host (on one NSID or on all).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SubsystemQos {
    pub nqn: String,
    /// (NSID, limits) of namespaces with a `qos` table.
    pub namespaces: Vec<(u32, QosLimits)>,
    /// (host NQN, NSID or every namespace, limits).
    pub hosts: Vec<(String, Option<u32>, QosLimits)>,
}

impl SubsystemQos {
    /// The limits of `host` on namespace `nsid`: its entry for that NSID, else its
    /// entry for every namespace.
    fn host_on(&self, host: &str, nsid: u32) -> Option<QosLimits> {
        let mine = |wanted: Option<u32>| {
            self.hosts
                .iter()
                .find(|(nqn, entry_nsid, _)| nqn == host && *entry_nsid == wanted)
                .map(|(_, _, limits)| *limits)
        };
        mine(Some(nsid)).or_else(|| mine(None))
    }
}

/// The namespaces with their NSIDs (explicit, else the previous one plus one), as
/// the config module numbers them.
pub fn numbered(namespaces: &[NamespaceConfig]) -> Vec<(u32, &NamespaceConfig)> {
    let mut next = 1u32;
    namespaces
        .iter()
        .map(|namespace| {
            let nsid = namespace.nsid.unwrap_or(next);
            next = nsid.saturating_add(1);
            (nsid, namespace)
        })
        .collect()
}

/// Every subsystem's limits, checked (what `sluice config check` refuses).
pub fn plan(config: &Config) -> Result<Vec<SubsystemQos>, ConfigError> {
    let mut plans = Vec::with_capacity(config.subsystems.len());
    for (subsystem_index, subsystem) in config.subsystems.iter().enumerate() {
        let location = format!("subsystem[{subsystem_index}] ({})", subsystem.nqn);
        let mut plan = SubsystemQos { nqn: subsystem.nqn.clone(), ..SubsystemQos::default() };
        for (namespace_index, (nsid, namespace)) in numbered(&subsystem.namespaces).into_iter().enumerate() {
            if let Some(qos) = &namespace.qos {
                let limits = qos.limits(&format!("{location} namespace[{namespace_index}].qos"))?;
                plan.namespaces.push((nsid, limits));
            }
        }
        for (host_index, host) in subsystem.hosts.iter().enumerate() {
            for (entry_index, entry) in host.qos.iter().enumerate() {
                let entry_location = format!("{location} host[{host_index}] ({}) qos[{entry_index}]", host.nqn);
                if entry.nsid == Some(0) || entry.nsid.is_some_and(|nsid| nsid > nvme_target::limits::MAX_NAMESPACE_ID)
                {
                    return Err(invalid(
                        format!("{entry_location}.nsid"),
                        format!(
                            "nsid = 0 or above {} names no namespace; give the namespace's NSID, or leave `nsid` \
                             out to limit the host on each namespace",
                            nvme_target::limits::MAX_NAMESPACE_ID
                        ),
                    ));
                }
                let limits = entry.limits(&entry_location)?;
                if plan.hosts.iter().any(|(nqn, nsid, _)| *nqn == host.nqn && *nsid == entry.nsid) {
                    let which = entry.nsid.map_or("every namespace".to_string(), |nsid| format!("nsid {nsid}"));
                    return Err(invalid(
                        entry_location,
                        format!("a second qos entry of this host for {which}; merge them into one"),
                    ));
                }
                plan.hosts.push((host.nqn.clone(), entry.nsid, limits));
            }
        }
        plans.push(plan);
    }
    Ok(plans)
}

/// Sets every running namespace's limits to what `config` says (none where it says
/// nothing). Idempotent: unchanged limits keep their buckets and waiting commands.
pub fn apply(target: &Target, config: &Config) -> Result<(), ConfigError> {
    let plans = plan(config)?;
    for subsystem in target.subsystems() {
        let plan = plans.iter().find(|plan| plan.nqn == subsystem.nqn).cloned().unwrap_or_default();
        // For namespaces that come later (Namespace Management): each host's limits
        // on every namespace.
        let defaults: Vec<(String, QosLimits)> = plan
            .hosts
            .iter()
            .filter(|(_, nsid, _)| nsid.is_none())
            .map(|(host, _, limits)| (host.clone(), *limits))
            .collect();
        subsystem.qos_host_defaults.set(&defaults);
        let table = subsystem.table();
        for entry in table.entries() {
            let namespace = &entry.namespace;
            let nsid = namespace.id.0;
            let own = plan.namespaces.iter().find(|(id, _)| *id == nsid).map(|(_, limits)| *limits);
            namespace.qos.namespace.set(own.unwrap_or_default());
            let mut hosts: Vec<(String, QosLimits)> = Vec::new();
            for (host, _, _) in &plan.hosts {
                if hosts.iter().any(|(known, _)| known == host) {
                    continue;
                }
                if let Some(limits) = plan.host_on(host, nsid) {
                    hosts.push((host.clone(), limits));
                }
            }
            namespace.qos.set_hosts(&hosts);
        }
    }
    Ok(())
}

/// "rw_ios_per_second=5000 burst_ms=100", or "no limits": one line for reports.
pub fn summary(limits: &QosLimits) -> String {
    let Some(object) = describe(limits).as_object().cloned().filter(|object| !object.is_empty()) else {
        return "no limits".to_string();
    };
    object.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>().join(" ")
}

/// Limits as JSON for views: the rates set, and the burst in force when any is.
pub fn describe(limits: &QosLimits) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    let values = [
        (RATE_KEYS[0], limits.rw_ios_per_second),
        (RATE_KEYS[1], limits.rw_mbytes_per_second),
        (RATE_KEYS[2], limits.r_mbytes_per_second),
        (RATE_KEYS[3], limits.w_mbytes_per_second),
    ];
    for (key, value) in values {
        if let Some(value) = value {
            object.insert(key.to_string(), value.into());
        }
    }
    if !limits.is_unlimited() {
        let burst = limits.burst_ms.unwrap_or(nvme_target::qos::DEFAULT_QOS_BURST_MS);
        object.insert("burst_ms".to_string(), burst.into());
    }
    serde_json::Value::Object(object)
}

/// Unused NSIDs are not an error (a namespace may come later, through the API or
/// Namespace Management); this names what a host entry's `nsid` refers to, for
/// `sluice config check`'s report.
pub fn unknown_namespace_warnings(config: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    for subsystem in &config.subsystems {
        let known: Vec<u32> = numbered(&subsystem.namespaces).into_iter().map(|(nsid, _)| nsid).collect();
        for host in &subsystem.hosts {
            for nsid in host.qos.iter().filter_map(|entry| entry.nsid) {
                if !known.contains(&nsid) && subsystem.pool.is_none() {
                    warnings.push(format!(
                        "subsystem {} host {}: qos names nsid {nsid}, which the subsystem does not have (yet)",
                        subsystem.nqn, host.nqn
                    ));
                }
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[[listener]]
address = "127.0.0.1:4420"

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:a"

[[subsystem.namespace]]
backend = "ram"
size = "1MiB"
"#;

    fn with(extra: &str) -> Result<Vec<SubsystemQos>, String> {
        let config = Config::parse(&format!("{BASE}{extra}"))?;
        config.check().map_err(|error| error.to_string())?;
        plan(&config).map_err(|error| error.to_string())
    }

    #[test]
    fn namespace_and_host_limits_are_read() {
        let plans = with(
            "[subsystem.namespace.qos]\nrw_ios_per_second = 5000\nw_mbytes_per_second = 50\nburst_ms = 20\n\
             [[subsystem.host]]\nnqn = \"nqn.2014-08.org.nvmexpress:uuid:1\"\n\
             [[subsystem.host.qos]]\nrw_ios_per_second = 100\n\
             [[subsystem.host.qos]]\nnsid = 1\nr_mbytes_per_second = 7\n",
        )
        .unwrap();
        let plan = &plans[0];
        let limits = QosLimits {
            rw_ios_per_second: Some(5000),
            w_mbytes_per_second: Some(50),
            burst_ms: Some(20),
            ..QosLimits::default()
        };
        assert_eq!(plan.namespaces, [(1, limits)]);
        let host = "nqn.2014-08.org.nvmexpress:uuid:1";
        assert_eq!(plan.host_on(host, 1), Some(QosLimits { r_mbytes_per_second: Some(7), ..QosLimits::default() }));
        assert_eq!(plan.host_on(host, 2), Some(QosLimits { rw_ios_per_second: Some(100), ..QosLimits::default() }));
        assert_eq!(plan.host_on("nqn.other", 1), None);
    }

    #[test]
    fn bad_limits_are_refused_naming_the_key() {
        let cases = [
            ("rw_ios_per_second = 0", "namespace[0].qos.rw_ios_per_second", "0 is not above zero"),
            ("rw_mbytes_per_second = -5", "namespace[0].qos.rw_mbytes_per_second", "-5 is not above zero"),
            ("r_mbytes_per_second = 1099511627777", "namespace[0].qos.r_mbytes_per_second", "above 2^40"),
            (
                "w_mbytes_per_second = \"fast\"",
                "namespace[0].qos.w_mbytes_per_second",
                "\"fast\" is not a whole number",
            ),
            ("rw_ios_per_second = 1.5", "namespace[0].qos.rw_ios_per_second", "1.5 is not a whole number"),
            ("burst_ms = -1", "namespace[0].qos.burst_ms", "-1 is negative"),
            ("burst_ms = 60001", "namespace[0].qos.burst_ms", "above 60000"),
        ];
        for (line, key, why) in cases {
            let error = with(&format!("[subsystem.namespace.qos]\n{line}\n")).unwrap_err();
            assert!(error.contains(key) && error.contains(why), "{line}: {error}");
            assert!(error.contains("leave"), "{line}: says what to do: {error}");
            // A host's entry shares the keys and their checks.
            let host_key = key.replace("namespace[0].qos", "host[0] (nqn.h) qos[0]");
            let error =
                with(&format!("[[subsystem.host]]\nnqn = \"nqn.h\"\n[[subsystem.host.qos]]\n{line}\n")).unwrap_err();
            assert!(error.contains(&host_key) && error.contains(why), "host {line}: {error}");
        }
        let unknown = with("[subsystem.namespace.qos]\nrw_iops = 5\n").unwrap_err();
        assert!(unknown.contains("rw_iops"), "{unknown}");
        let unknown = with("[[subsystem.host]]\nnqn = \"nqn.h\"\n[[subsystem.host.qos]]\nrw_iops = 5\n").unwrap_err();
        assert!(unknown.contains("rw_iops"), "{unknown}");
        let nsid_on_namespace = with("[subsystem.namespace.qos]\nnsid = 1\n").unwrap_err();
        assert!(nsid_on_namespace.contains("nsid"), "only a host's entry takes nsid: {nsid_on_namespace}");
        let twice = with(
            "[[subsystem.host]]\nnqn = \"nqn.h\"\n[[subsystem.host.qos]]\nnsid = 1\nrw_ios_per_second = 1\n\
             [[subsystem.host.qos]]\nnsid = 1\nrw_ios_per_second = 2\n",
        )
        .unwrap_err();
        assert!(twice.contains("host[0] (nqn.h) qos[1]") && twice.contains("merge"), "{twice}");
        let no_namespace =
            with("[[subsystem.host]]\nnqn = \"nqn.h\"\n[[subsystem.host.qos]]\nnsid = 0\nrw_ios_per_second = 1\n")
                .unwrap_err();
        assert!(no_namespace.contains("qos[0].nsid"), "{no_namespace}");
    }

    #[test]
    fn limits_reach_the_running_namespaces_and_leave_when_removed() {
        let config = Config::parse(&format!(
            "{BASE}[subsystem.namespace.qos]\nrw_ios_per_second = 10\n\
             [[subsystem.host]]\nnqn = \"nqn.h\"\n[[subsystem.host.qos]]\nw_mbytes_per_second = 3\n"
        ))
        .unwrap();
        let target = Target::new(config.target_spec().unwrap()).unwrap();
        apply(&target, &config).unwrap();
        let namespace = target.subsystems()[0].namespace(nvme_spec::NamespaceId(1)).unwrap();
        assert_eq!(namespace.qos.namespace.limits().rw_ios_per_second, Some(10));
        assert!(namespace.qos.namespace.is_active());
        assert_eq!(
            namespace.qos.host_limits(),
            [("nqn.h".to_string(), QosLimits { w_mbytes_per_second: Some(3), ..QosLimits::default() })]
        );
        let generation = namespace.qos.namespace.generation();
        apply(&target, &config).unwrap();
        assert_eq!(namespace.qos.namespace.generation(), generation, "unchanged limits keep their buckets");
        apply(&target, &Config::parse(BASE).unwrap()).unwrap();
        assert!(!namespace.qos.namespace.is_active());
        assert!(namespace.qos.host_limits().is_empty());
    }
}
