//! A private certificate authority, as an organisation runs one: its root, and
//! server certificates for 127.0.0.1 signed by it.

pub struct PrivateCa {
    key: rcgen::KeyPair,
    cert: rcgen::Certificate,
}

impl PrivateCa {
    pub fn new(name: &str) -> PrivateCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        PrivateCa { key, cert }
    }

    /// The root certificate, PEM: what a `ca_bundle` file holds.
    pub fn root_pem(&self) -> String {
        self.cert.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost: (chain PEM, key PEM).
    pub fn server_cert(&self) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(std::net::IpAddr::from([
                127, 0, 0, 1,
            ])));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
