//! `POST /BUCKET?shoal-drain`: the blocks of BUCKET this node holds and owns,
//! one JSON line each with the node that owns it once this one is gone (a key
//! that may purge the whole bucket may ask). `POST /BUCKET?shoal-take&from=ID`
//! with such lines as its body: this node takes those blocks from node ID (a
//! member of its cluster) with only-if-cached, as a previous-owner fill does,
//! and answers what it took (a key that may pass purges on may ask). How
//! `shoal drain` hands a leaving node's blocks back before it stops.

use std::sync::Arc;

use s3s::{s3_error, S3Request, S3Response, S3Result};
use shoal::node_proto::Purge;

use super::auth::Gate;
use super::query::query_param;
use crate::access::classify;
use crate::node::{HandbackError, Node};

/// Most bytes of a take body: 64 Ki block lines.
const TAKE_BODY_LIMIT: usize = 16 << 20;

/// Whether `uri` asks for a hand-back rather than a purge.
pub fn asks(uri: &http::Uri) -> bool {
    query_param(uri, "shoal-drain").is_some() || query_param(uri, "shoal-take").is_some()
}

fn json(body: String, ndjson: bool) -> S3Response<s3s::Body> {
    let mut resp = S3Response::new(s3s::Body::from(body));
    resp.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(if ndjson {
            "application/x-ndjson"
        } else {
            "application/json"
        }),
    );
    resp
}

fn refused(e: HandbackError) -> s3s::S3Error {
    match e {
        HandbackError::NoCluster => s3_error!(NotImplemented, "{e}"),
        _ => s3_error!(InvalidArgument, "{e}"),
    }
}

/// Answers a hand-back request to `node`, if `gate` lets its key (no gate:
/// authentication is off).
pub async fn call(
    node: &Arc<Node>,
    gate: Option<&Gate>,
    req: S3Request<s3s::Body>,
    bucket: String,
) -> S3Result<S3Response<s3s::Body>> {
    let take = query_param(&req.uri, "shoal-take").is_some();
    if let Some(gate) = gate {
        let key = req.credentials.as_ref().map(|c| c.access_key.as_str());
        // Listing a bucket's blocks is a purge's reach; taking blocks from a
        // peer is what nodes do for each other, like passing purges on.
        gate.check(
            key,
            &classify::purge(&bucket, &[Purge::Prefix(String::new())], take),
        )?;
    }
    if !take {
        let list = node.handback_list(&bucket).await.map_err(refused)?;
        tracing::info!(bucket = %bucket, blocks = list.len(), "drain: listed the blocks this node owns for their runner-ups");
        let body: String = list
            .iter()
            .map(|h| h.to_json().to_string() + "\n")
            .collect();
        return Ok(json(body, true));
    }
    let from = query_param(&req.uri, "from")
        .filter(|f| !f.is_empty())
        .ok_or_else(|| s3_error!(InvalidArgument, "shoal-take needs from=NODE"))?;
    let mut input = req.input;
    let body = input
        .store_all_limited(TAKE_BODY_LIMIT)
        .await
        .map_err(|_| s3_error!(InvalidArgument, "take body over 16 MiB"))?;
    let blocks = Node::handback_lines(&bucket, &body).map_err(refused)?;
    let asked = blocks.len();
    let taken = node.take_from(&from, blocks).await.map_err(refused)?;
    tracing::info!(
        bucket = %bucket,
        from = %from,
        "drain: took {} of {asked} blocks ({} bytes) from the leaving node, {} held already, {} missed",
        taken.taken,
        taken.bytes,
        taken.held,
        taken.missed
    );
    Ok(json(
        serde_json::to_string(&taken).unwrap_or_default(),
        false,
    ))
}
