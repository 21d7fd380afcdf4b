//! The listener methods, applied to the running target at once (SPDK's
//! `nvmf_subsystem_add_listener` / `nvmf_subsystem_remove_listener`).
//!
//! `listener_add` binds the address on every runtime thread *before* the file is
//! written, so an address in use (by another program or overlapping one of this
//! target's listeners) is refused with the file and the target untouched. Then the
//! file is written, the discovery log lists the listener and the runtime accepts
//! on it.
//!
//! `listener_remove` writes the file first, then the runtime stops accepting on
//! the address and closes the connections accepted through it, and only those
//! (hosts connected through other listeners keep running); the discovery log drops
//! it. If the runtime refuses, the previous file is put back. Removing the only
//! listener is refused: the target would be unreachable (and the file would no
//! longer start).
//!
//! Without a runtime attached (`with_live_listeners`; unit tests) the listeners
//! are a fixed list and changes are refused after their checks.

use std::net::SocketAddr;

use nvme_target::SecureChannel;
use serde_json::{json, Value};
use target_server::{LiveListeners, RuntimeError};
use toml_edit::DocumentMut;

use super::{ActiveListener, Management};
use crate::manage::assemble::edit_error;
use crate::manage::document;
use crate::manage::protocol::{Params, RpcError, APPLY_FAILED, CONFIG_INVALID};

impl Management {
    /// Makes listener changes apply to the running target through `live` (the
    /// runtime of `sluice serve`); the listeners it reports replace the fixed list
    /// given to `new`.
    pub fn with_live_listeners(mut self, live: LiveListeners) -> Management {
        self.live_listeners = Some(live);
        self
    }

    /// The listeners accepting connections now.
    pub(super) fn accepting_listeners(&self) -> Vec<ActiveListener> {
        match &self.live_listeners {
            Some(live) => live
                .list()
                .into_iter()
                .map(|listener| ActiveListener {
                    address: listener.address,
                    discovery_only: listener.discovery_only,
                    secure_channel: listener.secure_channel,
                })
                .collect(),
            None => self.active_listeners.clone(),
        }
    }

    /// The runtime to apply a listener change to.
    fn live(&self) -> Result<LiveListeners, RpcError> {
        self.live_listeners.clone().ok_or_else(|| {
            RpcError::new(APPLY_FAILED, "listeners cannot change: no runtime is attached to this management API")
        })
    }

    pub(super) fn listener_add(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let address = parse_address(&params.required_string("address")?)?;
        let discovery_only = params.optional_bool("discovery_only")?.unwrap_or(false);
        let secure_channel = match params.optional_string("tls")? {
            None => SecureChannel::None,
            Some(name) => SecureChannel::from_name(&name).ok_or_else(|| {
                RpcError::invalid_params("tls", format!("unknown TLS setting {name:?}: use none, optional or required"))
            })?,
        };
        params.finish("listener_add")?;
        if address.port() == 0 {
            return Err(RpcError::invalid_params(
                "address",
                "port 0 would listen on a different port at every start; give the port hosts should connect to",
            ));
        }
        let accepting = self.accepting_listeners();
        if accepting.iter().any(|listener| listener.address == address) {
            return Err(RpcError::refused("address", format!("the target already listens on {address}")));
        }
        let mut draft = self.draft()?;
        document::add_listener(&mut draft.document, address, discovery_only, secure_channel).map_err(edit_error)?;
        // The whole file is checked as a start would check it: a TLS listener with no
        // host key to accept is refused there, naming the field.
        let text = self.check(&draft)?;
        let live = self.live()?;
        // Bound before the file changes: a refusal here leaves both untouched.
        let pending = live
            .bind(address, discovery_only, secure_channel)
            .map_err(|error| bind_refusal(address, &accepting, error))?;
        // A failed write drops `pending`, which closes its sockets.
        self.write(&text)?;
        match live.activate(pending) {
            Ok(listener) => {
                tracing::info!(%address, discovery_only, tls = secure_channel.name(), id = %listener.id,
                    "management: listener added");
                Ok(json!({
                    "address": listener.address.to_string(),
                    "discovery_only": discovery_only,
                    "tls": secure_channel.name(),
                    "active": true,
                }))
            }
            Err(error) => Err(self.restore(draft.previous, error.to_string())),
        }
    }

