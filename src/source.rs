//! The seam every tier is built on: a source of object bytes.
//!
//! The origin client implements it; later, a cache node, the cluster reader and the
//! tests' fault injectors do too, so tiers compose without knowing what is below.

use futures_util::future::BoxFuture;

use crate::s3::{GetObject, GetResponse, ObjectMeta, S3Client, S3Error};

pub trait ObjectSource: Send + Sync {
    /// GET of an object or a range of it, honouring `If-Match`.
    fn get<'a>(&'a self, req: &'a GetObject) -> BoxFuture<'a, Result<GetResponse, S3Error>>;
    /// HEAD of an object.
    fn head<'a>(&'a self, req: &'a GetObject) -> BoxFuture<'a, Result<ObjectMeta, S3Error>>;
}

impl ObjectSource for S3Client {
    fn get<'a>(&'a self, req: &'a GetObject) -> BoxFuture<'a, Result<GetResponse, S3Error>> {
        Box::pin(self.get_object(req))
    }
    fn head<'a>(&'a self, req: &'a GetObject) -> BoxFuture<'a, Result<ObjectMeta, S3Error>> {
        Box::pin(self.head_object(req))
    }
}
