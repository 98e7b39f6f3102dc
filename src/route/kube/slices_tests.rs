use super::*;

fn svc(port: Option<&str>) -> KubeService {
    KubeService {
        namespace: "shoal".into(),
        service: "shoal-node".into(),
        port: port.map(str::to_owned),
        api: "http://127.0.0.1:1".into(),
        token_file: "/nonexistent".into(),
        ca_file: None,
    }
}

#[test]
fn ready_endpoints_on_the_named_port_with_their_zones() {
    let s: Slice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "s1", "resourceVersion": "7"},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "zone": "a"},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false}, "zone": "a"},
            {"addresses": ["10.0.0.3"], "zone": "b"},
            {"addresses": ["fd00::4"], "conditions": {"ready": true}},
            {"addresses": ["node-5.example.com"], "conditions": {"ready": true}}
        ],
        "ports": [{"name": "metrics", "port": 9180}, {"name": "s3", "port": 9000}]
    }))
    .unwrap();
    let ids = |v: Vec<NodeSpec>| -> Vec<(String, Option<String>)> {
        v.into_iter().map(|n| (n.id, n.zone)).collect()
    };
    assert_eq!(
        ids(members(&svc(Some("s3")), &s)),
        vec![
            ("10.0.0.1:9000".into(), Some("a".into())),
            ("10.0.0.3:9000".into(), Some("b".into())),
            ("[fd00::4]:9000".into(), None),
        ]
    );
    // No port name: the first port.
    assert_eq!(members(&svc(None), &s)[0].id, "10.0.0.1:9180");
    // A port the slice does not have: nobody.
    assert!(members(&svc(Some("grpc")), &s).is_empty());
}