    pub(super) fn listener_remove(&mut self, mut params: Params) -> Result<Value, RpcError> {
        let address = parse_address(&params.required_string("address")?)?;
        params.finish("listener_remove")?;
        let accepting = self.accepting_listeners();
        let removing = accepting.iter().find(|listener| listener.address == address).copied();
        let others: Vec<&ActiveListener> = accepting.iter().filter(|listener| listener.address != address).collect();
        if removing.is_some() && others.is_empty() {
            return Err(RpcError::refused(
                "address",
                format!(
                    "{address} is the only listener: without it no host could reach the target (and the config file \
                     needs at least one); add another listener first"
                ),
            ));
        }
        let io_listeners_left = others.iter().filter(|listener| !listener.discovery_only).count();
        let mut draft = self.draft()?;
        document::remove_listener(&mut draft.document, address).map_err(edit_error)?;
        let text = self.check(&draft)?;
        let Some(removing) = removing else {
            // In the file but not accepting (not bound at start, say): only the
            // file changes.
            self.write(&text)?;
            tracing::info!(%address, "management: listener removed from the config file (it was not active)");
            return Ok(json!({
                "address": address.to_string(),
                "removed": true,
                "connections_closed": 0,
                "io_listeners_left": io_listeners_left,
            }));
        };
        let live = self.live()?;
        let Some(listener) = live.find(removing.address) else {
            return Err(RpcError::new(APPLY_FAILED, format!("{address} stopped listening meanwhile; nothing changed")));
        };
        self.write(&text)?;
        match live.remove(listener.id) {
            Ok(connections_closed) => {
                tracing::info!(%address, connections_closed, "management: listener removed");
                if io_listeners_left == 0 {
                    tracing::warn!("no listener serves I/O any more: hosts can discover subsystems but not connect");
                }
                Ok(json!({
                    "address": address.to_string(),
                    "removed": true,
                    "connections_closed": connections_closed,
                    "io_listeners_left": io_listeners_left,
                }))
            }
            // Committed: the threads close it when they catch up, so the file
            // (which no longer lists it) is right and stays.
            Err(error @ RuntimeError::ListenerChangeTimedOut { .. }) => Err(RpcError::new(
                APPLY_FAILED,
                format!("{address} is being removed, but {error}; the config file has the change"),
            )),
            Err(error) => Err(self.restore(draft.previous, error.to_string())),
        }
    }

    pub(super) fn listener_list(&mut self, params: Params) -> Result<Value, RpcError> {
        params.finish("listener_list")?;
        let accepting = self.accepting_listeners();
        let mut advertised = Vec::new();
        let configured = match &self.config_file {
            Some(file) => {
                let document: DocumentMut = file.text.parse().map_err(|error| {
                    RpcError::new(CONFIG_INVALID, format!("the config file no longer parses: {error}"))
                })?;
                advertised = document::advertised_listeners(&document);
                document::listeners(&document).map_err(edit_error)?
            }
            None => accepting
                .iter()
                .map(|listener| {
                    (listener.address.to_string(), listener.discovery_only, listener.secure_channel.name().to_string())
                })
                .collect(),
        };
        let mut listeners: Vec<Value> = Vec::new();
        let mut seen = Vec::new();
        for (text, discovery_only, tls) in configured {
            let address = text.parse::<SocketAddr>().ok();
            let active = address.is_some_and(|address| accepting.iter().any(|listener| listener.address == address));
            seen.extend(address);
            let mut entry = json!({
                "address": text,
                "discovery_only": discovery_only,
                "tls": tls,
                "configured": true,
                "active": active,
            });
            // Where hosts reach it (`[[listener]] advertise`), e.g. for the CSI driver's publish context.
            if let Some((_, advertise)) = advertised.iter().find(|(address, _)| *address == text) {
                entry["advertise"] = json!(advertise);
            }
            listeners.push(entry);
        }
        for listener in accepting.iter().filter(|listener| !seen.contains(&listener.address)) {
            listeners.push(json!({
                "address": listener.address.to_string(),
                "discovery_only": listener.discovery_only,
                "tls": listener.secure_channel.name(),
                "configured": false,
                "active": true,
            }));
        }
        Ok(json!({ "listeners": listeners }))
    }
}

/// The answer when the runtime cannot bind `address`.
fn bind_refusal(address: SocketAddr, accepting: &[ActiveListener], error: RuntimeError) -> RpcError {
    let RuntimeError::Bind { source, .. } = &error else {
        return RpcError::new(APPLY_FAILED, format!("cannot listen on {address}: {error}"));
    };
    let reason = match source.kind() {
        std::io::ErrorKind::AddrInUse => {
            // A wildcard and a specific address on one port overlap.
            let overlapping = accepting.iter().find(|listener| {
                listener.address.port() == address.port()
                    && listener.address.is_ipv4() == address.is_ipv4()
                    && (listener.address.ip().is_unspecified() || address.ip().is_unspecified())
            });
            match overlapping {
                Some(listener) => format!("{address} overlaps this target's listener {}", listener.address),
                None => format!("{address} is in use by another program"),
            }
        }
        std::io::ErrorKind::AddrNotAvailable => format!("{address} is not an address of this machine"),
        _ => format!("cannot listen on {address}: {source}"),
    };
    RpcError::refused("address", reason)
}

