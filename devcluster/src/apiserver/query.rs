//! Query-string parsing (percent-decoding, `+` as space) for the handful of parameters the API reads.

/// Decoded query parameters in request order.
#[derive(Debug, Clone, Default)]
pub struct Query(Vec<(String, String)>);

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 3 <= bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    /// Parses a raw query string.
    pub fn parse(raw: Option<&str>) -> Self {
        let pairs = raw
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (decode(k), decode(v)),
                None => (decode(p), String::new()),
            })
            .collect();
        Query(pairs)
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `key` is `true` (or `1`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    /// Sets `key`.
    pub fn set(&mut self, key: &str, value: &str) {
        self.0.retain(|(k, _)| k != key);
        self.0.push((key.to_string(), value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_escapes_and_plus_are_decoded() {
        let q = Query::parse(Some(
            "labelSelector=env+notin+%28prod%29&fieldSelector=status.phase%21%3DPending&watch=1",
        ));
        assert_eq!(q.get("labelSelector"), Some("env notin (prod)"));
        assert_eq!(q.get("fieldSelector"), Some("status.phase!=Pending"));
        assert!(q.flag("watch"));
        assert_eq!(Query::parse(Some("a=%")).get("a"), Some("%"));
    }
}
