//! kube-apiserver's grammar of the `labelSelector` query, walked only to report what it refuses in
//! kube-apiserver's words (`found ',', expected: identifier`, `key: Invalid value: ...`): the
//! selector itself is built by the shared parser of `flotilla-apimachinery` (see `selector`).
//!
//! The walk follows upstream's `labels.Parse`: identifiers are runs of anything but blanks and
//! `!=<>(),`; `in` and `notin` are keywords; a value list may hold empty values (`(,a)`, `()`).

use super::validation::{label_value_errors, qualified_name_errors};

/// Checks `s` against kube-apiserver's label-selector grammar and its key and value rules.
///
/// # Errors
/// kube-apiserver's message for the first thing it would refuse.
pub fn check(s: &str) -> Result<(), String> {
    let mut w = Walk {
        toks: lex(s),
        pos: 0,
    };
    if *w.peek() == Tok::End {
        return Ok(());
    }
    loop {
        w.requirement()
            .map_err(|e| format!("unable to parse requirement: {e}"))?;
        match w.next() {
            Tok::End => return Ok(()),
            Tok::Comma => {}
            other => {
                return Err(format!(
                    "found '{}', expected: ',' or 'end of string'",
                    other.literal()
                ));
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    End,
}

impl Tok {
    fn literal(&self) -> &str {
        match self {
            Tok::Ident(s) => s,
            Tok::Bang => "!",
            Tok::Eq => "=",
            Tok::DoubleEq => "==",
            Tok::NotEq => "!=",
            Tok::Gt => ">",
            Tok::Lt => "<",
            Tok::In => "in",
            Tok::NotIn => "notin",
            Tok::Open => "(",
            Tok::Close => ")",
            Tok::Comma => ",",
            Tok::End => "",
        }
    }
}

fn lex(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let tok = match c {
            c if c.is_whitespace() => continue,
            '!' if chars.next_if_eq(&'=').is_some() => Tok::NotEq,
            '!' => Tok::Bang,
            '=' if chars.next_if_eq(&'=').is_some() => Tok::DoubleEq,
            '=' => Tok::Eq,
            '>' => Tok::Gt,
            '<' => Tok::Lt,
            '(' => Tok::Open,
            ')' => Tok::Close,
            ',' => Tok::Comma,
            _ => {
                let mut word = String::from(c);
                while let Some(c) = chars.next_if(|c| !c.is_whitespace() && !"!=<>(),".contains(*c))
                {
                    word.push(c);
                }
                match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                }
            }
        };
        out.push(tok);
    }
    out.push(Tok::End);
    out
}

struct Walk {
    toks: Vec<Tok>,
    pos: usize,
}

impl Walk {
    fn peek(&self) -> &Tok {
        self.toks.get(self.pos).unwrap_or(&Tok::End)
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        self.pos += 1;
        t
    }

    fn identifier(&mut self) -> Result<String, String> {
        match self.next() {
            Tok::Ident(k) => Ok(k),
            other => Err(format!("found '{}', expected: identifier", other.literal())),
        }
    }

    /// One requirement: `!key`, `key`, `key op value`, `key in|notin (values)`.
    fn requirement(&mut self) -> Result<(), String> {
        let negated = *self.peek() == Tok::Bang;
        if negated {
            self.next();
        }
        let key = self.identifier()?;
        check_key(&key)?;
        if negated || matches!(self.peek(), Tok::Comma | Tok::End) {
            return Ok(());
        }
        match self.next() {
            Tok::Eq | Tok::DoubleEq | Tok::NotEq => {
                let value = match self.peek().clone() {
                    Tok::Ident(v) => {
                        self.next();
                        v
                    }
                    Tok::Comma | Tok::End => String::new(),
                    other => {
                        return Err(format!("found '{}', expected: identifier", other.literal()));
                    }
                };
                check_value(&key, &value)
            }
            Tok::Gt | Tok::Lt => {
                let v = self.identifier()?;
                v.parse::<i64>().map_err(|_| {
                    format!("for 'Gt', 'Lt' operators, the value must be an integer: {v}")
                })?;
                check_value(&key, &v)
            }
            Tok::In | Tok::NotIn => self.values(&key),
            other => Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                other.literal()
            )),
        }
    }

    /// `(a,b)`; empty values are allowed where a comma or the parenthesis leaves one (`(,a)`, `()`).
    fn values(&mut self, key: &str) -> Result<(), String> {
        let open = self.next();
        if open != Tok::Open {
            return Err(format!("found '{}', expected: '('", open.literal()));
        }
        // Every token read here follows `(` or `,`, so `)` closes the list after an empty value.
        loop {
            match self.next() {
                Tok::Close => return Ok(()),
                Tok::Ident(v) => {
                    check_value(key, &v)?;
                    match self.next() {
                        Tok::Comma => {}
                        Tok::Close => return Ok(()),
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or ')'",
                                other.literal()
                            ));
                        }
                    }
                }
                Tok::Comma => {}
                other => {
                    return Err(format!("found '{}', expected: ',' or ')'", other.literal()));
                }
            }
        }
    }
}

/// kube-apiserver's message for a key that is not a qualified name.
pub fn check_key(key: &str) -> Result<(), String> {
    match qualified_name_errors(key).first() {
        Some(e) => Err(format!("key: Invalid value: \"{key}\": {e}")),
        None => Ok(()),
    }
}

/// kube-apiserver's message for a value that is not a label value.
pub fn check_value(key: &str, value: &str) -> Result<(), String> {
    match label_value_errors(value).first() {
        Some(e) => Err(format!("values[0][{key}]: Invalid value: \"{value}\": {e}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_kube_apiserver_refuses_is_reported_in_its_words() {
        // Fixtures errors/list-invalid-labelselector-400.json and -value-400.json.
        assert_eq!(
            check("app in (a,b").unwrap_err(),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            check("app=not valid!").unwrap_err(),
            "found 'valid', expected: ',' or 'end of string'"
        );
        assert_eq!(
            check("a,").unwrap_err(),
            "unable to parse requirement: found '', expected: identifier"
        );
        assert_eq!(
            check("a>b").unwrap_err(),
            "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: b"
        );
    }

    #[test]
    fn what_kube_apiserver_accepts_passes() {
        for ok in [
            "",
            "a=b,c!=d,e==f",
            "a in (x, y),b notin (z),c,!d",
            "a>1,b<2",
            "a in (),b in (,x),c in (x,),d in (x,,y)",
            "app.kubernetes.io/name=web,empty=",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok:?}");
        }
    }
}