#[test]
fn a_watch_adds_changes_and_deletes_slices_and_ends_on_an_error() {
    let svc = svc(Some("s3"));
    let (mut slices, mut v) = Slices::from_list(
        &svc,
        br#"{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"},
            "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"name": "s3", "port": 9000}]}]}"#,
    )
    .unwrap();
    assert_eq!(v, "5");
    let ids = |s: &Slices| s.nodes().into_iter().map(|n| n.id).collect::<Vec<_>>();
    assert_eq!(ids(&slices), ["10.0.0.1:9000"]);
    let added = br#"{"type": "ADDED", "object": {"metadata": {"name": "b", "resourceVersion": "6"},
        "endpoints": [{"addresses": ["10.0.0.2"], "conditions": {"ready": true}}],
        "ports": [{"name": "s3", "port": 9000}]}}"#;
    assert!(slices.apply_event(&svc, added, &mut v).unwrap());
    assert_eq!(
        (ids(&slices), v.as_str()),
        (
            vec!["10.0.0.1:9000".to_owned(), "10.0.0.2:9000".to_owned()],
            "6"
        )
    );
    let bookmark = br#"{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}"#;
    assert!(!slices.apply_event(&svc, bookmark, &mut v).unwrap());
    assert_eq!(v, "9");
    let deleted =
        br#"{"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "10"}}}"#;
    assert!(slices.apply_event(&svc, deleted, &mut v).unwrap());
    assert_eq!(ids(&slices), ["10.0.0.2:9000"]);
    assert!(!slices.apply_event(&svc, b"  \r", &mut v).unwrap());
    let gone = br#"{"type": "ERROR", "object": {"code": 410, "message": "too old"}}"#;
    assert!(matches!(
        slices.apply_event(&svc, gone, &mut v),
        Err(WatchError::Expired)
    ));
    let denied = br#"{"type": "ERROR", "object": {"code": 403, "message": "forbidden"}}"#;
    assert!(matches!(
        slices.apply_event(&svc, denied, &mut v),
        Err(WatchError::Status { status: 403, .. })
    ));
    for bad in [
        &b"{"[..],
        b"[]",
        br#"{"type": "ADDED", "object": {"endpoints": 3}}"#,
    ] {
        assert!(
            matches!(
                slices.apply_event(&svc, bad, &mut v),
                Err(WatchError::Bad(_))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        ids(&slices),
        ["10.0.0.2:9000"],
        "a bad line changed nothing"
    );
}

fn ids(s: &Slices) -> Vec<(String, Option<String>)> {
    s.nodes().into_iter().map(|n| (n.id, n.zone)).collect()
}

/// The list kubernetes/kubernetes#135968 shows for a Service scaled to no
/// pod: the placeholder slice, its endpoints and ports `null`.
#[test]
fn a_service_with_no_pod_as_the_api_server_sends_it() {
    let svc = svc(Some("s3"));
    let (slices, v) = Slices::from_list(
        &svc,
        br#"{"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
            "metadata": {"resourceVersion": "828044619"},
            "items": [{"metadata": {"name": "shoal-node-t786l", "generateName": "shoal-node-",
                "namespace": "shoal", "resourceVersion": "828044610", "generation": 4,
                "creationTimestamp": "2025-12-29T10:00:00Z",
                "labels": {"kubernetes.io/service-name": "shoal-node",
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "shoal-node",
                    "uid": "8a3c", "controller": true, "blockOwnerDeletion": true}]},
                "addressType": "IPv4", "endpoints": null, "ports": null}]}"#,
    )
    .unwrap();
    assert_eq!(v, "828044619");
    assert!(ids(&slices).is_empty());

    // The same Service with a pod, then its last pod gone: the controller
    // writes the placeholder over the slice.
    let (mut slices, mut v) = Slices::from_list(
        &svc,
        br#"{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true, "serving": true,
                "terminating": false}, "targetRef": {"kind": "Pod", "name": "p"}, "nodeName": "n1",
                "zone": "z1"}],
            "ports": [{"name": "s3", "protocol": "TCP", "port": 9000}]}]}"#,
    )
    .unwrap();
    assert_eq!(ids(&slices), [("10.0.0.1:9000".into(), Some("z1".into()))]);
    let gone = br#"{"type": "MODIFIED", "object": {"kind": "EndpointSlice",
        "metadata": {"name": "a", "resourceVersion": "6"}, "addressType": "IPv4",
        "endpoints": null, "ports": null}}"#;
    assert!(slices.apply_event(&svc, gone, &mut v).unwrap());
    assert_eq!((ids(&slices), v.as_str()), (vec![], "6"));
    // A bookmark as the API server writes it: an empty slice.
    let bookmark = br#"{"type": "BOOKMARK", "object": {"kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1", "metadata": {"resourceVersion": "7",
        "creationTimestamp": null}, "addressType": "", "endpoints": null, "ports": null}}"#;
    assert!(!slices.apply_event(&svc, bookmark, &mut v).unwrap());
    assert_eq!(v, "7");
}

