//! The AWS services the credential chain talks to, on loopback: instance metadata
//! (IMDSv2), container credentials (ECS, EKS Pod Identity), STS
//! (`AssumeRoleWithWebIdentity`, `AssumeRole`) and a `credential_process` source.
//! Every set of credentials it hands out is registered with the test origin as a
//! temporary key (key, secret, session token, expiry), so the origin accepts
//! exactly what was issued and refuses it once expired.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::Origin;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// The role and account the mock's credentials belong to.
pub const ROLE_ARN: &str = "arn:aws:iam::123456789012:role/shoal-reader";
const IMDS_TOKEN: &str = "imds-session-token-0123";
/// What the container credentials endpoint wants in `Authorization`.
pub const CONTAINER_TOKEN: &str = "container-authorization-token";

/// One issued set of credentials.
#[derive(Clone, Debug)]
pub struct Issued {
    pub access_key: String,
    pub secret: String,
    pub token: String,
    pub expires: SystemTime,
}

struct State {
    keys: crate::Keys,
    policy: crate::Policy,
    lifetime: Mutex<Duration>,
    counter: AtomicU64,
    /// Requests by what they asked for ("imds-token", "imds-role", "imds-creds",
    /// "container", "sts-web-identity", "sts-assume-role", "process").
    hits: Mutex<HashMap<String, u64>>,
    issued: Mutex<Vec<Issued>>,
    /// The web identity token STS must be shown.
    web_identity_token: Mutex<Option<String>>,
    /// Tokens STS accepts for a given role only, and the buckets that role may use.
    identities: Mutex<HashMap<String, (String, Vec<String>)>>,
    /// STS's AssumeRole must be signed with this access key (the source profile).
    assume_role_signer: Mutex<Option<String>>,
}

/// The mock services, on one loopback port.
pub struct AwsMock {
    pub addr: std::net::SocketAddr,
    scheme: &'static str,
    state: Arc<State>,
    _task: tokio::task::JoinHandle<()>,
}

impl AwsMock {
    /// Serves on 127.0.0.1; credentials it issues work on `origin` for `lifetime`.
    pub async fn start(origin: &Origin, lifetime: Duration) -> AwsMock {
        Self::serve(origin, lifetime, None).await
    }

    /// [`Self::start`] over TLS with `cert` (PEM chain and key): `https://` URLs.
    pub async fn start_tls(origin: &Origin, lifetime: Duration, cert: (String, String)) -> AwsMock {
        let tls = crate::tls_acceptor(&cert.0, &cert.1).expect("a usable certificate");
        Self::serve(origin, lifetime, Some(tls)).await
    }

    async fn serve(
        origin: &Origin,
        lifetime: Duration,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> AwsMock {
        let tls_on = tls.is_some();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            keys: origin.keys.clone(),
            policy: origin.policy.clone(),
            lifetime: Mutex::new(lifetime),
            counter: AtomicU64::new(0),
            hits: Mutex::new(HashMap::new()),
            issued: Mutex::new(Vec::new()),
            web_identity_token: Mutex::new(None),
            identities: Mutex::new(HashMap::new()),
            assume_role_signer: Mutex::new(None),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let (st, tls) = (st.clone(), tls.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| answer(st.clone(), req));
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        Some(tls) => match tls.accept(sock).await {
                            Ok(s) => http.serve_connection(TokioIo::new(s), svc).await,
                            Err(_) => return,
                        },
                        None => http.serve_connection(TokioIo::new(sock), svc).await,
                    };
                });
            }
        });
        AwsMock {
            addr,
            scheme: if tls_on { "https" } else { "http" },
            state,
            _task: task,
        }
    }

    /// `http://127.0.0.1:PORT` (`https://` over TLS)
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// How many requests asked for `what` (see [`State::hits`]).
    pub fn hits(&self, what: &str) -> u64 {
        self.state
            .hits
            .lock()
            .unwrap()
            .get(what)
            .copied()
            .unwrap_or(0)
    }

    /// Every set of credentials handed out so far.
    pub fn issued(&self) -> Vec<Issued> {
        self.state.issued.lock().unwrap().clone()
    }

    pub fn set_lifetime(&self, d: Duration) {
        *self.state.lifetime.lock().unwrap() = d;
    }

    /// STS accepts `token` for `role` (and only that role), and the credentials
    /// it issues for it may use only `buckets` on the origin: a pod's own
    /// service-account token and role.
    pub fn grant_web_identity(&self, token: &str, role: &str, buckets: &[&str]) {
        self.state.identities.lock().unwrap().insert(
            token.to_owned(),
            (
                role.to_owned(),
                buckets.iter().map(|b| b.to_string()).collect(),
            ),
        );
    }

    /// STS no longer takes `token` (a rotated token whose successor is out).
    pub fn revoke_web_identity(&self, token: &str) {
        self.state.identities.lock().unwrap().remove(token);
    }

    pub fn expect_web_identity_token(&self, t: &str) {
        *self.state.web_identity_token.lock().unwrap() = Some(t.to_owned());
    }

    pub fn expect_assume_role_signed_by(&self, access_key: &str) {
        *self.state.assume_role_signer.lock().unwrap() = Some(access_key.to_owned());
    }

    /// The environment that points the SDK's providers here (and nowhere else).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT".into(), self.url()),
            ("AWS_ENDPOINT_URL_STS".into(), self.url()),
        ]
    }
}

