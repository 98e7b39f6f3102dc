//! The CSI plugin's integration tests, one binary: the real `shoal-csi` binary
//! driven over its socket as kubelet drives it, by a gRPC client built from the
//! same `csi.proto`, against real nodes, the test origin and real mounts read
//! with ordinary tools.

mod common;

mod adopt;
mod condition;
mod driver_role;
mod fuzz_h2;
mod grpc_python;
mod node;
mod plugin_metrics;
mod pod_credentials;
mod restart;
mod share;
mod systemd;
mod upgrade;
