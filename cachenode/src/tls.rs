//! The node's TLS server side (rustls): a certificate chain and key from PEM files.

use std::sync::Arc;

pub fn acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    use std::io::BufReader;
    let certs = rustls_pemfile::certs(&mut BufReader::new(
        std::fs::File::open(cert).map_err(|e| format!("tls.cert {}: {e}", cert.display()))?,
    ))
    .collect::<Result<Vec<_>, _>>()
    .map_err(|e| format!("tls.cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls.cert {}: no certificate in the file",
            cert.display()
        ));
    }
    let key = rustls_pemfile::private_key(&mut BufReader::new(
        std::fs::File::open(key).map_err(|e| format!("tls.key {}: {e}", key.display()))?,
    ))
    .map_err(|e| format!("tls.key {}: {e}", key.display()))?
    .ok_or_else(|| format!("tls.key {}: no private key in the file", key.display()))?;
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("tls: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
