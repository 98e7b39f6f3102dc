//! `shoal status`: every node's health and cache, as a table or JSON.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use shoal::config::Config;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// How long to wait for each node.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// The value of one series in Prometheus text, if present.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(name)
            .and_then(|v| v.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

fn label_of(text: &str, prefix: &str, label: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with(prefix))?;
    let at = line.find(&format!("{label}=\""))? + label.len() + 2;
    Some(line[at..].split('"').next()?.to_owned())
}

pub async fn run(cfg: &Config, a: Args) -> Result<ExitCode, String> {
    let (cluster, ids) = super::cluster_nodes(cfg).await?;
    if ids.is_empty() {
        return Err("the cluster has no nodes".into());
    }
    let scheme = if cluster.tls { "https" } else { "http" };
    let http = reqwest::Client::builder()
        .timeout(a.timeout)
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let probes = ids.iter().map(|id| {
        let http = http.clone();
        async move {
            let t = Instant::now();
            let health = http.get(format!("{scheme}://{id}/healthz")).send().await;
            let latency = t.elapsed();
            let ok = matches!(&health, Ok(r) if r.status().is_success());
            let metrics = if ok {
                match http.get(format!("{scheme}://{id}/metrics")).send().await {
                    Ok(r) => r.text().await.ok(),
                    Err(_) => None,
                }
            } else {
                None
            };
            let error = match health {
                Ok(r) if r.status().is_success() => None,
                Ok(r) => Some(format!("healthz answered {}", r.status())),
                Err(e) => Some(e.to_string()),
            };
            (id.clone(), ok, latency, metrics.unwrap_or_default(), error)
        }
    });
    let results = futures_util::future::join_all(probes).await;
    let mut rows = Vec::new();
    let mut down = 0;
    for (id, ok, latency, m, error) in results {
        if !ok {
            down += 1;
        }
        let hits = series(&m, "shoal_node_hits_total{tier=\"ram\"}").unwrap_or(0.0)
            + series(&m, "shoal_node_hits_total{tier=\"disk\"}").unwrap_or(0.0);
        let fetched = series(&m, "shoal_node_origin_requests_total{kind=\"block\"}").unwrap_or(0.0);
        rows.push(json!({
            "node": id,
            "reachable": ok,
            "error": error,
            "latency_ms": ok.then(|| (latency.as_secs_f64() * 1e4).round() / 10.0),
            "version": label_of(&m, "shoal_node_build_info{", "version"),
            "uptime_seconds": series(&m, "shoal_node_start_time_seconds").map(|s| (now - s).max(0.0).round()),
            "ram_bytes": series(&m, "shoal_node_cache_bytes{tier=\"ram\"}"),
            "ram_capacity_bytes": series(&m, "shoal_node_cache_capacity_bytes{tier=\"ram\"}"),
            "disk_bytes": series(&m, "shoal_node_cache_bytes{tier=\"disk\"}"),
            "disk_capacity_bytes": series(&m, "shoal_node_cache_capacity_bytes{tier=\"disk\"}"),
            "hit_ratio": (hits + fetched > 0.0).then(|| (hits / (hits + fetched) * 1000.0).round() / 1000.0),
            "origin_bytes": series(&m, "shoal_node_origin_bytes_total"),
        }));
    }
    if a.json {
        println!("{}", json!({ "nodes": rows, "down": down }));
    } else {
        let mib = |v: &serde_json::Value| {
            v.as_f64()
                .map_or("-".into(), |b| format!("{:.0}", b / 1048576.0))
        };
        println!(
            "{:<28} {:<6} {:>8} {:>9} {:>8} {:>15} {:>15} {:>6} {:>12}",
            "node", "state", "version", "uptime", "ms", "ram MiB", "disk MiB", "hits", "origin MiB"
        );
        for r in &rows {
            let state = if r["reachable"] == true { "up" } else { "DOWN" };
            println!(
                "{:<28} {:<6} {:>8} {:>9} {:>8} {:>15} {:>15} {:>6} {:>12}",
                r["node"].as_str().unwrap_or(""),
                state,
                r["version"].as_str().unwrap_or("-"),
                r["uptime_seconds"]
                    .as_f64()
                    .map_or("-".into(), |s| format!("{s:.0}s")),
                r["latency_ms"]
                    .as_f64()
                    .map_or("-".into(), |s| format!("{s:.1}")),
                format!("{}/{}", mib(&r["ram_bytes"]), mib(&r["ram_capacity_bytes"])),
                format!(
                    "{}/{}",
                    mib(&r["disk_bytes"]),
                    mib(&r["disk_capacity_bytes"])
                ),
                r["hit_ratio"]
                    .as_f64()
                    .map_or("-".into(), |h| format!("{:.0}%", h * 100.0)),
                mib(&r["origin_bytes"]),
            );
            if let Some(e) = r["error"].as_str() {
                println!("    {e}");
            }
        }
    }
    Ok(if down > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
