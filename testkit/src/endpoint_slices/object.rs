//! An EndpointSlice as the API server writes it: the `discovery.k8s.io/v1` Go
//! types (`k8s.io/api/discovery/v1/types.go`) through Go's `encoding/json`. A
//! list field without `omitempty` (`endpoints`, `ports`, `addresses`) is `null`
//! when it holds nothing: stored objects go through protobuf, which keeps no
//! empty list, so an empty one comes back nil. A pointer field with `omitempty`
//! (`zone`, `nodeName`, `hostname`, each condition, a port's `name` and
//! `port`) is left out when unset. A struct (`conditions`, `metadata`) is never
//! left out, `omitempty` or not: an endpoint with no condition set has
//! `"conditions": {}`.

use serde_json::{json, Map, Value};

/// The label tying a slice to its Service.
pub const SERVICE_LABEL: &str = "kubernetes.io/service-name";
/// The label the EndpointSlice controller puts on the slices it manages.
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

/// An endpoint's conditions, each one unset (`None`) or set, as the Go type has
/// them. The API reads an unset `ready` or `serving` as true and an unset
/// `terminating` as false.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conditions {
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
}

/// One endpoint of a slice.
#[derive(Clone, Debug)]
pub struct SliceEndpoint {
    pub address: String,
    pub conditions: Conditions,
    pub zone: Option<String>,
    pub node_name: Option<String>,
}

impl SliceEndpoint {
    /// A pod's endpoint as the EndpointSlice controller writes it for a Service
    /// that does not publish not-ready addresses: every condition set, ready
    /// and serving as the pod's readiness, not terminating.
    pub fn pod(address: &str, ready: bool, zone: Option<&str>) -> SliceEndpoint {
        SliceEndpoint {
            address: address.to_owned(),
            conditions: Conditions {
                ready: Some(ready),
                serving: Some(ready),
                terminating: Some(false),
            },
            zone: zone.map(str::to_owned),
            node_name: None,
        }
    }

    /// A pod being deleted that still passes its probe: not ready, serving,
    /// terminating (the controller's rule: ready is serving and not terminating).
    pub fn terminating(address: &str, zone: Option<&str>) -> SliceEndpoint {
        SliceEndpoint {
            conditions: Conditions {
                ready: Some(false),
                serving: Some(true),
                terminating: Some(true),
            },
            ..SliceEndpoint::pod(address, false, zone)
        }
    }

    fn object(&self, namespace: &str) -> Value {
        let mut conditions = Map::new();
        for (name, value) in [
            ("ready", self.conditions.ready),
            ("serving", self.conditions.serving),
            ("terminating", self.conditions.terminating),
        ] {
            if let Some(v) = value {
                conditions.insert(name.into(), v.into());
            }
        }
        let mut e = json!({
            "addresses": [self.address],
            "conditions": conditions,
            "targetRef": {
                "kind": "Pod",
                "namespace": namespace,
                "name": format!("pod-{}", self.address.replace(['.', ':'], "-")),
            },
        });
        if let Some(n) = &self.node_name {
            e["nodeName"] = json!(n);
        }
        if let Some(z) = &self.zone {
            e["zone"] = json!(z);
        }
        e
    }
}

/// A port of a slice: `name` and `port` are pointers in the Go type, left out
/// when unset.
#[derive(Clone, Debug)]
pub struct SlicePort {
    pub name: Option<String>,
    pub port: Option<u16>,
}

/// A slice as stored.
pub(super) struct Slice {
    pub service: String,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
    /// The store's resourceVersion when it last changed.
    pub version: u64,
}

impl Slice {
    /// The slice as the API shows it, at resourceVersion `version`.
    pub fn object(&self, namespace: &str, name: &str, version: u64) -> Value {
        let endpoints = self.endpoints.iter().map(|e| e.object(namespace));
        let ports = self.ports.iter().map(|p| {
            let mut v = json!({"protocol": "TCP"});
            if let Some(n) = &p.name {
                v["name"] = json!(n);
            }
            if let Some(n) = p.port {
                v["port"] = json!(n);
            }
            v
        });
        let v6 = self.endpoints.iter().any(|e| e.address.contains(':'));
        json!({
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {
                "name": name,
                "generateName": format!("{}-", self.service),
                "namespace": namespace,
                "resourceVersion": version.to_string(),
                "generation": version,
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {
                    SERVICE_LABEL: self.service,
                    MANAGED_BY: "endpointslice-controller.k8s.io",
                },
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": self.service,
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "addressType": if v6 { "IPv6" } else { "IPv4" },
            "endpoints": go_list(endpoints),
            "ports": go_list(ports),
        })
    }
}

/// A bookmark's object: an empty EndpointSlice with only its resourceVersion,
/// every other field at Go's zero value (`creationTimestamp` a zero
/// `metav1.Time`, written `null`).
pub(super) fn bookmark(version: u64) -> Value {
    json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"resourceVersion": version.to_string(), "creationTimestamp": null},
        "addressType": "",
        "endpoints": null,
        "ports": null,
    })
}

/// A list field without `omitempty`: `null` when it holds nothing.
fn go_list(items: impl Iterator<Item = Value>) -> Value {
    let items: Vec<Value> = items.collect();
    if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    }
}