/// Each condition unset, null or set: unset `ready` and `serving` are true,
/// unset `terminating` false (the API's reading); a member must be all three.
#[test]
fn conditions_as_the_api_reads_them() {
    let svc = svc(None);
    let cases = [
        (r#""conditions": {}"#, true),
        (r#""conditions": null"#, true),
        (r#""hostname": "h""#, true),
        (
            r#""conditions": {"ready": null, "serving": null, "terminating": null}"#,
            true,
        ),
        (r#""conditions": {"ready": true}"#, true),
        (r#""conditions": {"ready": false}"#, false),
        (r#""conditions": {"serving": false}"#, false),
        (r#""conditions": {"terminating": true}"#, false),
        (r#""conditions": {"terminating": false}"#, true),
        // A Service publishing not-ready addresses: ready, but failing its probe.
        (
            r#""conditions": {"ready": true, "serving": false, "terminating": false}"#,
            false,
        ),
        // ... or being deleted.
        (
            r#""conditions": {"ready": true, "serving": true, "terminating": true}"#,
            false,
        ),
    ];
    for (conditions, member) in cases {
        let body = format!(
            r#"{{"metadata": {{}}, "items": [{{"metadata": {{"name": "a"}}, "addressType": "IPv4",
                "endpoints": [{{"addresses": ["10.0.0.1"], {conditions}}}],
                "ports": [{{"port": 9000}}]}}]}}"#
        );
        let (s, v) = Slices::from_list(&svc, body.as_bytes()).unwrap();
        assert_eq!(v, "");
        assert_eq!(ids(&s).len(), usize::from(member), "{conditions}");
    }
}

/// Fields the schema lets be absent or null, and values no port can be.
#[test]
fn fields_left_out_or_null() {
    let slice = |ports: &str, endpoint: &str| {
        format!(
            r#"{{"type": "ADDED", "object": {{"metadata": {{"name": "a", "resourceVersion": null}},
                "endpoints": [{endpoint}], "ports": {ports}}}}}"#
        )
    };
    let nodes = |svc: &KubeService, line: &str| {
        let mut s = Slices::default();
        let mut v = "1".to_owned();
        assert!(s.apply_event(svc, line.as_bytes(), &mut v).unwrap());
        assert_eq!(v, "", "a null resourceVersion");
        ids(&s)
    };
    for list in [&br#"{"items": null}"#[..], br#"{"metadata": null}"#, b"{}"] {
        let (s, v) = Slices::from_list(&svc(None), list).unwrap();
        assert!(ids(&s).is_empty() && v.is_empty());
    }
    let ep = r#"{"addresses": ["10.0.0.1"], "zone": null}"#;
    let one = vec![("10.0.0.1:9000".to_owned(), None)];
    // A port with no name: a Service's one unnamed port, asked for by no name
    // or by the empty one.
    let unnamed = r#"[{"port": 9000, "protocol": null}]"#;
    assert_eq!(nodes(&svc(None), &slice(unnamed, ep)), one);
    assert_eq!(nodes(&svc(Some("")), &slice(unnamed, ep)), one);
    assert!(nodes(&svc(Some("s3")), &slice(unnamed, ep)).is_empty());
    // No port, a port with no number, or with one no port can be: nobody.
    for ports in [
        "null",
        "[]",
        r#"[{"name": "s3"}]"#,
        r#"[{"name": "s3", "port": null}]"#,
        r#"[{"name": "s3", "port": 0}]"#,
        r#"[{"name": "s3", "port": 70000}]"#,
        r#"[{"name": "s3", "port": -1}]"#,
    ] {
        assert!(
            nodes(&svc(Some("s3")), &slice(ports, ep)).is_empty(),
            "{ports}"
        );
    }
    // An endpoint with no address, or null ones.
    let s3 = r#"[{"name": "s3", "port": 9000}]"#;
    for ep in [r#"{}"#, r#"{"addresses": null}"#, r#"{"addresses": []}"#] {
        assert!(nodes(&svc(Some("s3")), &slice(s3, ep)).is_empty(), "{ep}");
    }
    // A slice with no metadata, endpoints or ports at all.
    let mut s = Slices::default();
    let mut v = String::new();
    assert!(s
        .apply_event(&svc(None), br#"{"type": "ADDED", "object": {}}"#, &mut v)
        .unwrap());
    assert!(ids(&s).is_empty());
}

/// A value of the wrong type is a bad answer, and changes nothing.
#[test]
fn a_wrong_type_is_a_bad_answer() {
    let svc = svc(Some("s3"));
    let (mut s, mut v) = Slices::from_list(
        &svc,
        br#"{"items": [{"metadata": {"name": "a"}, "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"name": "s3", "port": 9000}]}]}"#,
    )
    .unwrap();
    for bad in [
        &br#"{"type": "MODIFIED", "object": {"metadata": {"name": "a"}, "endpoints": {}}}"#[..],
        br#"{"type": "MODIFIED", "object": {"metadata": {"name": "a"}, "ports": [{"port": "9000"}]}}"#,
        br#"{"type": "MODIFIED", "object": {"metadata": {"name": "a"}, "endpoints": [{"conditions": {"ready": "yes"}}]}}"#,
        br#"{"type": "MODIFIED", "object": null}"#,
        br#"{"object": {}}"#,
    ] {
        assert!(
            matches!(s.apply_event(&svc, bad, &mut v), Err(WatchError::Bad(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(ids(&s), [("10.0.0.1:9000".into(), None)]);
    assert!(matches!(
        Slices::from_list(&svc, br#"{"items": {}}"#),
        Err(WatchError::Bad(_))
    ));
}
