//! The S3 operations a node answers, on `s3s` (request parsing, SigV4 checks, XML).
//!
//! One file per operation family: [`objects`] (GET, HEAD, through the node's read
//! path, or [`passthrough`] for keys the rules leave uncached), [`lists`]
//! (listings and bucket reads, passed through to the origin as they are),
//! [`writes`] (a gateway's PUT, multipart and DELETE), [`purge`] (the purge
//! route). Errors become S3 errors in one place, [`error`]. This layer uses the
//! node, never the other way round.

pub mod auth;
pub mod error;
pub mod forwarded_writes;
pub mod framing;
mod handback;
pub mod lists;
pub mod objects;
pub mod passthrough;
pub mod purge;
mod query;
pub mod writes;

use std::sync::Arc;

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};

use crate::access;
use crate::fanout::Fanout;
use crate::node::Node;
use error::read_only;

pub use lists::ListRoute;
pub use objects::byte_span;
pub use purge::PurgeRoute;

/// The operations s3s parses for us: object reads. Writes reach it only where
/// the gateway takes none (read-only); where it does, [`Routes`] passes every
/// write on as it came ([`forwarded_writes`]).
pub struct NodeApi {
    pub node: Arc<Node>,
    /// Where invalidations go on to other nodes (a node with a `[cluster]`).
    pub fanout: Option<Arc<Fanout>>,
}

#[async_trait::async_trait]
impl S3 for NodeApi {
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        objects::get(self, req).await
    }
    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        objects::head(self, req).await
    }
    async fn put_object(
        &self,
        _: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        Err(read_only())
    }
    async fn delete_object(
        &self,
        _: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        Err(read_only())
    }
    async fn delete_objects(
        &self,
        _: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        Err(read_only())
    }
    async fn create_multipart_upload(
        &self,
        _: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        Err(read_only())
    }
    async fn upload_part(
        &self,
        _: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        Err(read_only())
    }
    async fn complete_multipart_upload(
        &self,
        _: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        Err(read_only())
    }
    async fn abort_multipart_upload(
        &self,
        _: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        Err(read_only())
    }
    async fn copy_object(
        &self,
        _: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        Err(read_only())
    }
    async fn create_bucket(
        &self,
        _: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        Err(read_only())
    }
    async fn delete_bucket(
        &self,
        _: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        Err(read_only())
    }
}

/// The requests s3s hands to us whole instead of to [`NodeApi`]: purges, and the
/// reads passed through to the origin (listings, bucket reads, uncached objects).
pub struct Routes {
    pub purge: PurgeRoute,
    pub lists: ListRoute,
    pub objects: passthrough::ObjectRoute,
    /// A gateway's writes passed on as asked (copies, bucket writes).
    pub writes: Option<forwarded_writes::WriteRoute>,
    /// Who may do what; `None` when authentication is off.
    pub gate: Option<auth::Gate>,
    /// Base domains of virtual-hosted requests (`bucket.DOMAIN/key`).
    pub domains: Vec<String>,
}

impl Routes {
    /// What a request to one of the routes asks. A purge's targets are checked
    /// by the purge itself (they may be in its body); here only its rates.
    fn asks(&self, which: Option<&Matched>, req: &S3Request<s3s::Body>) -> access::Request {
        let (bucket, key) =
            passthrough::address(&req.uri, &req.headers, &self.domains).unwrap_or_default();
        let query = query::query_pairs(&req.uri);
        match which {
            Some(Matched::Purge) => access::Request::All(vec![]),
            Some(Matched::Object) => access::classify::object_read(&bucket, &key, &query),
            Some(Matched::Write) => {
                let src = req
                    .headers
                    .get("x-amz-copy-source")
                    .and_then(|v| v.to_str().ok());
                access::classify::passed_write(&bucket, &key, src)
            }
            _ => access::classify::bucket_read(&req.method, &bucket, &query),
        }
    }
}

/// Which route matched, noted on the request between match and call.
#[derive(Clone, Copy)]
enum Matched {
    Purge,
    List,
    Object,
    Write,
}

#[async_trait::async_trait]
impl s3s::route::S3Route for Routes {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        ext: &mut http::Extensions,
    ) -> bool {
        let which = if self.purge.is_match(method, uri, headers, ext) {
            Matched::Purge
        } else if self.lists.is_match(method, uri, headers, ext) {
            Matched::List
        } else if self.objects.is_match(method, uri, headers, ext) {
            Matched::Object
        } else if self
            .writes
            .as_ref()
            .is_some_and(|w| w.is_match(method, uri, headers, ext))
        {
            Matched::Write
        } else {
            return false;
        };
        ext.insert(which);
        true
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        let r = match (req.extensions.get::<Matched>(), &self.writes) {
            (Some(Matched::Purge), _) => self.purge.check_access(req).await,
            (Some(Matched::Object), _) => self.objects.check_access(req).await,
            (Some(Matched::Write), Some(w)) => w.check_access(req).await,
            _ => self.lists.check_access(req).await,
        };
        if r.is_err() {
            crate::access::trace::refused("AccessDenied");
        }
        r?;
        let Some(gate) = &self.gate else {
            return Ok(());
        };
        let key = req.credentials.as_ref().map(|c| c.access_key.clone());
        let which = req.extensions.get::<Matched>().copied();
        let many = forwarded_writes::kind(&req.method, &req.uri, &req.headers, &self.domains)
            == Some(forwarded_writes::Kind::DeleteMany);
        let asks = match which {
            // Its keys are in its body: each is checked before it runs.
            Some(Matched::Write) if many => {
                let (bucket, _) =
                    passthrough::address(&req.uri, &req.headers, &self.domains).unwrap_or_default();
                forwarded_writes::delete_many_asks(req, &bucket).await?
            }
            _ => self.asks(which.as_ref(), req),
        };
        gate.admit(key.as_deref(), &asks)
    }

    async fn call(&self, req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        match (req.extensions.get::<Matched>(), &self.writes) {
            (Some(Matched::Purge), _) => self.purge.call(req).await,
            (Some(Matched::Object), _) => self.objects.call(req).await,
            (Some(Matched::Write), Some(w)) => w.call(req).await,
            _ => self.lists.call(req).await,
        }
    }
}
