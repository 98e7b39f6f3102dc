//! Prometheus exposition for the node's and the mount's `/metrics`: OpenMetrics
//! when the scraper asks for it (`Accept: application/openmetrics-text`, what
//! Prometheus sends by default), else the classic text format (curl, older
//! scrapers), in which a counter's `# TYPE` names its `_total` series.

use std::hash::Hash;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Registers each `"name" => metric, "help";` in `registry`, each on the page
/// from the start ([`Declared`]).
#[macro_export]
macro_rules! register_metrics {
    ($registry:expr, $($name:literal => $metric:expr, $help:literal;)*) => {
        $( $registry.register($name, $help, $crate::exposition::Declared($metric.clone())); )*
    };
}

/// A metric that is on the page from the start: a labelled family with no
/// series yet is declared (its `# HELP` and `# TYPE`) with no sample, where
/// prometheus-client leaves it out until its first count. A dashboard, a
/// `rate()` or a test can then tell a family that counted nothing yet from
/// one that is not there (renamed, misspelt).
#[derive(Clone, Debug)]
pub struct Declared<M>(pub M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// Puts each of `labels` in `family` at 0: every label value a process knows
/// is a series from the start (Prometheus's advice for a label's known
/// values), so that 0 is read, not a missing series.
pub fn zeroed<S, M, C>(family: &Family<S, M, C>, labels: impl IntoIterator<Item = S>)
where
    S: Clone + Hash + Eq,
    C: MetricConstructor<M>,
{
    for l in labels {
        drop(family.get_or_create(&l));
    }
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

    #[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
    struct Tier {
        tier: &'static str,
    }

    #[test]
    fn a_family_is_on_the_page_before_its_first_count() {
        let counted: Family<Tier, Counter> = Family::default();
        let known: Family<Tier, Counter> = Family::default();
        zeroed(&known, [Tier { tier: "ram" }, Tier { tier: "disk" }]);
        let mut r = Registry::default();
        register_metrics!(r,
            "fallbacks" => counted, "Nothing counted yet";
            "hits" => known, "Known values at 0";
        );
        let text = render(&r, None).unwrap().1;
        assert!(text.contains("# TYPE fallbacks_total counter\n"), "{text}");
        assert!(!text.contains("fallbacks_total{"), "{text}");
        assert!(text.contains("hits_total{tier=\"ram\"} 0\n"), "{text}");
        assert!(text.contains("hits_total{tier=\"disk\"} 0\n"), "{text}");
        let open = render(&r, Some("application/openmetrics-text")).unwrap().1;
        assert!(open.contains("# TYPE fallbacks counter\n"), "{open}");
    }
}
