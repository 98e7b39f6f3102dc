//! Who may use the node: the SigV4 keys of `[auth]`, an unknown one answered as S3
//! answers it.

use std::collections::HashMap;

use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};
use shoal::config::Credentials;

pub struct NodeAuth(HashMap<String, SecretKey>);

impl NodeAuth {
    pub fn new(keys: &[Credentials]) -> NodeAuth {
        NodeAuth(
            keys.iter()
                .map(|k| (k.access_key_id.clone(), k.secret_access_key.clone().into()))
                .collect(),
        )
    }
}

#[async_trait::async_trait]
impl S3Auth for NodeAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0.get(access_key).cloned().ok_or_else(|| {
            s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )
        })
    }
}
