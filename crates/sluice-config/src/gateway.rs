//! `[gateway]`: this `sluice serve` is one gateway of a gateway group that exports the
//! same subsystems, from the same RBD images, through several processes. The cluster
//! arbitrates: which gateway owns which ANA group is decided with locks that expire on
//! one RADOS object per group (see gateway/ and docs/config.md).

pub mod rebalance;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use nvme_spec::ana::AnaGroupId;
use nvme_spec::ControllerId;

use super::schema::check_name;
use super::{invalid, ConfigError};

/// Most gateways in one group: each gets 1/16 of the CNTLID space (4094 controllers).
pub const MAX_GATEWAYS: usize = 16;

/// The longest attribute name a Ceph OSD stores (`osd_max_attr_name_len`, 100 bytes
/// by default; measured: 101 bytes fail with ENAMETOOLONG). The group's object keeps
/// an attribute per shared image (`namespace.rbd:<pool>/<image>`) and two per member
/// (`lock.member.<name>`, `sluice.client.<name>`), so the names below are bounded by
/// it, and checked with the configuration rather than failing a gateway's start.
pub const MAX_CLUSTER_ATTRIBUTE_NAME_BYTES: usize = 100;

/// The longest member name: its client attribute `sluice.client.<name>` must fit
/// [`MAX_CLUSTER_ATTRIBUTE_NAME_BYTES`].
pub const MAX_MEMBER_NAME_BYTES: usize = MAX_CLUSTER_ATTRIBUTE_NAME_BYTES - "sluice.client.".len();

/// The most bytes of pool and image name together of an image a gateway group shares:
/// its identity attribute `namespace.rbd:<pool>/<image>` must fit
/// [`MAX_CLUSTER_ATTRIBUTE_NAME_BYTES`].
pub const MAX_SHARED_IMAGE_NAME_BYTES: usize = MAX_CLUSTER_ATTRIBUTE_NAME_BYTES - "namespace.rbd:/".len();

