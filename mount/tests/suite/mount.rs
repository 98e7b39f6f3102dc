//! Real FUSE mounts read with standard tools, against the real origin and real
//! `shoal-node` processes.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;

fn tree() -> Vec<(&'static str, Bytes)> {
    vec![
        ("hello.txt", Bytes::from_static(b"hello from shoal\n")),
        ("empty", Bytes::new()),
        ("one", Bytes::from_static(b"1")),
        ("with space/and ünïcødé.bin", data(70_001, 1)),
        (
            "nested/deeper/deepest/odd size.bin",
            data(3 * 1024 * 1024 + 17, 2),
        ),
        ("nested/block.bin", data(1024 * 1024, 3)),
        ("nested/plus+percent%.txt", data(999, 4)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_tools_see_the_origin_exactly() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    seed(&o, "data/", &local, &tree());
    let n1 = start_node(&o, dir.path(), "n1");
    let n2 = start_node(&o, dir.path(), "n2");
    let m = Mount::start(
        &mount_toml(&o, &[&n1, &n2], ""),
        &format!("{BUCKET}/data"),
        &[],
    );
    let (mnt, loc) = (q(&m.mnt), q(&local));

    // cat, cp -r, diff -r, md5sum.
    assert_eq!(
        sh_ok(&format!("cat {mnt}/hello.txt")).await,
        "hello from shoal\n"
    );
    sh_ok(&format!(
        "cp -r {mnt} {}/copy && diff -r {}/copy {loc}",
        q(dir.path()),
        q(dir.path())
    ))
    .await;
    let sums =
        |root: &str| format!("cd {root} && find . -type f -print0 | sort -z | xargs -0 md5sum");
    assert_eq!(sh_ok(&sums(&mnt)).await, sh_ok(&sums(&loc)).await);
    // tar -c of the mount unpacks to the same tree.
    sh_ok(&format!(
        "mkdir {d}/untar && tar -C {mnt} -cf - . | tar -C {d}/untar -xf - && diff -r {d}/untar {loc}",
        d = q(dir.path())
    ))
    .await;
    // find and ls -lR list the same names and sizes.
    let names = |root: &str| format!("cd {root} && find . | sort");
    assert_eq!(sh_ok(&names(&mnt)).await, sh_ok(&names(&loc)).await);
    let sizes = |root: &str| format!("cd {root} && find . -type f -printf '%p %s\\n' | sort");
    assert_eq!(sh_ok(&sizes(&mnt)).await, sh_ok(&sizes(&loc)).await);
    let ls = sh_ok(&format!("ls -lR {mnt}")).await;
    assert!(
        ls.contains("3145745") && ls.contains("and ünïcødé.bin"),
        "{ls}"
    );
    // stat: size and type.
    let st = sh_ok(&format!(
        "stat -c '%s %F' {mnt}/nested/block.bin {mnt}/nested"
    ))
    .await;
    assert_eq!(st, "1048576 regular file\n0 directory\n");
    // dd with odd block sizes and offsets.
    for (bs, skip, count) in [
        (4097, 3, 5),
        (1, 1048570, 20),
        (65536, 47, 3),
        (1000000, 3, 1),
    ] {
        let f = "nested/deeper/deepest/odd size.bin";
        let cmd = |root: &str| {
            format!("dd if={root}/'{f}' bs={bs} skip={skip} count={count} status=none | md5sum")
        };
        assert_eq!(
            sh_ok(&cmd(&mnt)).await,
            sh_ok(&cmd(&loc)).await,
            "dd bs={bs} skip={skip}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_access_zip_and_sqlite() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    // A zip and an SQLite database, made locally, then stored in the bucket.
    sh_ok(&format!(
        "cd {l} && python3 -c \"
import zipfile, sqlite3
with zipfile.ZipFile('a.zip', 'w') as z:
    for i in range(20):
        z.writestr(f'member-{{i}}.txt', 'x' * (i * 1000))
db = sqlite3.connect('db.sqlite')
db.execute('create table t (k integer primary key, v text)')
db.executemany('insert into t values (?, ?)', [(i, 'v%d' % i) for i in range(5000)])
db.commit()
\"",
        l = q(&local)
    ))
    .await;
    let big = data(8 * 1024 * 1024 + 3, 9);
    std::fs::write(local.join("big.bin"), &big).unwrap();
    for f in ["a.zip", "db.sqlite", "big.bin"] {
        o.put(BUCKET, f, std::fs::read(local.join(f)).unwrap());
    }
    let m = Mount::start(&mount_toml(&o, &[], ""), BUCKET, &[]);
    let mnt = q(&m.mnt);
    // 1,000 random seeks and reads, compared with the local copy.
    sh_ok(&format!(
        "python3 -c \"
import random
random.seed(7)
a = open('{mnt}/big.bin', 'rb'); b = open('{l}/big.bin', 'rb')
size = {n}
for _ in range(1000):
    off = random.randrange(size); n = random.randrange(1, 200000)
    a.seek(off); b.seek(off)
    assert a.read(n) == b.read(n), off
\"",
        mnt = m.mnt.display(),
        l = local.display(),
        n = big.len()
    ))
    .await;
    let z = sh_ok(&format!("python3 -m zipfile -l {mnt}/a.zip")).await;
    assert!(z.contains("member-19.txt"), "{z}");
    let query = |p: String| {
        format!(
            "python3 -c \"
import sqlite3
db = sqlite3.connect('file:{p}?immutable=1', uri=True)
print(db.execute('select count(*), sum(k), max(v) from t where v like \\\"v1%\\\"').fetchone())
\""
        )
    };
    let rows = sh_ok(&query(m.path("db.sqlite").display().to_string())).await;
    assert_eq!(
        rows,
        sh_ok(&query(local.join("db.sqlite").display().to_string())).await
    );
    assert!(rows.starts_with("(1111, 1514596,"), "{rows}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_list_completely_and_skip_bad_names() {
    let o = origin().await;
    for i in 0..10_000 {
        o.put(BUCKET, &format!("many/f{i:05}"), Bytes::from_static(b"x"));
    }
    o.put(BUCKET, "implicit/a/b/c/leaf", Bytes::from_static(b"leaf"));
    o.put(BUCKET, "odd/bad//double", Bytes::from_static(b"x"));
    o.put(BUCKET, "odd/./dot", Bytes::from_static(b"x"));
    o.put(
        BUCKET,
        &format!("odd/{}", "n".repeat(300)),
        Bytes::from_static(b"x"),
    );
    o.put(BUCKET, "odd/fine", Bytes::from_static(b"fine"));
    let m = Mount::start(&mount_toml(&o, &[], ""), BUCKET, &[]);
    let mnt = q(&m.mnt);
    let listed = sh_ok(&format!("ls -f {mnt}/many | grep -v '^\\.\\.\\?$' | sort | uniq -c | awk '$1 != 1' | wc -l; ls {mnt}/many | wc -l")).await;
    assert_eq!(listed, "0\n10000\n", "every key exactly once");
    assert_eq!(
        sh_ok(&format!("cat {mnt}/implicit/a/b/c/leaf")).await,
        "leaf"
    );
    assert_eq!(
        sh_ok(&format!("cd {mnt}/implicit && find . | sort")).await,
        ".\n./a\n./a/b\n./a/b/c\n./a/b/c/leaf\n"
    );
    // Invalid names are skipped, the rest listed, and nothing fails.
    let odd = sh_ok(&format!("ls -A {mnt}/odd; ls -A {mnt}/odd/bad")).await;
    assert_eq!(odd, "bad\nfine\n", "{odd}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_with_erofs() {
    let o = origin().await;
    o.put(BUCKET, "f", Bytes::from_static(b"x"));
    let m = Mount::start(&mount_toml(&o, &[], ""), BUCKET, &[]);
    let mnt = q(&m.mnt);
    for cmd in [
        format!("touch {mnt}/new"),
        format!("echo hi > {mnt}/f"),
        format!("echo hi >> {mnt}/f"),
        format!("rm {mnt}/f"),
        format!("mkdir {mnt}/d"),
        format!("mv {mnt}/f {mnt}/g"),
        format!("ln -s x {mnt}/l"),
    ] {
        let out = sh(&cmd).await;
        assert!(!out.status.success(), "{cmd} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Read-only file system"), "{cmd}: {err}");
    }
    assert_eq!(
        o.store.get(BUCKET, "f").unwrap().data,
        Bytes::from_static(b"x")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_during_md5sum_and_all_nodes_down() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let body = data(200 * 1024 * 1024, 11);
    let etag = o.put(BUCKET, "big.bin", body);
    let n1 = start_node(&o, dir.path(), "n1");
    let mut n2 = start_node(&o, dir.path(), "n2");
    let n3 = start_node(&o, dir.path(), "n3");
    let m = Mount::start(
        &mount_toml(&o, &[&n1, &n2, &n3], "[cache]\nram_size = \"64MiB\"\n"),
        BUCKET,
        &[],
    );
    let file = q(&m.path("big.bin"));
    // md5sum while a node dies a little way in.
    let sum = tokio::spawn({
        let cmd = format!("md5sum {file}");
        async move { sh_ok(&cmd).await }
    });
    // Kill a node once the read is under way (the origin has sent some of the file).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while o.stats.snapshot().body_bytes_sent < 20 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the read never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    n2.child.kill().unwrap();
    n2.child.wait().unwrap();
    assert!(
        sum.await.unwrap().starts_with(&etag),
        "checksum after a node died"
    );
    // Every node gone: still correct, from the origin (page cache dropped first).
    drop((n1, n2, n3));
    sh_ok("sync; echo 3 > /proc/sys/vm/drop_caches").await;
    assert!(
        sh_ok(&format!("md5sum {file}")).await.starts_with(&etag),
        "checksum with all nodes down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_overwritten_while_open_fails_never_mixes() {
    let o = origin().await;
    o.put(BUCKET, "v.bin", Bytes::from(vec![b'a'; 6 * 1024 * 1024]));
    let m = Mount::start(
        &mount_toml(&o, &[], ""),
        BUCKET,
        &["--metadata-ttl", "100ms"],
    );
    let path = m.path("v.bin").display().to_string();
    // Read the head, overwrite at the origin, read the tail: an error, never 'b's.
    let script = format!(
        "import os, sys, time, urllib.request
f = open({path:?}, 'rb', buffering=0)
assert f.read(4096) == b'a' * 4096
sys.stdout.write('opened\\n'); sys.stdout.flush()
sys.stdin.readline()
f.seek(5 * 1024 * 1024)
try:
    data = f.read(65536)
    assert set(data) <= {{ord('a')}}, 'mixed versions'
    print('same-version')
except OSError as e:
    print('errno', e.errno)
"
    );
    let mut child = std::process::Command::new("python3")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "opened\n");
    o.put(BUCKET, "v.bin", Bytes::from(vec![b'b'; 6 * 1024 * 1024]));
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert!(child.wait().unwrap().success());
    let estale_or_eio = [
        format!("errno {}\n", libc::ESTALE),
        format!("errno {}\n", libc::EIO),
    ];
    assert!(estale_or_eio.contains(&line), "got {line:?}");
    // A new open sees the new version (once the 100 ms metadata_ttl has passed).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let head = sh(&format!("head -c 3 {}", q(&m.path("v.bin")))).await;
        if head.stdout == b"bbb" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new version never showed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmount_with_a_read_in_flight_neither_hangs_nor_crashes() {
    let o = origin().await;
    o.put(BUCKET, "slow.bin", data(64 * 1024 * 1024, 12));
    // A slow origin keeps the read in flight.
    o.faults.set(shoal_testorigin::FaultSettings {
        first_byte_delay_ms: 50,
        bandwidth_bytes_per_sec: 5_000_000,
        ..Default::default()
    });
    let mut m = Mount::start(&mount_toml(&o, &[], ""), BUCKET, &[]);
    let file = q(&m.path("slow.bin"));
    let reader = tokio::spawn(async move { sh(&format!("cat {file} > /dev/null")).await });
    // Stop the mount once the read is really in flight at the origin.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while o.stats.snapshot().gets_of(BUCKET, "slow.bin") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the read never reached the origin"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = m.stop(Duration::from_secs(15));
    assert!(status.success(), "shoal-mount exit: {status}");
    // The reader ends (with an error) instead of hanging.
    let out = tokio::time::timeout(Duration::from_secs(15), reader)
        .await
        .expect("reader hung")
        .unwrap();
    assert!(!out.status.success() || out.stderr.is_empty());
    assert!(!is_mounted(&m.mnt), "still mounted");
    o.faults.clear();
}

/// A mount namespace made after the mount (a container, a sandboxed service) holds
/// a copy of it, so unmounting ours does not end the FUSE connection; SIGTERM must
/// still end the daemon promptly rather than wait on it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_daemon_while_another_mount_namespace_holds_a_copy() {
    let o = origin().await;
    o.put(BUCKET, "x.txt", &b"present"[..]);
    let mut m = Mount::start(&mount_toml(&o, &[], ""), BUCKET, &[]);
    assert_eq!(std::fs::read(m.path("x.txt")).unwrap(), b"present");
    let mut holder = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "slave", "sleep", "60"])
        .spawn()
        .expect("unshare runs (util-linux, as root)");
    // Until the namespace exists the copy does not either: wait for `sleep` to run
    // in a mount namespace of its own.
    let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let pid = holder.id();
        let ns = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "sleep" && ns.is_some_and(|n| n != ours) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "unshare never made its mount namespace"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = std::time::Instant::now();
    let status = m.stop(Duration::from_secs(15));
    let took = started.elapsed();
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(status.success(), "shoal-mount exit: {status}");
    assert!(!is_mounted(&m.mnt), "still mounted");
    eprintln!("stopped in {took:?} with a copy held elsewhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_small_files_is_read_ahead() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    let files: Vec<(String, Bytes)> = (0..60)
        .map(|i| {
            (
                format!("small/s{i:03}"),
                data(1000 + 37 * i, 100 + i as u64),
            )
        })
        .collect();
    let refs: Vec<(&str, Bytes)> = files.iter().map(|(k, b)| (k.as_str(), b.clone())).collect();
    seed(&o, "", &local, &refs);
    let n1 = start_node(&o, dir.path(), "n1");
    let addr = free_addr();
    let m = Mount::start(
        &mount_toml(&o, &[&n1], ""),
        BUCKET,
        &["--metrics-addr", &addr],
    );
    // The shell's glob lists the directory; cat opens the files in its order.
    let cat = |root: &str| format!("cd {root}/small && LC_ALL=C cat * | md5sum");
    assert_eq!(sh_ok(&cat(&q(&m.mnt))).await, sh_ok(&cat(&q(&local))).await);
    let text = scrape(&addr).await;
    let value = |name: &str| metric_required(&text, name);
    // Every file after the first two was fetched ahead of its open, and no file
    // was fetched twice.
    assert_eq!(value("shoal_mount_prefetched_files_total"), 58.0);
    assert_eq!(value("shoal_client_blocks_total{source=\"node\"}"), 60.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_over_a_tree_lists_each_directory_once_and_ahead() {
    let o = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    let files: Vec<(String, Bytes)> = (0..12)
        .flat_map(|d| (0..2).map(move |f| (format!("tree/d{d:02}/f{f}"), data(10 + f, d as u64))))
        .collect();
    let refs: Vec<(&str, Bytes)> = files.iter().map(|(k, b)| (k.as_str(), b.clone())).collect();
    seed(&o, "", &local, &refs);
    let addr = free_addr();
    let m = Mount::start(&mount_toml(&o, &[], ""), BUCKET, &["--metrics-addr", &addr]);
    let find = |root: &str| format!("cd {root} && find tree | sort");
    assert_eq!(
        sh_ok(&find(&q(&m.mnt))).await,
        sh_ok(&find(&q(&local))).await
    );
    let text = scrape(&addr).await;
    let value = |name: &str| metric_required(&text, name);
    // The mount's root (find opens its starting directory), tree/ and its 12
    // directories, each listed once; all but the first two of them ahead of
    // find's visit.
    assert_eq!(value("shoal_mount_listings_total"), 14.0);
    assert_eq!(value("shoal_mount_prefetched_listings_total"), 10.0);
}

/// A keeper killed together with its server (`systemctl kill -s KILL` on the
/// unit, the OOM killer) leaves its mountpoint answering ENOTCONN. Starting the
/// mount again there (systemd's `Restart=`, `mount` of an fstab line) detaches
/// the dead mount and mounts afresh, instead of failing on a busy mountpoint
/// for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_left_dead_by_a_killed_keeper_is_mounted_again_on_start() {
    let o = origin().await;
    o.put(BUCKET, "x.txt", &b"present"[..]);
    let toml = mount_toml(&o, &[], "");
    let mut m = Mount::start(&toml, BUCKET, &[]);
    assert_eq!(std::fs::read(m.path("x.txt")).unwrap(), b"present");
    let server = m.server_pid();
    let mut keeper = m.child.take().unwrap();
    signal(server, "-KILL");
    keeper.kill().unwrap();
    keeper.wait().unwrap();
    let dead = |e: &std::io::Error| e.raw_os_error() == Some(libc::ENOTCONN);
    wait_until("the mount is dead", Duration::from_secs(10), || {
        std::fs::read_dir(&m.mnt).is_err_and(|e| dead(&e))
    });
    assert!(m.is_mounted(), "the dead mount is still there");

    let log = m.dir.path().join("again.log");
    let again = std::process::Command::new(MOUNT)
        .arg("--config")
        .arg(m.dir.path().join("mount.toml"))
        .arg("--foreground")
        .arg(BUCKET)
        .arg(&m.mnt)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    m.child = Some(again);
    wait_until("mounted again", Duration::from_secs(20), || {
        if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
            panic!(
                "shoal-mount exited instead of mounting again ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::fs::read(m.path("x.txt")).is_ok_and(|b| b == b"present")
    });
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("left by a keeper that died"),
        "the detach is logged: {said}"
    );
}
