//! Bringing up an association: the admin queue's connection, enabling the
//! controller (CC.EN / CSTS.RDY), Identify Controller and Number of Queues.

use std::time::{Duration, Instant};

use nvme_host::{commands, DhchapSecrets, HostCommand, HostCompletion, QueueConfig, MAX_COMMAND_DATA_BYTES};
use nvme_spec::fabrics::property_offset;
use nvme_spec::features::{async_event_configuration, feature_id, number_of_queues_request};
use nvme_spec::identify::{cns, csi, oaes, sgls, IDENTIFY_DATA_BYTES};
use nvme_spec::registers::{ControllerCapabilities, ControllerConfiguration, ControllerStatus, Version};
use nvme_spec::{ControllerId, IdentifyController, NamespaceId, QueueId};
use nvme_tcp_wire::DigestSettings;

use crate::connection::{GeneratedTls, QueueConnection, QueueTls};
use crate::{ClientError, ConnectOptions};

/// Admin queue entries (Linux NVME_AQ_DEPTH): one caller command at a time, the
/// keep-alive, the held Asynchronous Event Request and room to spare.
pub(crate) const ADMIN_QUEUE_SIZE: u16 = 32;
/// Largest transfer used when the controller reports no limit (MDTS 0).
pub(crate) const UNLIMITED_TRANSFER_BYTES: u32 = 1024 * 1024;
/// Longest wait for CSTS.SHST after a normal shutdown notification (Linux's default
/// shutdown_timeout).
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// User tag of the held Asynchronous Event Request on the admin queue.
pub(crate) const ASYNC_EVENT_TAG: u64 = u64::MAX;

/// What an association is, once up.
#[derive(Debug)]
pub(crate) struct Association {
    pub connection: QueueConnection,
    pub controller_id: ControllerId,
    pub capabilities: ControllerCapabilities,
    pub version: Version,
    pub identify: IdentifyController,
    /// I/O queues granted (0 for discovery).
    pub io_queue_count: usize,
    /// Entries per I/O queue.
    pub io_queue_size: u16,
    /// IOCCSZ * 16 - 64.
    pub io_in_capsule_data_bytes: u32,
    /// MDTS in bytes (capped).
    pub max_transfer_bytes: u32,
    /// The TLS PSK secure channel concatenation generated for this association.
    pub generated_tls: Option<std::sync::Arc<GeneratedTls>>,
}

/// The queue configuration for queue `queue_id` of an association.
pub(crate) fn queue_config(
    options: &ConnectOptions,
    subsystem_nqn: &str,
    queue_id: QueueId,
    queue_size: u16,
    controller_id: ControllerId,
    keep_alive_timeout_ms: u32,
) -> QueueConfig {
    QueueConfig {
        queue_id,
        queue_size,
        controller_id,
        subsystem_nqn: subsystem_nqn.to_string(),
        host_nqn: options.host_nqn.clone(),
        host_identifier: options.host_identifier,
        keep_alive_timeout_ms,
        digests: DigestSettings { header: options.header_digest, data: options.data_digest },
        command_timeout_ms: options.command_timeout.as_millis().min(u128::from(u64::MAX)) as u64,
        max_r2t_outstanding: 0,
        dhchap: options.dhchap_secret.clone().map(|secret| DhchapSecrets {
            secret,
            controller_secret: options.dhchap_controller_secret.clone(),
            secure_channel: nvme_auth::SecureChannelRequest::None,
        }),
    }
}

/// Runs one admin command on a connection that is not shared (setup, discovery),
/// turning an error status into `ClientError::Command`.
pub(crate) fn run_admin(connection: &mut QueueConnection, command: HostCommand) -> Result<HostCompletion, ClientError> {
    let opcode = command.sqe.opcode();
    let completion = connection.execute(command, 1, None, &mut |_| None)?;
    check_admin(opcode, completion)
}

/// `Ok` for a successful completion, `ClientError::Command` otherwise.
pub(crate) fn check_admin(opcode: u8, completion: HostCompletion) -> Result<HostCompletion, ClientError> {
    if let Some(error) = &completion.transport_error {
        return Err(ClientError::Protocol(error.clone()));
    }
    if !completion.cqe.status.is_success() {
        return Err(ClientError::Command { admin: true, opcode, status: completion.cqe.status });
    }
    Ok(completion)
}

/// Decodes a 4096-byte Identify buffer.
pub(crate) fn identify_data(completion: &HostCompletion) -> Result<&[u8; IDENTIFY_DATA_BYTES], ClientError> {
    completion
        .data
        .as_slice()
        .try_into()
        .map_err(|_| ClientError::InvalidController(format!("Identify returned {} bytes", completion.data.len())))
}