pub(super) fn parse_address(text: &str) -> Result<SocketAddr, RpcError> {
    text.parse().map_err(|_| {
        RpcError::invalid_params(
            "address",
            format!("{text:?} is not IP:port (e.g. \"127.0.0.1:4420\" or \"[::1]:4420\")"),
        )
    })
}

#[cfg(test)]
mod tests {
    //! The listener methods on a target served by a real runtime (loopback only).

    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use nvme_target::Target;
    use target_server::{PollMode, Runtime, RuntimeConfig};

    use super::*;
    use crate::manage::protocol::{CHANGE_REFUSED, INVALID_PARAMS};
    use sluice_config::Config;

    /// A target on a two-thread runtime, its config file, and the API over both.
    struct Running {
        directory: PathBuf,
        path: PathBuf,
        port: u16,
        target: Arc<Target>,
        management: Management,
        // Dropped last: shuts the runtime down and joins it.
        _runtime: Runtime,
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn file_text(port: u16) -> String {
        format!(
            "[[listener]]\naddress = \"127.0.0.1:{port}\"\n\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:a\"\n\
             allow_any_host = true\n\n[[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"1MiB\"\n"
        )
    }

    impl Running {
        fn start(name: &str) -> Running {
            let directory = std::env::temp_dir().join(format!("sluice-listeners-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&directory);
            std::fs::create_dir_all(&directory).unwrap();
            let path = directory.join("sluice.toml");
            // A port free a moment ago may be taken by now: try a few.
            for _ in 0..5 {
                let port = free_port();
                std::fs::write(&path, file_text(port)).unwrap();
                let target = Target::new(Config::parse(&file_text(port)).unwrap().target_spec().unwrap()).unwrap();
                let config = RuntimeConfig {
                    threads: 2,
                    poll_mode: PollMode::Sleep,
                    listeners: vec![SocketAddr::from(([127, 0, 0, 1], port))],
                    ring_entries: 64,
                    ..RuntimeConfig::default()
                };
                let Ok(runtime) = target_server::start(Arc::clone(&target), config) else { continue };
                let live = LiveListeners::new(Arc::clone(&target), &runtime);
                let management =
                    Management::new(Arc::clone(&target), Some(&path), Vec::new()).unwrap().with_live_listeners(live);
                return Running { directory, path, port, target, management, _runtime: runtime };
            }
            panic!("no free port for the test target");
        }

        fn call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
            self.management.call(method, Params::new(params.as_object().cloned().unwrap_or_default()))
        }

        fn file(&self) -> String {
            std::fs::read_to_string(&self.path).unwrap()
        }

        fn target_ports(&self) -> Vec<u16> {
            self.target.listeners().iter().map(|(_, listener)| listener.port).collect()
        }

        /// `method` is refused with `code` naming `field`; file and target unchanged.
        fn assert_refused(&mut self, method: &str, params: Value, code: i64, field: &str) -> RpcError {
            let (file, ports) = (self.file(), self.target_ports());
            let error = self.call(method, params.clone()).expect_err(&format!("{method} {params}"));
            assert_eq!(error.code, code, "{method} {params}: {error:?}");
            let named = error.data.as_ref().and_then(|data| data.get("field")).and_then(Value::as_str).unwrap_or("");
            assert_eq!(named, field, "{method} {params}: {error:?}");
            assert_eq!(self.file(), file, "{method} {params}: the file must be byte-identical");
            assert_eq!(self.target_ports(), ports, "{method} {params}: the target must be unchanged");
            error
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.directory);
        }
    }

