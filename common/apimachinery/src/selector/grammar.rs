//! The string form of a label selector, read by kube-apiserver's grammar (`labels.Parse` of
//! `k8s.io/apimachinery`): a lexer that cuts the text into tokens and a walk that builds one
//! requirement at a time, stopping at the first thing kube-apiserver would refuse, so its errors carry
//! what kube-apiserver's messages name (the token found, what was expected there).
//!
//! As upstream: identifiers are runs of anything but blanks and `!=<>(),`; `in` and `notin` are
//! operators after a key and plain identifiers where a key or value stands; a value list may hold empty
//! values (`(,a)`, `()`).

use std::collections::BTreeSet;

use super::{Expected, Operator, Requirement, SelectorError, validate_key, validate_value};

/// The characters that end an identifier (besides blanks).
const SPECIAL: &str = "!=<>(),";

/// A token of the string form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Ident(&'a str),
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

impl<'a> Token<'a> {
    /// The token as the text showed it; empty for the end of the string.
    fn literal(self) -> &'a str {
        match self {
            Token::Ident(s) => s,
            Token::Bang => "!",
            Token::Eq => "=",
            Token::DoubleEq => "==",
            Token::NotEq => "!=",
            Token::Gt => ">",
            Token::Lt => "<",
            Token::In => "in",
            Token::NotIn => "notin",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::End => "",
        }
    }

    /// The identifier where a key or value stands: `in` and `notin` are identifiers there.
    fn identifier(self) -> Option<&'a str> {
        match self {
            Token::Ident(s) => Some(s),
            Token::In | Token::NotIn => Some(self.literal()),
            _ => None,
        }
    }

    fn unexpected(self, expected: Expected) -> SelectorError {
        SelectorError::Unexpected {
            found: self.literal().to_owned(),
            expected,
        }
    }
}

/// The tokens of `input`, ending with [`Token::End`].
fn lex(input: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut rest = input.trim_start();
    while let Some(c) = rest.chars().next() {
        // `!` and `=` are one byte, so `rest[1..]` is a char boundary.
        let (token, len) = match c {
            '!' if rest[1..].starts_with('=') => (Token::NotEq, 2),
            '!' => (Token::Bang, 1),
            '=' if rest[1..].starts_with('=') => (Token::DoubleEq, 2),
            '=' => (Token::Eq, 1),
            '>' => (Token::Gt, 1),
            '<' => (Token::Lt, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            ',' => (Token::Comma, 1),
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || SPECIAL.contains(c))
                    .unwrap_or(rest.len());
                let token = match &rest[..len] {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    word => Token::Ident(word),
                };
                (token, len)
            }
        };
        tokens.push(token);
        rest = rest[len..].trim_start();
    }
    tokens.push(Token::End);
    tokens
}

/// The requirements of `input`, in the order written; none for a blank string.
///
/// # Errors
/// The first thing kube-apiserver would refuse (see [`super::LabelSelector::parse`]).
pub(super) fn parse(input: &str) -> Result<Vec<Requirement>, SelectorError> {
    let mut walk = Walk {
        input,
        tokens: lex(input),
        pos: 0,
    };
    let mut requirements = Vec::new();
    if walk.peek() == Token::End {
        return Ok(requirements);
    }
    loop {
        requirements.push(walk.requirement()?);
        match walk.next() {
            Token::End => return Ok(requirements),
            Token::Comma => {}
            other => return Err(other.unexpected(Expected::CommaOrEnd)),
        }
    }
}

/// A walk over the tokens.
struct Walk<'a> {
    input: &'a str,
    tokens: Vec<Token<'a>>,
    pos: usize,
}

