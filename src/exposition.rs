//! Prometheus exposition for the node's and the mount's `/metrics`: OpenMetrics
//! when the scraper asks for it (`Accept: application/openmetrics-text`, what
//! Prometheus sends by default), else the classic text format (curl, older
//! scrapers), in which a counter's `# TYPE` names its `_total` series.

use prometheus_client::registry::Registry;

/// Registers each `"name" => metric, "help";` in `registry`.
#[macro_export]
macro_rules! register_metrics {
    ($registry:expr, $($name:literal => $metric:expr, $help:literal;)*) => {
        $( $registry.register($name, $help, $metric.clone()); )*
    };
}

pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics of `registry` in the format `accept` asks for: (content type, body).
pub fn render(registry: &Registry, accept: Option<&str>) -> Result<(&'static str, String), String> {
    let mut open = String::new();
    prometheus_client::encoding::text::encode(&mut open, registry)
        .map_err(|e| format!("cannot encode metrics: {e}"))?;
    if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
        Ok((OPENMETRICS, open))
    } else {
        Ok((CLASSIC, classic(&open)))
    }
}

/// OpenMetrics text as the classic format: counter families renamed to their
/// `_total` series, info families to `_info` gauges, no `# UNIT` or `# EOF`.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').or(Some((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (series, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                other => (name.to_owned(), other),
            };
            if let Some((h, text)) = help.take() {
                if h == name {
                    out.push_str(&format!("# HELP {series} {text}\n"));
                }
            }
            out.push_str(&format!("# TYPE {series} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;

    #[test]
    fn each_format_as_asked() {
        let mut r = Registry::default();
        let c: Counter = Counter::default();
        c.inc_by(3);
        let g: Gauge = Gauge::default();
        g.set(7);
        register_metrics!(r,
            "hits" => c, "Hits so far";
            "level" => g, "A level";
        );
        let (ct, open) = render(&r, Some("application/openmetrics-text;version=1.0.0")).unwrap();
        assert_eq!(ct, OPENMETRICS);
        assert!(open.contains("# TYPE hits counter\n") && open.contains("hits_total 3\n"));
        assert!(open.ends_with("# EOF\n"));
        let (ct, text) = render(&r, None).unwrap();
        assert_eq!(ct, CLASSIC);
        assert!(text.contains("# HELP hits_total Hits so far.\n"), "{text}");
        assert!(
            text.contains("# TYPE hits_total counter\nhits_total 3\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE level gauge\nlevel 7\n"), "{text}");
        assert!(!text.contains("# EOF"));
    }
}
