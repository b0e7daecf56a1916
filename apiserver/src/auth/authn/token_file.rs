//! `--token-auth-file`: static bearer tokens in Kubernetes' CSV format,
//! `token,user,uid[,"group1,group2"]`, read once at start.

use super::{AuthnResult, TokenAuthenticator};
use crate::auth::UserInfo;
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read token file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "token file '{path}' must have at least 3 columns (token, user name, user uid), found {found} (line {line})"
    )]
    Columns { path: String, found: usize, line: usize },
    #[error("token file '{path}' line {line}: {why}")]
    Syntax { path: String, line: usize, why: &'static str },
}

/// The tokens of a token file.
#[derive(Debug, Default)]
pub struct TokenFile {
    tokens: HashMap<String, UserInfo>,
}

impl TokenFile {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text =
            std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.display().to_string(), source })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// As Kubernetes' `tokenfile.NewCSV`: blank lines skipped, empty tokens skipped (warned),
    /// a repeated token's last line wins (warned), groups split on commas.
    pub fn parse(text: &str, path: &str) -> Result<Self, Error> {
        let mut tokens = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            let record = csv_record(line).map_err(|why| Error::Syntax { path: path.into(), line: line_no, why })?;
            if record.len() < 3 {
                return Err(Error::Columns { path: path.into(), found: record.len(), line: line_no });
            }
            if record[0].is_empty() {
                tracing::warn!(path, line = line_no, "empty token in token file");
                continue;
            }
            let mut user = UserInfo { name: record[1].clone(), uid: record[2].clone(), ..Default::default() };
            if let Some(groups) = record.get(3) {
                user.groups = groups.split(',').map(str::to_string).collect();
            }
            if tokens.insert(record[0].clone(), user).is_some() {
                tracing::warn!(path, line = line_no, "duplicate token in token file");
            }
        }
        Ok(Self { tokens })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl TokenAuthenticator for TokenFile {
    fn authenticate_token(&self, token: &str) -> AuthnResult {
        Ok(self.tokens.get(token).cloned())
    }
}

/// One CSV record (RFC 4180 on one line, as Go's encoding/csv reads it): fields split on commas,
/// a field may be double-quoted with `""` for a quote inside.
fn csv_record(line: &str) -> Result<Vec<String>, &'static str> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("extraneous or missing \" in quoted-field"),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(_) => return Err("extraneous or missing \" in quoted-field"),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some('"') => return Err("bare \" in non-quoted-field"),
                    Some(c) => field.push(c),
                }
            }
            fields.push(field);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kubernetes_token_files() {
        let text = "abc123,alice,1001,\"dev,ops\"\n\n  \nxyz,bob,1002\n,nobody,0\nabc123,alice2,1003,admins\n";
        let f = TokenFile::parse(text, "tokens.csv").expect("parses");
        assert_eq!(f.len(), 2);
        let alice = f.authenticate_token("abc123").expect("ok").expect("user");
        assert_eq!((alice.name.as_str(), alice.uid.as_str()), ("alice2", "1003"), "the last line wins");
        assert_eq!(alice.groups, ["admins"]);
        let bob = f.authenticate_token("xyz").expect("ok").expect("user");
        assert!(bob.groups.is_empty());
        assert_eq!(f.authenticate_token("nope"), Ok(None));
        assert_eq!(f.authenticate_token(""), Ok(None));
        let g = TokenFile::parse("t,carol,7,\"a,b,\"\"c\"\"\"", "x").expect("parses");
        assert_eq!(g.authenticate_token("t").expect("ok").expect("user").groups, ["a", "b", "\"c\""]);
    }

    #[test]
    fn refuses_short_records_and_broken_quotes() {
        let err = TokenFile::parse("ok,u,1\ntoken,user\n", "t.csv").expect_err("two columns");
        assert_eq!(
            err.to_string(),
            "token file 't.csv' must have at least 3 columns (token, user name, user uid), found 2 (line 2)"
        );
        assert!(TokenFile::parse("t,u,1,\"open", "t.csv").is_err());
        assert!(TokenFile::parse("t,u\"x,1", "t.csv").is_err());
    }
}
