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

/// Like [`metric`], but 0 for a series of a family that has counted nothing
/// yet: one whose label values are not known in advance (requests by status,
/// say), declared on the page with no series until its first count. Every
/// family a process knows is on its page from the start, each label value it
/// knows at 0, so a series missing from a family that has series is misspelt
/// (a label or a value), and one of a family not on the page is misspelt or
/// renamed: both fail the test with the page. A zero read here still proves
/// nothing alone: assert it beside a series that must have counted.
pub fn metric_or_zero(text: &str, series: &str) -> f64 {
    if let Some(v) = find(text, series) {
        return v;
    }
    let name = series.split_once('{').map_or(series, |(n, _)| n);
    assert!(
        declared(text, name),
        "{series}: no family {name} is declared on the page (misspelt, or renamed?):\n{text}"
    );
    let others = samples(text, name);
    assert!(
        others.is_empty(),
        "{series} is not on the page, though its family has {others:?} \
         (a misspelt label or value?):\n{text}"
    );
    0.0
}

/// The samples (name and labels) of metric `name` in `text`.
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series))
        .filter(|series| series.split_once('{').map_or(*series, |(n, _)| n) == name)
        .collect()
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

    /// The panic message of `f`.
    fn panic_of(f: impl FnOnce() -> f64 + std::panic::UnwindSafe) -> String {
        let e = std::panic::catch_unwind(f).expect_err("it did not fail");
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn zero_only_for_a_declared_family_with_no_series_yet() {
        assert_eq!(metric_or_zero(PAGE, "fallbacks_total{cause=\"down\"}"), 0.0);
        assert_eq!(metric_or_zero(PAGE, "hits_total{tier=\"ram\"}"), 3.0);
        assert!(std::panic::catch_unwind(|| metric_or_zero(PAGE, "opne")).is_err());
        // Misspelt: the family, a label's value, a label's name.
        let e = panic_of(|| metric_or_zero(PAGE, "hit_total{tier=\"ram\"}"));
        assert!(e.contains("no family hit_total is declared"), "{e}");
        for misspelt in ["hits_total{tier=\"rma\"}", "hits_total{teir=\"ram\"}"] {
            let e = panic_of(|| metric_or_zero(PAGE, misspelt));
            assert!(e.contains("though its family has"), "{e}");
        }
        assert_eq!(metric_sum(PAGE, "hits_total"), 7.0);
        assert_eq!(metric_sum(PAGE, "fallbacks_total"), 0.0);
        assert!(std::panic::catch_unwind(|| metric_sum(PAGE, "fallback_total")).is_err());
        // OpenMetrics names the family without its suffix.
        assert_eq!(metric_sum("# TYPE hits counter\n", "hits_total"), 0.0);
    }
}
