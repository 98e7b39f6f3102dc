//! `POST /BUCKET?shoal-purge&key=K` (or `&prefix=P`, or a body of such lines):
//! drops cached blocks and versions on this node, and passes the purge on unless
//! `shoal-local` is given. Signed like any S3 request.

use std::sync::Arc;

use s3s::{s3_error, S3Request, S3Response, S3Result};
use shoal::node_proto::Purge;

use super::handback;
use super::query::query_param;
use crate::access::classify;
use crate::fanout::Fanout;
use crate::node::Node;

pub struct PurgeRoute {
    pub node: Arc<Node>,
    pub fanout: Option<Arc<Fanout>>,
    pub open: bool,
    /// Who may purge what; `None` when authentication is off.
    pub gate: Option<super::auth::Gate>,
}

/// Most bytes of a batch purge body.
const PURGE_BODY_LIMIT: usize = 1 << 20;

#[async_trait::async_trait]
impl s3s::route::S3Route for PurgeRoute {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        _: &http::HeaderMap,
        _: &mut http::Extensions,
    ) -> bool {
        method == http::Method::POST
            && (query_param(uri, "shoal-purge").is_some() || handback::asks(uri))
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        if self.open || req.credentials.is_some() {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied, "purge needs a signed request"))
        }
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        let path = req.uri.path().trim_start_matches('/');
        let bucket = percent_encoding::percent_decode_str(path.split('/').next().unwrap_or(""))
            .decode_utf8_lossy()
            .into_owned();
        if bucket.is_empty() {
            return Err(s3_error!(
                InvalidArgument,
                "purge needs a bucket: POST /BUCKET?shoal-purge&key=K"
            ));
        }
        if handback::asks(&req.uri) {
            return handback::call(&self.node, self.gate.as_ref(), req, bucket).await;
        }
        let local = query_param(&req.uri, "shoal-local").is_some();
        let mut input = req.input;
        let body = input
            .store_all_limited(PURGE_BODY_LIMIT)
            .await
            .map_err(|_| s3_error!(InvalidArgument, "purge body over 1 MiB"))?;
        let one = Purge::from_params(
            query_param(&req.uri, "key"),
            query_param(&req.uri, "prefix"),
            query_param(&req.uri, "keep"),
        );
        let no_params = ["key", "prefix", "keep"]
            .iter()
            .all(|p| query_param(&req.uri, p).is_none());
        let targets = match one {
            Some(t) if body.is_empty() => vec![t],
            None if no_params && !body.is_empty() => {
                Purge::parse_lines(&body).map_err(|m| s3_error!(InvalidArgument, "{m}"))?
            }
            _ => {
                return Err(s3_error!(
                    InvalidArgument,
                    "purge takes exactly one of key=K or prefix=P (or a body of such lines)"
                ))
            }
        };
        if let Some(gate) = &self.gate {
            let key = req.credentials.as_ref().map(|c| c.access_key.as_str());
            gate.check(key, &classify::purge(&bucket, &targets, local))?;
        }
        let mut n = 0;
        for t in &targets {
            n += self
                .node
                .invalidate(self.fanout.as_deref(), &bucket, t.clone(), !local)
                .await;
        }
        let what = format!(
            "{} target(s){}",
            targets.len(),
            if local { "" } else { ", passed on" }
        );
        self.node.metrics.purges.inc();
        tracing::info!(bucket = %bucket, "purged {what}: {n} blocks");
        let body = serde_json::json!({ "bucket": bucket, "purged_blocks": n }).to_string();
        let mut resp = S3Response::new(s3s::Body::from(body));
        resp.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }
}
