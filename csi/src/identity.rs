//! The Identity service: the plugin's name and version, what it offers, and
//! whether it is ready (it can start mounts: `/dev/fuse` is there and
//! `shoal-mount` runs).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::proto;
use crate::proto::identity_server::Identity;
use crate::Plugin;

/// The driver's name, as CSIDriver objects and PersistentVolumes give it.
pub const DRIVER_NAME: &str = "csi.shoal";

#[tonic::async_trait]
impl Identity for Arc<Plugin> {
    async fn get_plugin_info(
        &self,
        _: Request<proto::GetPluginInfoRequest>,
    ) -> Result<Response<proto::GetPluginInfoResponse>, Status> {
        Ok(Response::new(proto::GetPluginInfoResponse {
            name: DRIVER_NAME.into(),
            vendor_version: env!("CARGO_PKG_VERSION").into(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<proto::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<proto::GetPluginCapabilitiesResponse>, Status> {
        use proto::plugin_capability::{service::Type, Service, Type as Cap};
        // Node only: volumes are provisioned statically. With a zone, volumes
        // say where they are reachable from.
        let capabilities = self
            .zone
            .iter()
            .map(|_| proto::PluginCapability {
                r#type: Some(Cap::Service(Service {
                    r#type: Type::VolumeAccessibilityConstraints as i32,
                })),
            })
            .collect();
        Ok(Response::new(proto::GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(
        &self,
        _: Request<proto::ProbeRequest>,
    ) -> Result<Response<proto::ProbeResponse>, Status> {
        let me = self.clone();
        let ready = tokio::task::spawn_blocking(move || me.can_mount())
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        if let Err(why) = &ready {
            tracing::warn!("not ready: {why}");
        }
        Ok(Response::new(proto::ProbeResponse {
            ready: Some(ready.is_ok()),
        }))
    }
}
