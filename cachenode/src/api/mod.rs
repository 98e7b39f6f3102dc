//! The S3 operations a node answers, on `s3s` (request parsing, SigV4 checks, XML).
//!
//! One file per operation family: [`objects`] (GET, HEAD, through the node's read
//! path, or [`passthrough`] for keys the rules leave uncached), [`lists`]
//! (listings and bucket checks, passed to the origin), [`writes`] (a gateway's
//! PUT, multipart and DELETE), [`purge`] (the purge route). Errors become S3 errors
//! in one place, [`error`]. This layer uses the node, never the other way round.

pub mod error;
pub mod lists;
pub mod objects;
pub mod passthrough;
pub mod purge;
pub mod writes;

use std::sync::Arc;

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};

use crate::fanout::Fanout;
use crate::node::Node;
use error::{check_key, read_only};

pub use objects::byte_span;
pub use purge::PurgeRoute;

pub struct NodeApi {
    pub node: Arc<Node>,
    /// Where invalidations go on to other nodes (a node with a `[cluster]`).
    pub fanout: Option<Arc<Fanout>>,
    pub writes: Option<writes::Writes>,
}

impl NodeApi {
    fn writes(&self) -> S3Result<&writes::Writes> {
        self.writes.as_ref().ok_or_else(read_only)
    }
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
    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        lists::list_v2(self, req).await
    }
    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        lists::list_v1(self, req).await
    }
    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        lists::list_buckets(self).await
    }
    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        lists::head_bucket(self, req).await
    }
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        check_key(&req.input.key)?;
        self.writes()?.put(req.input).await
    }
    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        check_key(&req.input.key)?;
        self.writes()?.delete(req.input).await
    }
    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.writes()?.delete_many(req.input).await
    }
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        check_key(&req.input.key)?;
        self.writes()?.create_multipart(req.input).await
    }
    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        check_key(&req.input.key)?;
        self.writes()?.upload_part(req.input).await
    }
    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        check_key(&req.input.key)?;
        self.writes()?.complete_multipart(req.input).await
    }
    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        check_key(&req.input.key)?;
        self.writes()?.abort_multipart(req.input).await
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
