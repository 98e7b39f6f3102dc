use shoal::store::s3::S3Client;
use shoal_testorigin::{Origin, OriginOptions};

/// The bucket every test origin starts with.
pub const BUCKET: &str = "shoal-test";

/// The real S3 origin, in process on 127.0.0.1, with [`BUCKET`].
pub async fn origin() -> Origin {
    Origin::start(OriginOptions::default())
        .await
        .expect("start the test origin")
}

/// A client of `o` with its own credentials.
pub fn origin_client(o: &Origin) -> S3Client {
    let opts = &o.options;
    S3Client::new(super::client_options(
        &o.endpoint(),
        &opts.region,
        &opts.access_key,
        &opts.secret_key,
        true,
    ))
    .expect("client")
}
