//! Where the AWS chains read the environment and the shared files from: the
//! process, or a test's substitute; and the INI format of those files.

/// Where environment variables and files are read from; tests substitute their own.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
    fn read_file(&self, path: &str) -> Option<String>;
}

/// The process environment and file system.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
    fn read_file(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
}

/// The value of `key` in section `[section]` of an INI text such as the AWS
/// shared config file.
pub fn ini_value(text: &str, section: &str, key: &str) -> Option<String> {
    ini_section(text, section)?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// The `key = value` pairs of `[name]` in an INI text such as the AWS credentials file.
fn ini_section(text: &str, name: &str) -> Option<Vec<(String, String)>> {
    let mut found = None;
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(h.trim().to_owned());
            if current.as_deref() == Some(name) {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if current.as_deref() == Some(name) {
            if let Some((k, v)) = line.split_once('=') {
                found
                    .get_or_insert_with(Vec::new)
                    .push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_values_by_section() {
        let text = "[default]\nregion = us-west-2\n\n[profile other]\nregion=eu-west-1\n";
        assert_eq!(
            ini_value(text, "default", "region").as_deref(),
            Some("us-west-2")
        );
        assert_eq!(
            ini_value(text, "profile other", "region").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(ini_value(text, "profile nope", "region"), None);
    }
}
