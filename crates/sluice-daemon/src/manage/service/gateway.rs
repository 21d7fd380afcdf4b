//! `gateway_status`, `gateway_drain`, `gateway_undrain` and `gateway_move`: the
//! gateway group as this member sees it, taking a member out of service and back
//! (Ceph's `nvme-gw disable/enable`) and moving one ANA group, asked through any
//! member. The coordinator thread makes the change in the cluster; a drain then
//! waits, by default, until the drained member owns no ANA group, a move until the
//! group's new owner holds it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Management;
use crate::manage::protocol::{Params, RpcError, APPLY_FAILED};
use management_client::api::replies::{GatewayMove, GatewayMoved, GatewayPlacement};
use sluice_gateway::service::PlacementRequest;

/// How long the coordinator thread may take to answer (it answers between two rounds,
/// and a change is a few cluster round trips).
const COORDINATOR_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a drain or move to complete that a caller may ask for.
const MAX_DRAIN_WAIT_MS: u64 = 600_000;
/// How often the wait looks at the published ownership.
const DRAIN_POLL: Duration = Duration::from_millis(50);

impl Management {
    fn gateway_handle(&self) -> Result<&sluice_gateway::service::GatewayHandle, RpcError> {
        self.gateway.as_ref().ok_or_else(|| {
            RpcError::refused("gateway", "this target is not a gateway (its config has no [gateway] section)")
        })
    }

    pub(super) fn gateway_status(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("gateway_status")?;
        let gateway = self.gateway_handle()?;
        let status = gateway.status.lock().unwrap_or_else(|poison| poison.into_inner()).clone();
        let mut value = serde_json::to_value(status)
            .map_err(|error| RpcError::new(crate::manage::protocol::INTERNAL_ERROR, error.to_string()))?;
        value["config"] = match self.group_config_versions() {
            Some((version, pending)) => json!({ "source": "cluster", "version": version, "pending": pending }),
            None => json!({ "source": "file" }),
        };
        Ok(value)
    }

    pub(super) fn gateway_drain(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let member = params.required_string("gateway")?;
        let wait = params.optional_bool("wait")?.unwrap_or(true);
        let timeout_ms = params.optional_integer("timeout_ms")?;
        params.finish("gateway_drain")?;
        let gateway = self.gateway_handle()?;
        let timeout_ms = wait_limit_ms(gateway, timeout_ms)?;
        let change = gateway
            .request(PlacementRequest::Drain(member.clone()), COORDINATOR_ANSWER_TIMEOUT)
            .map_err(|error| RpcError::refused("gateway", error))?;
        let (still_owned, waited_ms) =
            poll_until(wait, timeout_ms, || owned_by(gateway, &member), |owned: &Vec<u32>| owned.is_empty());
        reply(GatewayPlacement {
            gateway: change.gateway,
            drained: change.drained,
            moves: change.moves.into_iter().map(|(ana_group, to)| GatewayMove { ana_group, to }).collect(),
            still_owned,
            waited_ms,
            note: change.note,
        })
    }

    pub(super) fn gateway_undrain(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let member = params.required_string("gateway")?;
        params.finish("gateway_undrain")?;
        let gateway = self.gateway_handle()?;
        let change = gateway
            .request(PlacementRequest::Undrain(member.clone()), COORDINATOR_ANSWER_TIMEOUT)
            .map_err(|error| RpcError::refused("gateway", error))?;
        reply(GatewayPlacement {
            gateway: change.gateway,
            drained: change.drained,
            moves: Vec::new(),
            still_owned: owned_by(gateway, &member),
            waited_ms: 0,
            note: change.note,
        })
    }

    pub(super) fn gateway_move(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let ana_group = params.required_u32("ana_group")?;
        let to = params.required_string("to")?;
        let wait = params.optional_bool("wait")?.unwrap_or(true);
        let timeout_ms = params.optional_integer("timeout_ms")?;
        params.finish("gateway_move")?;
        let gateway = self.gateway_handle()?;
        let timeout_ms = wait_limit_ms(gateway, timeout_ms)?;
        let from = owner_of(gateway, ana_group);
        let change = gateway
            .request(PlacementRequest::Move { ana_group, to: to.clone() }, COORDINATOR_ANSWER_TIMEOUT)
            .map_err(|error| RpcError::refused("gateway", error))?;
        let (owner, waited_ms) = poll_until(wait, timeout_ms, || owner_of(gateway, ana_group), |owner| *owner == to);
        serde_json::to_value(GatewayMoved { ana_group, from, to, owner, waited_ms, note: change.note })
            .map_err(|error| RpcError::new(APPLY_FAILED, error.to_string()))
    }
}

/// Looks at what `look` returns until `done` says so, or `timeout_ms` passed (once,
/// without `wait`); returns the last look and how long it waited (0 without `wait`).
fn poll_until<T>(wait: bool, timeout_ms: u64, look: impl Fn() -> T, done: impl Fn(&T) -> bool) -> (T, u64) {
    let started = Instant::now();
    let mut seen = look();
    while wait && !done(&seen) && started.elapsed() < Duration::from_millis(timeout_ms) {
        std::thread::sleep(DRAIN_POLL);
        seen = look();
    }
    (seen, if wait { started.elapsed().as_millis() as u64 } else { 0 })
}

/// The longest wait a caller asked for (`timeout_ms`), checked; by default a lease
/// for the hand-overs plus two rounds to see them.
fn wait_limit_ms(gateway: &sluice_gateway::service::GatewayHandle, asked: Option<i64>) -> Result<u64, RpcError> {
    let lease_ms = gateway.status.lock().unwrap_or_else(|poison| poison.into_inner()).lease_ms;
    match asked {
        None => Ok(lease_ms + lease_ms / 2),
        Some(ms) if (0..=MAX_DRAIN_WAIT_MS as i64).contains(&ms) => Ok(ms as u64),
        Some(ms) => Err(RpcError::invalid_params("timeout_ms", format!("{ms} is not 0..={MAX_DRAIN_WAIT_MS}"))),
    }
}

/// The owner of `ana_group` ("" when none), as this gateway's last round saw it.
fn owner_of(gateway: &sluice_gateway::service::GatewayHandle, ana_group: u32) -> String {
    let status = gateway.status.lock().unwrap_or_else(|poison| poison.into_inner());
    status
        .ana_groups
        .iter()
        .find(|group| group.ana_group == ana_group)
        .map(|group| group.owner.clone())
        .unwrap_or_default()
}

/// The ANA groups `member` owns, as this gateway's last round saw them.
fn owned_by(gateway: &sluice_gateway::service::GatewayHandle, member: &str) -> Vec<u32> {
    let status = gateway.status.lock().unwrap_or_else(|poison| poison.into_inner());
    status.ana_groups.iter().filter(|group| group.owner == member).map(|group| group.ana_group).collect()
}

fn reply(placement: GatewayPlacement) -> Result<Value, RpcError> {
    serde_json::to_value(placement).map_err(|error| RpcError::new(APPLY_FAILED, error.to_string()))
}
