/// The `/metrics` page of a node or mount at `addr` (`host:port`).
pub async fn scrape(addr: impl std::fmt::Display) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics reachable")
        .text()
        .await
        .expect("metrics text")
}

/// The value of sample `series` (name and label block, as exposed) in `text`; 0 when
/// it has no sample yet (a labelled counter appears at its first count).
pub fn metric(text: &str, series: &str) -> f64 {
    find(text, series).unwrap_or(0.0)
}

/// Like [`metric`], but the sample must be there: a renamed metric fails the test.
pub fn metric_required(text: &str, series: &str) -> f64 {
    find(text, series).unwrap_or_else(|| panic!("{series} missing from:\n{text}"))
}

/// The sum of every sample of metric `name` in `text`, whatever its labels.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let bare = series.split_once('{').map_or(series, |(n, _)| n);
            (bare == name).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

fn find(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}
