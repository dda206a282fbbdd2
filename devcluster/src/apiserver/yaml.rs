//! A small YAML reader for apply-patch bodies: JSON as is, else block mappings/sequences with plain or quoted
//! scalars and inline JSON-style flow values — what `kubectl apply --server-side` and hand-written manifests use.
//! Anchors, tags, multi-line scalars and multiple documents are not supported (400).

use serde_json::{Map, Value};

struct Line {
    indent: usize,
    text: String,
}

/// Parses a YAML (or JSON) document into JSON.
///
/// # Errors
/// A message naming the unsupported or malformed line.
pub fn parse(body: &[u8]) -> Result<Value, String> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body).map_err(|_| "body is not UTF-8".to_string())?;
    let mut lines = Vec::new();
    for raw in text.lines() {
        let trimmed = strip_comment(raw);
        if trimmed.trim().is_empty() || trimmed.trim() == "---" {
            continue;
        }
        let indent = trimmed.len() - trimmed.trim_start().len();
        lines.push(Line {
            indent,
            text: trimmed.trim().to_string(),
        });
    }
    if lines.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let mut pos = 0;
    let v = block(&lines, &mut pos, lines[0].indent)?;
    if pos < lines.len() {
        return Err(format!("unexpected line: {}", lines[pos].text));
    }
    Ok(v)
}

fn strip_comment(s: &str) -> String {
    let mut out = String::new();
    let (mut sq, mut dq) = (false, false);
    let mut prev = ' ';
    for c in s.chars() {
        match c {
            '\'' if !dq => sq = !sq,
            '"' if !sq => dq = !dq,
            '#' if !sq && !dq && (prev == ' ' || out.is_empty()) => break,
            _ => {}
        }
        out.push(c);
        prev = c;
    }
    out.trim_end().to_string()
}

fn block(lines: &[Line], pos: &mut usize, indent: usize) -> Result<Value, String> {
    if lines[*pos].text.starts_with("- ") || lines[*pos].text == "-" {
        let mut items = Vec::new();
        while *pos < lines.len()
            && lines[*pos].indent == indent
            && (lines[*pos].text.starts_with("- ") || lines[*pos].text == "-")
        {
            let rest = lines[*pos].text[1..].trim_start().to_string();
            if rest.is_empty() {
                *pos += 1;
                if *pos < lines.len() && lines[*pos].indent > indent {
                    let ind = lines[*pos].indent;
                    items.push(block(lines, pos, ind)?);
                } else {
                    items.push(Value::Null);
                }
                continue;
            }
            if split_key(&rest).is_some() {
                // "- key: value" starts a mapping whose further keys sit at the column after "- ".
                let inner = indent + (lines[*pos].text.len() - rest.len());
                let mut sub: Vec<Line> = vec![Line {
                    indent: inner,
                    text: rest,
                }];
                *pos += 1;
                while *pos < lines.len() && lines[*pos].indent >= inner {
                    sub.push(Line {
                        indent: lines[*pos].indent,
                        text: lines[*pos].text.clone(),
                    });
                    *pos += 1;
                }
                let mut p = 0;
                items.push(block(&sub, &mut p, inner)?);
            } else {
                items.push(scalar(&rest)?);
                *pos += 1;
            }
        }
        return Ok(Value::Array(items));
    }
    let mut map = Map::new();
    while *pos < lines.len() && lines[*pos].indent == indent {
        let line = &lines[*pos];
        let Some((k, rest)) = split_key(&line.text) else {
            return Err(format!("expected a mapping key: {}", line.text));
        };
        *pos += 1;
        let value = if rest.is_empty() {
            if *pos < lines.len()
                && (lines[*pos].indent > indent
                    || (lines[*pos].indent == indent && lines[*pos].text.starts_with("- ")))
            {
                let ind = lines[*pos].indent;
                block(lines, pos, ind)?
            } else {
                Value::Null
            }
        } else {
            scalar(&rest)?
        };
        map.insert(k, value);
    }
    if *pos < lines.len() && lines[*pos].indent > indent {
        return Err(format!("bad indentation: {}", lines[*pos].text));
    }
    Ok(Value::Object(map))
}

fn split_key(s: &str) -> Option<(String, String)> {
    let (key, rest) = if let Some(stripped) = s.strip_prefix('"') {
        let end = stripped.find('"')?;
        (stripped[..end].to_string(), stripped[end + 1..].to_string())
    } else if let Some(stripped) = s.strip_prefix('\'') {
        let end = stripped.find('\'')?;
        (stripped[..end].to_string(), stripped[end + 1..].to_string())
    } else {
        let idx = s
            .find(": ")
            .or_else(|| s.ends_with(':').then(|| s.len() - 1))?;
        if s.starts_with('{') || s.starts_with('[') {
            return None;
        }
        (s[..idx].to_string(), s[idx..].to_string())
    };
    let rest = rest.strip_prefix(':')?;
    Some((key.trim().to_string(), rest.trim().to_string()))
}

fn scalar(s: &str) -> Result<Value, String> {
    if s.starts_with('{') || s.starts_with('[') {
        return serde_json::from_str(s).map_err(|_| format!("unsupported flow value: {s}"));
    }
    if let Some(inner) = s.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        return serde_json::from_str::<String>(&format!("\"{inner}\""))
            .map(Value::String)
            .map_err(|e| e.to_string());
    }
    if let Some(inner) = s.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
        return Ok(Value::String(inner.replace("''", "'")));
    }
    if s.starts_with('&')
        || s.starts_with('*')
        || s.starts_with('!')
        || s.starts_with('|')
        || s.starts_with('>')
    {
        return Err(format!("unsupported YAML construct: {s}"));
    }
    Ok(match s {
        "null" | "~" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        _ => {
            if let Ok(i) = s.parse::<i64>() {
                Value::from(i)
            } else if let Ok(f) = s.parse::<f64>().map_err(|_| ()).and_then(|f| {
                if s.chars().any(|c| c.is_ascii_digit()) && !s.contains(' ') {
                    Ok(f)
                } else {
                    Err(())
                }
            }) {
                serde_json::Number::from_f64(f).map_or(Value::String(s.to_string()), Value::Number)
            } else {
                Value::String(s.to_string())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_deployment_manifest_parses_into_json() {
        let y = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: applied\n  resourceVersion: '1'\nspec:\n  replicas: 4\n  selector:\n    matchLabels:\n      app: applied\n  template:\n    spec:\n      containers:\n      - name: main\n        image: nginx:1.26\n        ports:\n        - containerPort: 80\n      - name: side\n        args: [\"a\", \"b\"]\n";
        let v = parse(y.as_bytes()).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "1");
        assert_eq!(v["spec"]["replicas"], 4);
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"][0],
            json!({"name": "main", "image": "nginx:1.26", "ports": [{"containerPort": 80}]})
        );
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"][1]["args"],
            json!(["a", "b"])
        );
    }

    #[test]
    fn json_bodies_pass_through() {
        assert_eq!(parse(b"{\"a\": 1}").unwrap(), json!({"a": 1}));
    }

    #[test]
    fn sequences_at_the_parent_indent_belong_to_the_key() {
        let v = parse(b"finalizers:\n- a\n- b\nx: # comment\n  y: \"q\"\n").unwrap();
        assert_eq!(v, json!({"finalizers": ["a", "b"], "x": {"y": "q"}}));
    }
}