impl<'a> Walk<'a> {
    fn peek(&self) -> Token<'a> {
        self.tokens.get(self.pos).copied().unwrap_or(Token::End)
    }

    fn next(&mut self) -> Token<'a> {
        let token = self.peek();
        self.pos += 1;
        token
    }

    fn identifier(&mut self) -> Result<&'a str, SelectorError> {
        let token = self.next();
        token
            .identifier()
            .ok_or_else(|| token.unexpected(Expected::Identifier))
    }

    /// One requirement: `!key`, `key`, `key op value`, `key in|notin (values)`.
    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let negated = self.peek() == Token::Bang;
        if negated {
            self.next();
        }
        let key = self.identifier()?;
        validate_key(key)?;
        let op = if negated {
            Operator::DoesNotExist
        } else if matches!(self.peek(), Token::Comma | Token::End) {
            Operator::Exists
        } else {
            match self.next() {
                Token::Eq | Token::DoubleEq => Operator::In(self.exact_value(key)?),
                Token::NotEq => Operator::NotIn(self.exact_value(key)?),
                Token::Gt => Operator::Gt(self.integer(key)?),
                Token::Lt => Operator::Lt(self.integer(key)?),
                Token::In => Operator::In(self.values(key)?),
                Token::NotIn => Operator::NotIn(self.values(key)?),
                other => return Err(other.unexpected(Expected::Operator)),
            }
        };
        Ok(Requirement {
            key: key.to_owned(),
            op,
        })
    }

    /// The value after `=`, `==` or `!=`: empty when the requirement ends there.
    fn exact_value(&mut self, key: &str) -> Result<BTreeSet<String>, SelectorError> {
        let value = match self.peek() {
            Token::Comma | Token::End => "",
            _ => self.identifier()?,
        };
        validate_value(key, value)?;
        Ok(BTreeSet::from([value.to_owned()]))
    }

    /// What `found`, standing where a value list goes on with `,` or ends with `)`, is: the end of
    /// the string leaves the list unclosed.
    fn not_closed(&self, found: Token<'_>) -> SelectorError {
        match found {
            Token::End => SelectorError::UnbalancedParentheses(self.input.to_owned()),
            other => other.unexpected(Expected::CommaOrClose),
        }
    }

    /// The operand of `>` / `<`: an integer that is a valid label value.
    fn integer(&mut self, key: &str) -> Result<i64, SelectorError> {
        let value = self.identifier()?;
        let n = value.parse().map_err(|_| SelectorError::NotAnInteger {
            key: key.to_owned(),
            value: value.to_owned(),
        })?;
        validate_value(key, value)?;
        Ok(n)
    }

    /// `(a,b)`: every slot between `(` or `,` and `,` or `)` holds a value, the empty one when
    /// nothing stands there (`()` is `("")`, `(,a)` is `("",a)`), as kube-apiserver reads it.
    fn values(&mut self, key: &str) -> Result<BTreeSet<String>, SelectorError> {
        let open = self.next();
        if open != Token::Open {
            return Err(open.unexpected(Expected::OpenParen));
        }
        let mut values = BTreeSet::new();
        // Every token read at the top of the loop follows `(` or `,`.
        loop {
            match self.next() {
                Token::Close => {
                    values.insert(String::new());
                    return Ok(values);
                }
                Token::Comma => {
                    values.insert(String::new());
                }
                token => {
                    let value = token.identifier().ok_or_else(|| self.not_closed(token))?;
                    validate_value(key, value)?;
                    values.insert(value.to_owned());
                    match self.next() {
                        Token::Comma => {}
                        Token::Close => return Ok(values),
                        other => return Err(self.not_closed(other)),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn error(input: &str) -> String {
        parse(input).unwrap_err().to_string()
    }

    #[test]
    fn what_kube_apiserver_refuses_is_reported_with_the_token_found_and_what_was_expected() {
        assert_eq!(
            parse("app in (a,b"),
            Err(SelectorError::UnbalancedParentheses("app in (a,b".into()))
        );
        assert_eq!(error("a in (x y)"), "found 'y', expected: ',' or ')'");
        assert_eq!(
            error("app=not valid!"),
            "found 'valid', expected: ',' or 'end of string'"
        );
        assert_eq!(error("a,"), "found '', expected: identifier");
        assert_eq!(error("a=b,,c"), "found ',', expected: identifier");
        assert_eq!(error("a in x"), "found 'x', expected: '('");
        assert_eq!(
            error("a ~ 3"),
            "found '~', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert!(matches!(
            parse("a>b"),
            Err(SelectorError::NotAnInteger { .. })
        ));
    }

    #[test]
    fn in_and_notin_are_identifiers_where_a_key_or_value_stands() {
        let requirements = parse("in in (notin),notin=in").unwrap();
        assert_eq!(requirements[0].key, "in");
        assert_eq!(
            requirements[0].op,
            Operator::In(BTreeSet::from(["notin".to_owned()]))
        );
        assert_eq!(
            requirements[1].op,
            Operator::In(BTreeSet::from(["in".to_owned()]))
        );
    }

    #[test]
    fn blank_slots_of_a_value_list_are_empty_values() {
        let values = |input: &str| match &parse(input).unwrap()[0].op {
            Operator::In(values) => values.iter().cloned().collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(values("a in ()"), [""]);
        assert_eq!(values("a in (,x)"), ["", "x"]);
        assert_eq!(values("a in (x,)"), ["", "x"]);
        assert_eq!(values("a in (x,,y)"), ["", "x", "y"]);
        assert_eq!(values("a in (x, y)"), ["x", "y"]);
    }
}
