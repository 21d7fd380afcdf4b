//! The CSI Identity service: who this plugin is and what it offers.

use tonic::{Request, Response, Status};

use crate::csi::identity_server::Identity;
use crate::csi::plugin_capability::{service, volume_expansion, Service, Type as CapabilityType, VolumeExpansion};
use crate::csi::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest, GetPluginInfoResponse,
    PluginCapability, ProbeRequest, ProbeResponse,
};

pub struct IdentityService {
    pub driver_name: String,
    /// Whether this process serves the Controller service (not a node-only plugin).
    pub controller: bool,
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: self.driver_name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        // Online expansion: a volume grows while published (the gateway resizes the
        // namespace under the connected hosts; the node grows a mounted filesystem).
        let mut capabilities = vec![PluginCapability {
            r#type: Some(CapabilityType::VolumeExpansion(VolumeExpansion {
                r#type: volume_expansion::Type::Online as i32,
            })),
        }];
        if self.controller {
            capabilities.push(PluginCapability {
                r#type: Some(CapabilityType::Service(Service { r#type: service::Type::ControllerService as i32 })),
            });
        }
        Ok(Response::new(GetPluginCapabilitiesResponse { capabilities }))
    }

    async fn probe(&self, _request: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}