/// Connects the admin queue to `subsystem_nqn` and enables the controller. With
/// `io` set, also asks for I/O queues, enables namespace notices and arms an
/// Asynchronous Event Request (tag [`ASYNC_EVENT_TAG`]).
pub(crate) fn establish(
    options: &ConnectOptions,
    address: std::net::SocketAddr,
    subsystem_nqn: &str,
    keep_alive_timeout_ms: u32,
    io: bool,
) -> Result<Association, ClientError> {
    if options.dhchap_controller_secret.is_some() && options.dhchap_secret.is_none() {
        return Err(ClientError::InvalidArgument(
            "a DH-HMAC-CHAP controller secret needs a host secret too (--dhchap-secret)".into(),
        ));
    }
    let config = queue_config(
        options,
        subsystem_nqn,
        QueueId::ADMIN,
        ADMIN_QUEUE_SIZE,
        ControllerId::DYNAMIC,
        keep_alive_timeout_ms,
    );
    let (mut connection, generated_tls) = if options.concat {
        let (connection, generated) = concatenate(options, address, config)?;
        (connection, Some(std::sync::Arc::new(generated)))
    } else {
        (
            QueueConnection::connect(
                address,
                config,
                options.connect_timeout,
                QueueTls::of(options.tls.as_ref(), None),
            )?,
            None,
        )
    };
    let controller_id = connection.queue.controller_id().unwrap_or(ControllerId::DYNAMIC);

    let capabilities = ControllerCapabilities(
        run_admin(&mut connection, commands::property_get(property_offset::CAP, 8))?.cqe.result_u64(),
    );
    let version = Version(run_admin(&mut connection, commands::property_get(property_offset::VS, 4))?.cqe.result_dw0);
    if capabilities.memory_page_size_minimum() != 0 {
        return Err(ClientError::InvalidController(format!(
            "CAP.MPSMIN {} (this host uses 4 KiB pages)",
            capabilities.memory_page_size_minimum()
        )));
    }
    enable(&mut connection, capabilities, options.connect_timeout)?;

    let completion = run_admin(&mut connection, commands::identify(cns::CONTROLLER, NamespaceId::NONE, csi::NVM))?;
    let identify = IdentifyController::decode(identify_data(&completion)?);
    if identify.controller_id != controller_id {
        return Err(ClientError::InvalidController(format!(
            "Identify Controller CNTLID {} differs from Connect's {}",
            identify.controller_id.0, controller_id.0
        )));
    }
    if keep_alive_timeout_ms > 0 && identify.keep_alive_support == 0 {
        return Err(ClientError::InvalidController("KAS is 0: no Keep Alive support".into()));
    }
    if identify.sgl_support & sgls::SUPPORT_MASK == 0 {
        return Err(ClientError::InvalidController("SGLS reports no SGL support".into()));
    }
    let page_bytes = 4096u64;
    let max_transfer_bytes = match identify.maximum_data_transfer_size {
        0 => UNLIMITED_TRANSFER_BYTES,
        mdts => (page_bytes << u32::from(mdts).min(20)).min(u64::from(MAX_COMMAND_DATA_BYTES)) as u32,
    };
    let io_in_capsule_data_bytes = identify.io_command_capsule_size.saturating_mul(16).saturating_sub(64);
    let mut io_queue_size = u32::from(options.queue_size).min(capabilities.maximum_queue_entries());
    if identify.maximum_outstanding_commands > 0 {
        io_queue_size = io_queue_size.min(u32::from(identify.maximum_outstanding_commands));
    }
    let io_queue_size = io_queue_size.clamp(2, u32::from(u16::MAX)) as u16;

    let mut io_queue_count = 0;
    if io && options.io_queues > 0 {
        let requested = u32::from(options.io_queues);
        let completion = run_admin(
            &mut connection,
            commands::set_features(
                feature_id::NUMBER_OF_QUEUES,
                NamespaceId::NONE,
                number_of_queues_request(requested, requested),
                false,
            ),
        )?;
        let granted_submission = (completion.cqe.result_dw0 & 0xFFFF) + 1;
        let granted_completion = (completion.cqe.result_dw0 >> 16) + 1;
        io_queue_count = requested.min(granted_submission).min(granted_completion) as usize;
    }
    if io {
        if identify.optional_async_events_supported & oaes::NAMESPACE_ATTRIBUTE_NOTICES != 0 {
            let enable = commands::set_features(
                feature_id::ASYNCHRONOUS_EVENT_CONFIGURATION,
                NamespaceId::NONE,
                async_event_configuration::NAMESPACE_ATTRIBUTE_NOTICES,
                false,
            );
            if let Err(error) = run_admin(&mut connection, enable) {
                tracing::info!(%error, "controller refused namespace attribute notices");
            }
        }
        let mut request = commands::async_event_request();
        request.user_tag = ASYNC_EVENT_TAG;
        if connection.queue.submit(request, Instant::now()).is_err() {
            return Err(ClientError::InvalidController("could not arm an Asynchronous Event Request".into()));
        }
        connection.flush()?;
    }
    tracing::info!(address = %address, controller = controller_id.0, io_queue_count, io_queue_size,
        max_transfer_bytes, "controller ready");
    Ok(Association {
        connection,
        controller_id,
        capabilities,
        version,
        identify,
        io_queue_count,
        io_queue_size,
        io_in_capsule_data_bytes,
        max_transfer_bytes,
        generated_tls,
    })
}