/// RFC 3339, as AWS writes expiry times.
fn rfc3339(t: SystemTime) -> String {
    let t: time::OffsetDateTime = t.into();
    t.format(&time::format_description::well_known::Rfc3339)
        .expect("a time formats")
}

impl State {
    fn hit(&self, what: &str) {
        *self
            .hits
            .lock()
            .unwrap()
            .entry(what.to_owned())
            .or_default() += 1;
    }

    fn issue(&self) -> Issued {
        self.issue_scoped(None)
    }

    /// Issues credentials; `buckets` limits what they may use on the origin.
    fn issue_scoped(&self, buckets: Option<&[String]>) -> Issued {
        let n = self.counter.fetch_add(1, Relaxed);
        let salt: u32 = rand::random();
        let i = Issued {
            access_key: format!("ASIAMOCK{n:04}{salt:08X}"),
            secret: format!("mock-secret-{n}-{salt:08x}"),
            token: format!("mock-session-token-{n}-{salt:08x}"),
            expires: SystemTime::now() + *self.lifetime.lock().unwrap(),
        };
        self.keys.add(&i.access_key, &i.secret);
        self.policy
            .add_session(&i.access_key, &i.token, Some(i.expires));
        if let Some(b) = buckets {
            self.policy.scope_key(&i.access_key, b);
        }
        self.issued.lock().unwrap().push(i.clone());
        i
    }
}

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(body.into()))
        .unwrap()
}

async fn answer(
    st: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let imds_ok = header("x-aws-ec2-metadata-token").as_deref() == Some(IMDS_TOKEN);
    let auth = header("authorization");
    Ok(match (method.as_str(), path.as_str()) {
        ("PUT", "/latest/api/token") => {
            st.hit("imds-token");
            match header("x-aws-ec2-metadata-token-ttl-seconds") {
                None => reply(StatusCode::BAD_REQUEST, ""),
                Some(ttl) => {
                    let mut r = reply(StatusCode::OK, IMDS_TOKEN);
                    r.headers_mut()
                        .insert("x-aws-ec2-metadata-token-ttl-seconds", ttl.parse().unwrap());
                    r
                }
            }
        }
        ("GET", p) if p.starts_with("/latest/") && !imds_ok => reply(StatusCode::UNAUTHORIZED, ""),
        ("GET", "/latest/meta-data/iam/security-credentials/") => {
            st.hit("imds-role");
            reply(StatusCode::OK, "shoal-reader")
        }
        ("GET", "/latest/meta-data/iam/security-credentials/shoal-reader") => {
            st.hit("imds-creds");
            let i = st.issue();
            reply(
                StatusCode::OK,
                format!(
                    r#"{{"Code":"Success","LastUpdated":"{}","Type":"AWS-HMAC","AccessKeyId":"{}","SecretAccessKey":"{}","Token":"{}","Expiration":"{}"}}"#,
                    rfc3339(SystemTime::now()),
                    i.access_key,
                    i.secret,
                    i.token,
                    rfc3339(i.expires)
                ),
            )
        }
        ("GET", "/latest/meta-data/placement/region") => {
            st.hit("imds-region");
            reply(StatusCode::OK, "eu-west-3")
        }
        ("GET", "/container-credentials") => {
            st.hit("container");
            if auth.as_deref() != Some(CONTAINER_TOKEN) {
                reply(StatusCode::UNAUTHORIZED, "")
            } else {
                let i = st.issue();
                reply(
                    StatusCode::OK,
                    format!(
                        r#"{{"AccessKeyId":"{}","SecretAccessKey":"{}","Token":"{}","Expiration":"{}","RoleArn":"{ROLE_ARN}"}}"#,
                        i.access_key,
                        i.secret,
                        i.token,
                        rfc3339(i.expires)
                    ),
                )
            }
        }
        ("GET", "/process") => {
            st.hit("process");
            let i = st.issue();
            reply(
                StatusCode::OK,
                format!(
                    r#"{{"Version":1,"AccessKeyId":"{}","SecretAccessKey":"{}","SessionToken":"{}","Expiration":"{}"}}"#,
                    i.access_key,
                    i.secret,
                    i.token,
                    rfc3339(i.expires)
                ),
            )
        }
        ("POST", "/") => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return Ok(reply(StatusCode::BAD_REQUEST, "")),
            };
            let form: HashMap<String, String> =
                url::form_urlencoded::parse(&body).into_owned().collect();
            sts(&st, &form, auth.as_deref())
        }
        _ => reply(StatusCode::NOT_FOUND, ""),
    })
}

