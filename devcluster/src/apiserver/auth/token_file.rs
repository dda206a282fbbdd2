//! The static token file of kube-apiserver's `--token-auth-file`: CSV lines `token,user,uid,"g1,g2"`
//! (the groups column optional and quoted when it holds commas); blank lines and `#` comments skipped.

use std::path::Path;

use super::AuthError;
use super::user::UserInfo;

/// One line of the token file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticToken {
    /// The bearer token.
    pub token: String,
    /// Who it authenticates as (`system:authenticated` added).
    pub user: UserInfo,
}

/// Reads and parses a token file.
///
/// # Errors
/// The file cannot be read; a line has fewer than 3 columns or an empty token or user name.
pub fn parse_token_file(path: &Path) -> Result<Vec<StaticToken>, AuthError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthError::ReadTokenFile {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text).map_err(|(line, reason)| AuthError::BadTokenLine {
        path: path.display().to_string(),
        line,
        reason,
    })
}

/// Parses the file's text; an error names the 1-based line and what is wrong.
fn parse(text: &str) -> Result<Vec<StaticToken>, (usize, String)> {
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let columns = csv_columns(line).map_err(|reason| (i + 1, reason))?;
        if columns.len() < 3 {
            return Err((
                i + 1,
                format!("expected at least 3 columns, got {}", columns.len()),
            ));
        }
        if columns[0].is_empty() || columns[1].is_empty() {
            return Err((
                i + 1,
                "the token and the user name must not be empty".into(),
            ));
        }
        let groups: Vec<String> = columns
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        tokens.push(StaticToken {
            token: columns[0].clone(),
            user: UserInfo::authenticated(&columns[1], &columns[2], &groups),
        });
    }
    Ok(tokens)
}

/// The columns of one CSV line: commas separate, double quotes enclose, `""` is a quote inside quotes.
fn csv_columns(line: &str) -> Result<Vec<String>, String> {
    let mut columns = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => columns.push(std::mem::take(&mut current)),
            (c, _) => current.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    columns.push(current);
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_groups_column_holds_several_groups() {
        let tokens = parse("# admins\n\ns3cret,alice,1001,\"dev,ops\"\nt2,bob,1002\n").unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].token, "s3cret");
        assert_eq!(tokens[0].user.name, "alice");
        assert_eq!(tokens[0].user.uid, "1001");
        assert_eq!(
            tokens[0].user.groups,
            ["dev", "ops", "system:authenticated"]
        );
        assert_eq!(tokens[1].user.groups, ["system:authenticated"]);
    }

    #[test]
    fn a_line_with_too_few_columns_names_its_line() {
        let err = parse("a,b,c\nonly,two\n").unwrap_err();
        assert_eq!(err.0, 2);
    }
}