/// Secure channel concatenation (as Linux's `nvme connect --concat`): the admin
/// queue connects without TLS and authenticates with SC_C = NEWTLSPSK, which
/// generates a TLS PSK on both sides; that connection closes and the admin queue
/// connects again, over TLS with the generated PSK (where the target asks for no
/// second authentication).
fn concatenate(
    options: &ConnectOptions,
    address: std::net::SocketAddr,
    config: QueueConfig,
) -> Result<(QueueConnection, GeneratedTls), ClientError> {
    if options.dhchap_secret.is_none() {
        return Err(ClientError::InvalidArgument(
            "secure channel concatenation (--concat) needs a DH-HMAC-CHAP secret (--dhchap-secret)".into(),
        ));
    }
    if options.tls.is_some() {
        return Err(ClientError::InvalidArgument(
            "secure channel concatenation (--concat) generates the TLS PSK: no --tls-key with it".into(),
        ));
    }
    let mut plain_config = config.clone();
    if let Some(dhchap) = plain_config.dhchap.as_mut() {
        dhchap.secure_channel = nvme_auth::SecureChannelRequest::NewTlsPsk;
    }
    let mut plain = QueueConnection::connect(address, plain_config, options.connect_timeout, QueueTls::None)?;
    let generated = plain.queue.take_generated_psk().ok_or_else(|| {
        ClientError::InvalidController(
            "the controller did not ask for DH-HMAC-CHAP on the admin queue, so no TLS PSK could be generated \
             (is this host allowed to concatenate there?)"
                .into(),
        )
    })?;
    // The plain admin queue has done its part; closing it tears its controller down.
    drop(plain);
    let (identity, psk) = generated
        .tls_key(&config.host_nqn, &config.subsystem_nqn)
        .map_err(|error| ClientError::Tls { address, message: error.to_string() })?;
    tracing::info!(%address, %identity, "secure channel concatenation: TLS PSK generated; reconnecting over TLS");
    let generated = GeneratedTls { identity, psk };
    let connection =
        QueueConnection::connect(address, config, options.connect_timeout, QueueTls::Generated(&generated))?;
    Ok((connection, generated))
}

/// CC.EN = 1 (4 KiB pages, NVM command set, 64/16-byte entries), then CSTS.RDY within
/// CAP.TO, and within `setup_timeout` (the connect timeout, which bounds connection
/// setup): a target may claim up to 127.5 s in CAP.TO.
fn enable(
    connection: &mut QueueConnection,
    capabilities: ControllerCapabilities,
    setup_timeout: Duration,
) -> Result<(), ClientError> {
    let configuration = ControllerConfiguration(0)
        .with_command_set_selected(ControllerConfiguration::COMMAND_SET_NVM)
        .with_io_submission_queue_entry_size(6)
        .with_io_completion_queue_entry_size(4)
        .with_enable(true);
    run_admin(connection, commands::property_set(property_offset::CC, u64::from(configuration.raw())))?;
    let ready_timeout = Duration::from_millis(u64::from(capabilities.timeout_500ms_units()).max(1) * 500);
    let what = if setup_timeout < ready_timeout {
        format!(
            "CSTS.RDY after CC.EN (CAP.TO allows {} ms; the connect timeout ends the wait first)",
            ready_timeout.as_millis()
        )
    } else {
        format!("CSTS.RDY after CC.EN (CAP.TO {} ms)", ready_timeout.as_millis())
    };
    wait_for_status(connection, ready_timeout.min(setup_timeout), &what, |status| status.ready())
}

/// Polls CSTS until `done` (CSTS.CFS is an error), at most `timeout`.
pub(crate) fn wait_for_status(
    connection: &mut QueueConnection,
    timeout: Duration,
    what: &str,
    done: impl Fn(ControllerStatus) -> bool,
) -> Result<(), ClientError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        let status =
            ControllerStatus(run_admin(connection, commands::property_get(property_offset::CSTS, 4))?.cqe.result_dw0);
        if status.controller_fatal_status() {
            return Err(ClientError::InvalidController(format!("CSTS.CFS set while waiting for {what}")));
        }
        if done(status) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ClientError::InvalidController(format!(
                "the target did not set {what} within {} ms",
                timeout.as_millis()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// CC.SHN = normal, then CSTS.SHST = complete within [`SHUTDOWN_TIMEOUT`].
pub(crate) fn shut_down(connection: &mut QueueConnection) -> Result<(), ClientError> {
    let current = run_admin(connection, commands::property_get(property_offset::CC, 4))?.cqe.result_dw0;
    let configuration =
        ControllerConfiguration(current).with_shutdown_notification(ControllerConfiguration::SHUTDOWN_NORMAL);
    run_admin(connection, commands::property_set(property_offset::CC, u64::from(configuration.raw())))?;
    wait_for_status(connection, SHUTDOWN_TIMEOUT, "CSTS.SHST complete", |status| {
        status.shutdown_status() == ControllerStatus::SHUTDOWN_COMPLETE
    })
}
