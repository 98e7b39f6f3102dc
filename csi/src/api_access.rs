//! The plugin's access to the Kubernetes API, lent to the mounts it starts whose
//! config finds the nodes through a Service's EndpointSlices
//! (`[cluster] kubernetes`). A mount the host's systemd runs cannot read the
//! token the plugin's pod is given, so the plugin keeps a copy of its token
//! (and CA) in its state directory, refreshed as kubelet rotates it, and
//! writes the API's address and those paths into the mount's copy of its config
//! (`kubernetes_api`, `kubernetes_token_file`, `kubernetes_ca_file`), unless
//! the config names its own. The mounts list and watch with the plugin's
//! service account: its role must allow that (the manifests' RBAC).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::CsiError;
use crate::kube::KubeApi;
use crate::tokens::write_token;

/// How often the token's copy is refreshed: a projected token is rotated at
/// 80% of its life (an hour by default), and a mount reads it at each watch.
const REFRESH: Duration = Duration::from_secs(60);

pub struct ApiAccess {
    api: KubeApi,
    dir: PathBuf,
}

impl ApiAccess {
    /// Access kept under `dir`, refreshed in the background while it is held.
    pub fn start(api: KubeApi, dir: PathBuf) -> Result<Arc<ApiAccess>, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        restrict(&dir, 0o700).map_err(|e| format!("{}: {e}", dir.display()))?;
        let access = Arc::new(ApiAccess { api, dir });
        // Nothing to copy outside a cluster: a mount then has no API to reach.
        let _ = access.sync();
        let weak: Weak<ApiAccess> = Arc::downgrade(&access);
        std::thread::Builder::new()
            .name("api-token-copy".into())
            .spawn(move || loop {
                std::thread::sleep(REFRESH);
                let Some(a) = weak.upgrade() else { return };
                if let Err(e) = a.sync() {
                    tracing::warn!("cannot refresh the mounts' copy of the API token: {e}");
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(access)
    }

    fn token(&self) -> PathBuf {
        self.dir.join("token")
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Copies the token and the CA (when there is one) next to the mounts,
    /// each written whole, mode 0600.
    fn sync(&self) -> std::io::Result<()> {
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        write_token(&self.token(), &read(&self.api.token_file)?, None)?;
        if let Some(ca) = self.api.ca_file.as_ref().filter(|c| c.exists()) {
            write_token(&self.ca(), &read(ca)?, None)?;
        }
        Ok(())
    }

    /// Gives the mount config at `config` (the volume's copy) the plugin's API
    /// access, if it finds its nodes through the API; any key it sets itself is
    /// kept.
    pub fn lend(&self, config: &Path) -> Result<(), CsiError> {
        let bad = |e: String| CsiError::Invalid(format!("volume attribute config: {e}"));
        let text = std::fs::read_to_string(config)
            .map_err(|e| bad(format!("{}: {e}", config.display())))?;
        let mut doc: toml::Table = text
            .parse()
            .map_err(|e| bad(format!("{}: {e}", config.display())))?;
        let Some(cluster) = doc.get_mut("cluster").and_then(|c| c.as_table_mut()) else {
            return Ok(());
        };
        if !cluster.contains_key("kubernetes") {
            return Ok(());
        }
        self.sync().map_err(|e| {
            CsiError::Internal(format!(
                "the volume's config finds its nodes through the Kubernetes API, but the plugin cannot copy its token: {e}"
            ))
        })?;
        let mut set = |key: &str, value: String| {
            cluster
                .entry(key)
                .or_insert_with(|| toml::Value::String(value));
        };
        set("kubernetes_api", self.api.url.clone());
        set("kubernetes_token_file", self.token().display().to_string());
        if self.ca().exists() {
            set("kubernetes_ca_file", self.ca().display().to_string());
        }
        std::fs::write(config, doc.to_string())
            .map_err(|e| CsiError::Internal(format!("{}: {e}", config.display())))
    }
}

fn restrict(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubernetes_config_gets_the_plugins_access_and_keeps_its_own_keys() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("sa-token");
        std::fs::write(&token, "t1").unwrap();
        let ca = dir.path().join("sa-ca.crt");
        std::fs::write(&ca, "pem").unwrap();
        let access = ApiAccess::start(
            KubeApi {
                url: "https://10.96.0.1:443".into(),
                token_file: token.clone(),
                ca_file: Some(ca),
            },
            dir.path().join("kube"),
        )
        .unwrap();
        let cfg = dir.path().join("mount.toml");
        std::fs::write(
            &cfg,
            "[origin]\nregion = \"x\"\n[cluster]\nkubernetes = \"shoal/shoal-node\"\nkubernetes_ca_file = \"/mine.crt\"\n",
        )
        .unwrap();
        std::fs::write(&token, "t2").unwrap();
        access.lend(&cfg).unwrap();
        let doc: toml::Table = std::fs::read_to_string(&cfg).unwrap().parse().unwrap();
        let c = doc["cluster"].as_table().unwrap();
        assert_eq!(c["kubernetes_api"].as_str(), Some("https://10.96.0.1:443"));
        let copied = c["kubernetes_token_file"].as_str().unwrap();
        // The copy is the token as it is now, readable by its owner only.
        assert_eq!(std::fs::read_to_string(copied).unwrap(), "t2");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(copied).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(c["kubernetes_ca_file"].as_str(), Some("/mine.crt"));
        assert_eq!(doc["origin"]["region"].as_str(), Some("x"));
        // The result is a config the mount accepts.
        let parsed = shoal::config::Config::load(&cfg).unwrap();
        assert!(matches!(
            parsed.cluster().unwrap().membership,
            shoal::config::Membership::Kubernetes(_)
        ));

        // A config with a node list is left as it was.
        let text = "[cluster]\nnodes = [\"127.0.0.1:9000\"]\n";
        std::fs::write(&cfg, text).unwrap();
        access.lend(&cfg).unwrap();
        assert_eq!(std::fs::read_to_string(&cfg).unwrap(), text);
    }

    #[test]
    fn no_token_to_lend_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let access = ApiAccess::start(
            KubeApi {
                url: "https://10.96.0.1:443".into(),
                token_file: dir.path().join("missing"),
                ca_file: None,
            },
            dir.path().join("kube"),
        )
        .unwrap();
        let cfg = dir.path().join("mount.toml");
        std::fs::write(&cfg, "[cluster]\nkubernetes = \"a/b\"\n").unwrap();
        let e = access.lend(&cfg).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("token"), "{e}");
    }
}
