/// The `/metrics` page of a node or mount at `addr` (`host:port`).
pub async fn scrape(addr: impl std::fmt::Display) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics reachable")
        .text()
        .await
        .expect("metrics text")
}

/// The value of sample `series` (name and label block, as exposed) in `text`.
/// A series that is not there fails the test with the page: read as 0, a renamed
/// or misspelled metric, or a labelled counter asked for without its labels,
/// would pass every assertion that nothing happened.
pub fn metric(text: &str, series: &str) -> f64 {
    find(text, series).unwrap_or_else(|| panic!("{series} missing from:\n{text}"))
}

/// The same as [`metric`].
pub fn metric_required(text: &str, series: &str) -> f64 {
    metric(text, series)
}

/// Like [`metric`], but 0 for a labelled series not counted yet: the exposition
/// leaves a labelled family out, `# TYPE` line and all, until its first count,
/// so such a series cannot be told from a misspelt one. A zero read this way
/// proves nothing alone: assert it beside a series that must be there. An
/// unlabelled series, always on the page, must be.
pub fn metric_or_zero(text: &str, series: &str) -> f64 {
    find(text, series).unwrap_or_else(|| {
        let name = series.split_once('{').map_or(series, |(n, _)| n);
        assert!(
            series.contains('{') || declared(text, name),
            "{series} missing from:\n{text}"
        );
        0.0
    })
}

/// The sum of every sample of metric `name` in `text`, whatever its labels: 0 for
/// a declared family with no sample, a failed test for one not on the page (as
/// a labelled family is until its first count: that zero is not asserted).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let bare = series.split_once('{').map_or(series, |(n, _)| n);
            (bare == name).then(|| value.parse::<f64>().ok())?
        })
        .collect();
    assert!(
        !values.is_empty() || declared(text, name),
        "no sample of {name}, and no family {name} declared, in:\n{text}"
    );
    values.into_iter().sum()
}

/// Whether `text` declares the family whose samples are named `name`: its
/// `# TYPE` line names the series in the classic format, the family (without
/// `_total`, `_info`) in OpenMetrics.
fn declared(text: &str, name: &str) -> bool {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .any(|family| {
            family == name
                || ["_total", "_info"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(family))
        })
}

fn find(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str =
        "# TYPE hits_total counter\nhits_total{tier=\"ram\"} 3\nhits_total{tier=\"disk\"} 4\n\
                        # TYPE fallbacks_total counter\n# TYPE open gauge\nopen 2\n";

    #[test]
    fn a_series_must_be_on_the_page() {
        assert_eq!(metric(PAGE, "open"), 2.0);
        assert_eq!(metric(PAGE, "hits_total{tier=\"disk\"}"), 4.0);
        for missing in ["opne", "hits_total", "fallbacks_total"] {
            assert!(std::panic::catch_unwind(|| metric(PAGE, missing)).is_err());
        }
    }

    #[test]
    fn zero_only_for_a_declared_family() {
        assert_eq!(metric_or_zero(PAGE, "fallbacks_total{cause=\"down\"}"), 0.0);
        assert_eq!(metric_or_zero(PAGE, "hits_total{tier=\"ram\"}"), 3.0);
        assert!(std::panic::catch_unwind(|| metric_or_zero(PAGE, "opne")).is_err());
        assert_eq!(metric_sum(PAGE, "hits_total"), 7.0);
        assert_eq!(metric_sum(PAGE, "fallbacks_total"), 0.0);
        assert!(std::panic::catch_unwind(|| metric_sum(PAGE, "fallback_total")).is_err());
        // OpenMetrics names the family without its suffix.
        assert_eq!(metric_sum("# TYPE hits counter\n", "hits_total"), 0.0);
    }
}
