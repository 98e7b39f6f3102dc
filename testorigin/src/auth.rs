//! Who may use the origin: SigV4 keys, answered as S3 answers an unknown key.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};

/// Access keys and their secrets; keys can be added while the origin runs. Clones
/// share the keys.
#[derive(Default, Clone)]
pub struct Keys {
    map: Arc<RwLock<HashMap<String, SecretKey>>>,
}

impl Keys {
    pub fn add(&self, access_key: &str, secret_key: &str) {
        self.map
            .write()
            .unwrap()
            .insert(access_key.to_owned(), secret_key.into());
    }
}

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.map
            .read()
            .unwrap()
            .get(access_key)
            .cloned()
            .ok_or_else(|| {
                s3_error!(
                    InvalidAccessKeyId,
                    "The AWS Access Key Id you provided does not exist in our records."
                )
            })
    }
}