fn sts(st: &State, form: &HashMap<String, String>, auth: Option<&str>) -> Response<Full<Bytes>> {
    let action = form.get("Action").map(String::as_str).unwrap_or("");
    let mut scoped: Option<Vec<String>> = None;
    let refuse = |code: &str, msg: &str| {
        reply(
            StatusCode::FORBIDDEN,
            format!(
                "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{msg}</Message></Error><RequestId>1</RequestId></ErrorResponse>"
            ),
        )
    };
    let op = match action {
        "AssumeRoleWithWebIdentity" => {
            st.hit("sts-web-identity");
            let token = form.get("WebIdentityToken").cloned().unwrap_or_default();
            let granted = st.identities.lock().unwrap().get(&token).cloned();
            if let Some((role, buckets)) = granted {
                if form.get("RoleArn") != Some(&role) {
                    return refuse(
                        "AccessDenied",
                        "Not authorized to perform sts:AssumeRoleWithWebIdentity",
                    );
                }
                scoped = Some(buckets);
            }
            let want = st.web_identity_token.lock().unwrap().clone();
            if scoped.is_none() && (want.is_none() || Some(&token) != want.as_ref()) {
                return refuse(
                    "InvalidIdentityToken",
                    "The web identity token is not the one expected",
                );
            }
            "AssumeRoleWithWebIdentity"
        }
        "AssumeRole" => {
            st.hit("sts-assume-role");
            let want = st.assume_role_signer.lock().unwrap().clone();
            let signed_by = auth
                .and_then(|a| a.split("Credential=").nth(1))
                .and_then(|c| c.split('/').next());
            if want.is_none() || signed_by != want.as_deref() {
                return refuse(
                    "AccessDenied",
                    "AssumeRole was not signed by the source profile",
                );
            }
            "AssumeRole"
        }
        _ => return refuse("InvalidAction", "unknown action"),
    };
    if scoped.is_none() && form.get("RoleArn").map(String::as_str) != Some(ROLE_ARN) {
        return refuse("AccessDenied", "no such role");
    }
    let i = st.issue_scoped(scoped.as_deref());
    let session = form.get("RoleSessionName").cloned().unwrap_or_default();
    reply(
        StatusCode::OK,
        format!(
            "<{op}Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><{op}Result>\
             <Credentials><AccessKeyId>{}</AccessKeyId><SecretAccessKey>{}</SecretAccessKey>\
             <SessionToken>{}</SessionToken><Expiration>{}</Expiration></Credentials>\
             <AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/shoal-reader/{session}</Arn>\
             <AssumedRoleId>AROAMOCK:{session}</AssumedRoleId></AssumedRoleUser>\
             </{op}Result><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></{op}Response>",
            i.access_key,
            i.secret,
            i.token,
            rfc3339(i.expires)
        ),
    )
}