    /// Reads until the target closes the connection (EOF or reset), bounded.
    fn closed_by_target(stream: &mut TcpStream) -> bool {
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buffer = [0u8; 64];
        match stream.read(&mut buffer) {
            Ok(0) => true,
            Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    }

    #[test]
    fn listeners_are_added_and_removed_live() {
        let mut running = Running::start("live");
        let first = SocketAddr::from(([127, 0, 0, 1], running.port));
        let added = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let generation = running.target.discovery_generation();
        let answer = running.call("listener_add", json!({"address": added.to_string()})).unwrap();
        assert_eq!(answer["active"], true, "{answer}");
        assert!(running.target.discovery_generation() > generation, "the discovery log changed");
        assert_eq!(running.target_ports(), [running.port, added.port()]);
        assert!(running.file().contains(&format!("address = \"{added}\"")));
        let listed = running.call("listener_list", json!({})).unwrap();
        let states: Vec<(String, bool, bool)> = listed["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|listener| {
                let text = listener["address"].as_str().unwrap().to_string();
                (text, listener["configured"] == true, listener["active"] == true)
            })
            .collect();
        assert_eq!(states, [(first.to_string(), true, true), (added.to_string(), true, true)]);

        let mut through_added = TcpStream::connect(added).expect("the added listener accepts");
        let mut through_first = TcpStream::connect(first).unwrap();
        let answer = running.call("listener_remove", json!({"address": added.to_string()})).unwrap();
        assert!(answer["connections_closed"].as_u64().unwrap() <= 1, "{answer}");
        assert_eq!(answer["io_listeners_left"], 1, "{answer}");
        assert!(closed_by_target(&mut through_added), "the removed listener's connection is closed");
        assert!(TcpStream::connect_timeout(&added, Duration::from_secs(1)).is_err(), "nothing listens there");
        assert_eq!(running.target_ports(), [running.port]);
        assert!(!running.file().contains(&added.to_string()));
        // The other listener's connection is untouched: no EOF within a moment.
        through_first.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut buffer = [0u8; 8];
        let still_open = matches!(through_first.read(&mut buffer), Err(error)
            if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
        assert!(still_open, "a connection through another listener stays open");
    }

    #[test]
    fn a_tls_listener_added_live_is_written_listed_and_refuses_plain_hosts() {
        let mut running = Running::start("tls");
        let added = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let answer = running.call("listener_add", json!({"address": added.to_string(), "tls": "required"})).unwrap();
        assert_eq!(answer["tls"], "required", "{answer}");
        assert!(running.file().contains("tls = \"required\""), "{}", running.file());
        let listed = running.call("listener_list", json!({})).unwrap();
        let listeners = listed["listeners"].as_array().unwrap();
        let tls: Vec<&str> = listeners.iter().map(|listener| listener["tls"].as_str().unwrap()).collect();
        assert_eq!(tls, ["none", "required"], "{listed}");
        // The discovery log announces it (TREQ, TSAS come from this).
        let entry = running.target.listeners().into_iter().find(|(_, listener)| listener.port == added.port());
        assert_eq!(entry.map(|(_, listener)| listener.secure_channel), Some(nvme_target::SecureChannel::Required));

        // A plain ICReq (PDU type 0, not a TLS record) is closed at once.
        let mut plain = TcpStream::connect(added).expect("the TLS listener accepts");
        let mut icreq = [0u8; 128];
        icreq[2] = 128;
        icreq[4] = 128;
        std::io::Write::write_all(&mut plain, &icreq).unwrap();
        assert!(closed_by_target(&mut plain), "a plain host on a TLS-only listener is closed");

        running.assert_refused(
            "listener_add",
            json!({"address": SocketAddr::from(([127, 0, 0, 1], free_port())).to_string(), "tls": "always"}),
            INVALID_PARAMS,
            "tls",
        );
    }

    #[test]
    fn refused_listener_changes_leave_the_file_and_the_target_as_they_were() {
        let mut running = Running::start("refused");
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let busy_address = busy.local_addr().unwrap().to_string();
        let error = running.assert_refused("listener_add", json!({"address": busy_address}), CHANGE_REFUSED, "address");
        assert!(error.message.contains("in use by another program"), "{error:?}");
        let wildcard = format!("0.0.0.0:{}", running.port);
        let error = running.assert_refused("listener_add", json!({"address": wildcard}), CHANGE_REFUSED, "address");
        assert!(error.message.contains("overlaps"), "{error:?}");
        let ours = format!("127.0.0.1:{}", running.port);
        running.assert_refused("listener_add", json!({"address": ours}), CHANGE_REFUSED, "address");
        running.assert_refused("listener_add", json!({"address": "127.0.0.1:0"}), INVALID_PARAMS, "address");
        let error = running.assert_refused("listener_remove", json!({"address": ours}), CHANGE_REFUSED, "address");
        assert!(error.message.contains("only listener"), "{error:?}");
        running.assert_refused("listener_remove", json!({"address": busy_address}), CHANGE_REFUSED, "address");
        // Still serving on its one listener.
        TcpStream::connect(("127.0.0.1", running.port)).expect("the listener still accepts");
    }
}
