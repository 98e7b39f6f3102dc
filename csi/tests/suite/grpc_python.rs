//! A CSI client in Python (grpc-python) over the plugin's Unix socket with its
//! default options: it sends the socket's path, percent-encoded, as the
//! `:authority`, which the plugin's HTTP/2 server once reset every stream for.

use prost::Message;
use shoal_csi::proto;

use crate::common::*;

/// Calls GetPluginInfo and NodeGetCapabilities on the socket in `argv[1]`,
/// through each way of naming it, and prints the answers' bytes in hex.
const CLIENT: &str = r#"
import grpc, sys
path = sys.argv[1]
for target in ("unix://" + path, "unix:" + path):
    with grpc.insecure_channel(target) as ch:
        info = ch.unary_unary("/csi.v1.Identity/GetPluginInfo")(b"", timeout=10)
        caps = ch.unary_unary("/csi.v1.Node/NodeGetCapabilities")(b"", timeout=10)
        print(info.hex(), caps.hex())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_python_client_is_answered_over_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = Plugin::start(dir.path(), &dir.path().join("none.toml"), &[], &[]);
    let socket = plugin.socket.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", CLIENT])
            .arg(&socket)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "grpc-python's calls failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "both targets answered: {stdout}");
    for line in lines {
        let (info, caps) = line.split_once(' ').unwrap();
        let info = proto::GetPluginInfoResponse::decode(&hex(info)[..]).unwrap();
        assert_eq!(info.name, "csi.shoal");
        let caps = proto::NodeGetCapabilitiesResponse::decode(&hex(caps)[..]).unwrap();
        assert!(!caps.capabilities.is_empty(), "{caps:?}");
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
