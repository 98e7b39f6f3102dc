//! A Service's EndpointSlices (`discovery.k8s.io/v1`) read as the API server
//! writes them: its Go types through Go's `encoding/json`. A list field
//! without `omitempty` is `null` when it holds nothing (`"endpoints": null`,
//! `"ports": null` for a Service with no pod: the controller's placeholder), a
//! pointer field is left out when unset (`zone`, `nodeName`, each condition, a
//! port's `name` and `port`). Any field the schema allows to be absent may be
//! absent or `null` here; only a value of the wrong type is a bad answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::WatchError;
use crate::config::{canonical_node_id, KubeService, NodeSpec};

/// A field's value, or its default when it is `null` (or, with
/// `#[serde(default)]`, absent).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
struct List {
    #[serde(default, deserialize_with = "nullable")]
    metadata: Meta,
    #[serde(default, deserialize_with = "nullable")]
    items: Vec<Slice>,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(default, rename = "resourceVersion", deserialize_with = "nullable")]
    resource_version: String,
}

#[derive(Deserialize, Default)]
struct Slice {
    #[serde(default, deserialize_with = "nullable")]
    metadata: Meta,
    #[serde(default, deserialize_with = "nullable")]
    endpoints: Vec<Endpoint>,
    #[serde(default, deserialize_with = "nullable")]
    ports: Vec<Port>,
}

#[derive(Deserialize)]
struct Endpoint {
    #[serde(default, deserialize_with = "nullable")]
    addresses: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    conditions: Conditions,
    #[serde(default)]
    zone: Option<String>,
}

/// Each condition unset (`None`) or set, as the API sends them.
#[derive(Deserialize, Default)]
struct Conditions {
    #[serde(default)]
    ready: Option<bool>,
    #[serde(default)]
    serving: Option<bool>,
    #[serde(default)]
    terminating: Option<bool>,
}

impl Conditions {
    /// Whether the endpoint is to be read from, by the API's reading of unset
    /// conditions: `ready` and `serving` true, `terminating` false. The
    /// controller sets `ready` from serving and not terminating, except for a
    /// Service that publishes not-ready addresses, whose endpoints are all
    /// ready: serving and terminating are read as well, so that a pod failing
    /// its probe or being deleted is no member of such a Service either.
    fn member(&self) -> bool {
        self.ready.unwrap_or(true)
            && self.serving.unwrap_or(true)
            && !self.terminating.unwrap_or(false)
    }
}

#[derive(Deserialize)]
struct Port {
    /// Unset is the empty name (a Service's one unnamed port).
    #[serde(default)]
    name: Option<String>,
    /// An int32 in the API: a number no TCP port can be is no port.
    #[serde(default)]
    port: Option<i64>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: serde_json::Value,
}

/// The slices of one Service, by name: what the API has told so far.
#[derive(Default)]
pub struct Slices {
    by_name: BTreeMap<String, Vec<NodeSpec>>,
}

impl Slices {
    /// Every node of every slice, in a stable order (an endpoint in two
    /// slices, as one moving between them is for a moment, once).
    pub fn nodes(&self) -> Vec<NodeSpec> {
        let mut all: Vec<NodeSpec> = self.by_name.values().flatten().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all.dedup_by(|a, b| a.id == b.id);
        all
    }

    /// A list answer's slices, and the version to watch from.
    pub fn from_list(svc: &KubeService, body: &[u8]) -> Result<(Slices, String), WatchError> {
        let list: List =
            serde_json::from_slice(body).map_err(|e| WatchError::Bad(e.to_string()))?;
        let mut slices = Slices::default();
        for s in &list.items {
            slices.put(svc, s);
        }
        Ok((slices, list.metadata.resource_version))
    }

    /// Applies one line of a watch's answer: whether the slices changed. A
    /// bookmark moves `version` on; an ERROR event ends the watch (410: the
    /// version is gone, list again). A bad line changes nothing.
    pub fn apply_event(
        &mut self,
        svc: &KubeService,
        line: &[u8],
        version: &mut String,
    ) -> Result<bool, WatchError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(false);
        }
        let ev: Event = serde_json::from_slice(line).map_err(|e| WatchError::Bad(e.to_string()))?;
        match ev.kind.as_str() {
            "ERROR" => {
                let code = ev.object["code"].as_u64();
                if code == Some(410) {
                    return Err(WatchError::Expired);
                }
                Err(WatchError::Status {
                    status: code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
                    message: ev.object["message"].as_str().unwrap_or("").to_owned(),
                })
            }
            "BOOKMARK" => {
                if let Some(v) = ev.object["metadata"]["resourceVersion"].as_str() {
                    *version = v.to_owned();
                }
                Ok(false)
            }
            kind @ ("ADDED" | "MODIFIED" | "DELETED") => {
                let s: Slice = serde_json::from_value(ev.object)
                    .map_err(|e| WatchError::Bad(e.to_string()))?;
                if kind == "DELETED" {
                    self.by_name.remove(&s.metadata.name);
                } else {
                    self.put(svc, &s);
                }
                *version = s.metadata.resource_version.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn put(&mut self, svc: &KubeService, s: &Slice) {
        self.by_name
            .insert(s.metadata.name.clone(), members(svc, s));
    }
}

/// The endpoints of `s` to read from, as nodes on the Service's port.
fn members(svc: &KubeService, s: &Slice) -> Vec<NodeSpec> {
    let port = match &svc.port {
        Some(want) => s
            .ports
            .iter()
            .find(|p| p.name.as_deref().unwrap_or("") == want),
        None => s.ports.first(),
    }
    .and_then(|p| p.port)
    .and_then(|p| u16::try_from(p).ok())
    .filter(|p| *p != 0);
    let Some(port) = port else {
        // A slice without the port (none yet, or the placeholder of a
        // Service with no pod): none of its endpoints can be reached.
        return Vec::new();
    };
    s.endpoints
        .iter()
        .filter(|e| e.conditions.member())
        .flat_map(|e| {
            // Addresses only (an FQDN slice's names are skipped): members are
            // found with no name resolved.
            e.addresses.iter().filter_map(move |a| {
                let ip: std::net::IpAddr = a.parse().ok()?;
                Some(NodeSpec {
                    id: canonical_node_id(&std::net::SocketAddr::new(ip, port).to_string()).ok()?,
                    weight: 1.0,
                    zone: e.zone.clone(),
                })
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "slices_tests.rs"]
mod tests;
