//! The store's refusals as S3's errors, in one place for every operation.

use s3s::s3_error;

use crate::store::{Missing, UploadError};

pub fn missing(m: Missing) -> s3s::S3Error {
    match m {
        Missing::Bucket => s3_error!(NoSuchBucket),
        Missing::Key => s3_error!(NoSuchKey),
    }
}

pub fn upload_error(e: UploadError) -> s3s::S3Error {
    match e {
        UploadError::NoSuchUpload => s3_error!(NoSuchUpload),
        UploadError::InvalidPart(n) => {
            s3_error!(InvalidPart, "part {n} is missing or its ETag differs")
        }
        UploadError::InvalidPartOrder => s3_error!(InvalidPartOrder),
        UploadError::Missing(m) => missing(m),
    }
}