/// Refuses a member name too long for the group object's attributes.
fn check_member_name_length(name: &str, location: &str) -> Result<(), ConfigError> {
    if name.len() > MAX_MEMBER_NAME_BYTES {
        return Err(invalid(
            location,
            format!(
                "member name {name:?} is {} bytes; the group's object in the cluster keeps an attribute named after \
                 each member, and Ceph takes attribute names of at most {MAX_CLUSTER_ATTRIBUTE_NAME_BYTES} bytes \
                 (osd_max_attr_name_len), so a member name may be at most {MAX_MEMBER_NAME_BYTES} bytes",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses an image whose pool and image names are too long for its identity
/// attribute on the group's object.
pub fn check_shared_image_name_length(pool: &str, image: &str, location: &str) -> Result<(), ConfigError> {
    let bytes = pool.len() + image.len();
    if bytes > MAX_SHARED_IMAGE_NAME_BYTES {
        return Err(invalid(
            location,
            format!(
                "rbd image {pool}/{image} has {bytes} bytes of pool and image name; a gateway group records each \
                 image it shares under an attribute of the group's object, and Ceph takes attribute names of at \
                 most {MAX_CLUSTER_ATTRIBUTE_NAME_BYTES} bytes (osd_max_attr_name_len), so pool and image together \
                 may be at most {MAX_SHARED_IMAGE_NAME_BYTES} bytes: give the image a shorter name"
            ),
        ));
    }
    Ok(())
}
/// Default lease: a gateway that has not renewed its leases for this long is taken
/// over (and fenced). Shorter fails over faster but fences a gateway that stalls
/// (an overloaded cluster or machine) for that long.
pub const DEFAULT_LEASE_MS: u64 = 6_000;
/// Shortest lease accepted: renewals run every quarter lease and each one is a cluster
/// round trip.
pub const MIN_LEASE_MS: u64 = 2_000;

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// This gateway's name: one of the `[[gateway.member]]` names.
    pub name: String,
    /// The gateway group's name: names the RADOS object `sluice.gateway.<group>`.
    pub group: String,
    /// RADOS pool holding the group's object (default "rbd").
    #[serde(default)]
    pub pool: Option<String>,
    /// ceph.conf, cephx user and op timeout: the same cluster connection as the rbd
    /// backends (which must use the same values, so fencing covers their writes).
    #[serde(default)]
    pub ceph_conf: Option<PathBuf>,
    #[serde(default)]
    pub client: Option<String>,
    #[serde(default)]
    pub op_timeout_ms: Option<u64>,
    /// How long a lease lasts without renewal (default 6000).
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// Give an ANA group back to its preferred gateway when that one is up again
    /// (default true).
    #[serde(default)]
    pub failback: Option<bool>,
    /// Where the group's part of the configuration lives: "file" (default: each
    /// gateway's own file) or "cluster" (one copy in the cluster, changed through any
    /// member; the file's group part only seeds an empty group; see
    /// gateway/group_config.rs).
    #[serde(default)]
    pub config: Option<GroupConfigSource>,
    /// Every gateway of the group, in the same order in every gateway's config: the
    /// position gives each its controller id range.
    #[serde(default, rename = "member")]
    pub members: Vec<GatewayMember>,
    /// Preferred owners of ANA groups; a group not listed prefers member
    /// `(id - 1) % members`.
    #[serde(default, rename = "ana_group")]
    pub ana_groups: Vec<AnaGroupConfig>,
    /// Moving ANA groups between members to even out their load (default off).
    #[serde(default)]
    pub rebalance: Option<rebalance::RebalanceSection>,
}

/// `[gateway] config`.
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GroupConfigSource {
    #[default]
    File,
    Cluster,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayMember {
    pub name: String,
    /// "IP:port" hosts reach this gateway's I/O listener at (listed in discovery).
    pub address: String,
}

#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnaGroupConfig {
    pub id: u32,
    /// The member that owns the group whenever it is up.
    pub preferred: String,
}

/// The checked `[gateway]` section.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayPlan {
    pub name: String,
    pub group: String,
    pub pool: String,
    pub cluster: runtime::ClusterSpec,
    pub lease_ms: u64,
    pub failback: bool,
    /// (name, address) in configured order.
    pub members: Vec<(String, SocketAddr)>,
    /// This gateway's position in `members`.
    pub position: usize,
    /// Explicit preferred owners by group.
    pub preferred: Vec<(AnaGroupId, String)>,
    /// Where the group's configuration lives.
    pub config: GroupConfigSource,
    /// Whether and how ownership moves to even out load.
    pub rebalance: rebalance::RebalancePlan,
}

impl GatewayPlan {
    /// The member that prefers `group`.
    pub fn preferred_owner(&self, group: AnaGroupId) -> &str {
        if let Some((_, name)) = self.preferred.iter().find(|(id, _)| *id == group) {
            return name;
        }
        let index = (group.0.saturating_sub(1) as usize) % self.members.len();
        &self.members[index].0
    }

    /// CNTLIDs of this gateway: its sixteenth of 1..=FFEFh, by position.
    pub fn controller_id_range(&self) -> (u16, u16) {
        let span = ControllerId::MAX_VALID / MAX_GATEWAYS as u16;
        let low = 1 + self.position as u16 * span;
        (low, low + span - 1)
    }
}

/// Where a group's objects live: enough to reach the group's configuration before
/// the rest of `[gateway]` is known (a file with only its own part lists no members).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupLocation {
    pub group: String,
    pub pool: String,
    pub cluster: runtime::ClusterSpec,
}

impl GatewaySection {
    /// With `config = "cluster"` and no members: the file holds only this gateway's
    /// own part (the group's is in the cluster).
    pub fn holds_only_own_part(&self) -> bool {
        self.config == Some(GroupConfigSource::Cluster) && self.members.is_empty()
    }

    /// The group's name, pool and cluster, checked.
    pub fn location(&self) -> Result<GroupLocation, ConfigError> {
        check_name(&self.group, "[gateway].group")?;
        Ok(GroupLocation {
            group: self.group.clone(),
            pool: self.pool.clone().unwrap_or_else(|| "rbd".to_string()),
            cluster: super::schema::cluster_spec(&self.ceph_conf, self.client.as_deref(), self.op_timeout_ms),
        })
    }

    pub fn plan(&self) -> Result<GatewayPlan, ConfigError> {
        let location = "[gateway]";
        check_name(&self.name, location)?;
        check_member_name_length(&self.name, location)?;
        check_name(&self.group, &format!("{location}.group"))?;
        if self.members.is_empty() || self.members.len() > MAX_GATEWAYS {
            return Err(invalid(
                location,
                format!("list 1..={MAX_GATEWAYS} [[gateway.member]] entries (name, address), this gateway included"),
            ));
        }
        let mut members = Vec::with_capacity(self.members.len());
        for (index, member) in self.members.iter().enumerate() {
            let where_ = format!("[[gateway.member]] {index} ({})", member.name);
            check_name(&member.name, &where_)?;
            check_member_name_length(&member.name, &where_)?;
            if members.iter().any(|(name, _): &(String, SocketAddr)| *name == member.name) {
                return Err(invalid(where_, "the name is listed twice"));
            }
            let address: SocketAddr = member.address.parse().map_err(|_| {
                invalid(&where_, format!("address {:?} is not IP:port, e.g. \"192.0.2.10:4420\"", member.address))
            })?;
            members.push((member.name.clone(), address));
        }
        let position = members.iter().position(|(name, _)| *name == self.name).ok_or_else(|| {
            invalid(location, format!("name {:?} is not one of the [[gateway.member]] names; add it there", self.name))
        })?;
        let mut preferred = Vec::new();
        for group in &self.ana_groups {
            let where_ = format!("[[gateway.ana_group]] {}", group.id);
            let max = nvme_target::limits::MAX_ANA_GROUP_ID;
            if group.id == 0 || group.id > max {
                return Err(invalid(where_, format!("id must be 1..={max}")));
            }
            if !members.iter().any(|(name, _)| *name == group.preferred) {
                return Err(invalid(where_, format!("preferred = {:?} is not a [[gateway.member]]", group.preferred)));
            }
            if preferred.iter().any(|(id, _)| *id == AnaGroupId(group.id)) {
                return Err(invalid(where_, "the group is listed twice"));
            }
            preferred.push((AnaGroupId(group.id), group.preferred.clone()));
        }
        let lease_ms = self.lease_ms.unwrap_or(DEFAULT_LEASE_MS);
        if lease_ms < MIN_LEASE_MS {
            return Err(invalid(
                format!("{location}.lease_ms"),
                format!("{lease_ms} is below the minimum {MIN_LEASE_MS}"),
            ));
        }
        Ok(GatewayPlan {
            name: self.name.clone(),
            group: self.group.clone(),
            pool: self.pool.clone().unwrap_or_else(|| "rbd".to_string()),
            cluster: super::schema::cluster_spec(&self.ceph_conf, self.client.as_deref(), self.op_timeout_ms),
            lease_ms,
            failback: self.failback.unwrap_or(true),
            members,
            position,
            preferred,
            config: self.config.unwrap_or_default(),
            rebalance: self.rebalance.clone().unwrap_or_default().plan()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> GatewaySection {
        toml::from_str(text).unwrap()
    }

    const TWO: &str = r#"
        name = "b"
        group = "ha"
        [[member]]
        name = "a"
        address = "127.0.0.1:4420"
        [[member]]
        name = "b"
        address = "127.0.0.1:4421"
    "#;

    #[test]
    fn members_get_disjoint_controller_id_ranges_and_default_owners() {
        let b = section(TWO).plan().unwrap();
        let a = GatewayPlan { position: 0, name: "a".into(), ..b.clone() };
        let (a_low, a_high) = a.controller_id_range();
        let (b_low, b_high) = b.controller_id_range();
        assert_eq!(a_low, 1);
        assert!(a_high < b_low && b_low <= b_high && b_high <= ControllerId::MAX_VALID);
        assert_eq!(b.preferred_owner(AnaGroupId(1)), "a");
        assert_eq!(b.preferred_owner(AnaGroupId(2)), "b");
        assert_eq!(b.preferred_owner(AnaGroupId(3)), "a");
        assert_eq!(b.lease_ms, DEFAULT_LEASE_MS);
        assert!(b.failback);
        assert_eq!(b.pool, "rbd");
    }

    #[test]
    fn mistakes_are_named() {
        let error =
            section(&TWO.replace("name = \"b\"\n        group", "name = \"c\"\n        group")).plan().unwrap_err();
        assert!(error.to_string().contains("not one of the [[gateway.member]] names"), "{error}");
        let error = section(&TWO.replace("127.0.0.1:4421", "localhost")).plan().unwrap_err();
        assert!(error.to_string().contains("is not IP:port"), "{error}");
        let error = section(&format!("lease_ms = 100\n{TWO}")).plan();
        assert!(error.is_err());
        let error = section(&format!("{TWO}\n[[ana_group]]\nid = 1\npreferred = \"z\"")).plan().unwrap_err();
        assert!(error.to_string().contains("is not a [[gateway.member]]"), "{error}");
    }

    #[test]
    fn names_too_long_for_the_clusters_attributes_are_refused_with_the_limit() {
        let long = "m".repeat(MAX_MEMBER_NAME_BYTES + 1);
        let text = TWO.replace("name = \"b\"", &format!("name = \"{long}\""));
        let error = section(&text).plan().unwrap_err().to_string();
        assert!(error.contains("at most 86 bytes") && error.contains("osd_max_attr_name_len"), "{error}");
        assert!(section(&TWO.replace("name = \"b\"", &format!("name = \"{}\"", &long[1..]))).plan().is_ok());
        let image = "i".repeat(MAX_SHARED_IMAGE_NAME_BYTES - "rbd".len());
        assert!(check_shared_image_name_length("rbd", &image, "here").is_ok(), "85 bytes fit");
        let error = check_shared_image_name_length("rbd", &format!("{image}x"), "here").unwrap_err().to_string();
        assert!(error.contains("86 bytes of pool and image name") && error.contains("at most 85"), "{error}");
    }
}
