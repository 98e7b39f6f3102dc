//! The page's tables, as rows.

pub const PAGE: &str = "docs/src/configuration.md";

/// One row of the page's tables.
#[derive(Debug)]
pub struct Row {
    pub section: String,
    pub key: String,
    pub ty: String,
    pub default: String,
    pub line: usize,
}

/// The text of each `` `code` `` span in `s`.
pub fn code_spans(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// The page's tables, each under the heading that names its section by its
/// first code span (`` `[origin]` ``, `` `[[auth.keys]]` ``, `` `cluster.nodes` ``).
pub fn read_page(text: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut section: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            section = code_spans(line)
                .first()
                .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_owned());
            continue;
        }
        let Some(sec) = &section else { continue };
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells[0] == "key" || cells[0].starts_with("---") {
            continue;
        }
        assert_eq!(
            cells.len(),
            4,
            "{PAGE}:{}: a row has 4 cells: {line}",
            i + 1
        );
        let key = code_spans(cells[0]);
        assert_eq!(
            key.len(),
            1,
            "{PAGE}:{}: the key is one code span: {line}",
            i + 1
        );
        rows.push(Row {
            section: sec.clone(),
            key: key[0].to_owned(),
            ty: cells[1].to_owned(),
            default: cells[2].to_owned(),
            line: i + 1,
        });
    }
    rows
}

pub fn page() -> Vec<Row> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    read_page(&text)
}
