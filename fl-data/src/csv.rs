//! A small reader of comma-separated values as RFC 4180 defines them, for the text datasets'
//! official files (AG News ships `train.csv` and `test.csv` in this form).
//!
//! A field is either bare (no `"` in it) or quoted: it starts with `"`, ends with the `"`
//! before a comma or the end of the record, and writes a quote inside as `""`. Quoted fields
//! may hold commas and line breaks. Records end with `\n` or `\r\n`; a final line break is
//! optional, and empty lines between records are skipped. Anything else (a quote inside a bare
//! field, text after a closing quote, a quote never closed) is an error naming the file, the
//! line and what was expected, where Python's lenient `csv` module would guess.
//!
//! The reader is hand-written because it is small and the workspace then needs no CSV crate.

use std::path::Path;

use crate::error::{DataError, Result};

/// One record: its fields, and the 1-based line it starts on (records may span lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub line: usize,
    pub fields: Vec<String>,
}

/// Reads a UTF-8 CSV file into its records. A leading byte-order mark is skipped.
pub fn read_csv(path: &Path) -> Result<Vec<Record>> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        DataError::format(path, "UTF-8 text", format!("an invalid byte sequence on line {line}"))
    })?;
    parse_csv(text.strip_prefix('\u{feff}').unwrap_or(&text), path)
}

/// Splits `text` into records; `path` only names the source in errors.
pub fn parse_csv(text: &str, path: &Path) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while chars.peek().is_some() {
        // Skip empty lines between records.
        match chars.peek() {
            Some('\n') => {
                chars.next();
                line += 1;
                continue;
            }
            Some('\r') => {
                chars.next();
                if chars.next_if_eq(&'\n').is_none() {
                    return Err(bad(path, line, "a line break `\\r\\n`", "a lone `\\r`"));
                }
                line += 1;
                continue;
            }
            _ => {}
        }
        let start = line;
        let mut fields = Vec::new();
        loop {
            let mut field = String::new();
            if chars.next_if_eq(&'"').is_some() {
                // A quoted field: up to the next quote that is not doubled.
                loop {
                    match chars.next() {
                        Some('"') if chars.next_if_eq(&'"').is_some() => field.push('"'),
                        Some('"') => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            field.push(c);
                        }
                        None => {
                            return Err(bad(
                                path,
                                start,
                                format!("a closing `\"` for field {} of the record", fields.len() + 1),
                                "the end of the file",
                            ));
                        }
                    }
                }
                if let Some(&c) = chars.peek().filter(|&&c| !matches!(c, ',' | '\n' | '\r')) {
                    return Err(bad(
                        path,
                        line,
                        format!("`,` or the end of the line after the closing quote of field {}", fields.len() + 1),
                        format!("`{c}`"),
                    ));
                }
            } else {
                while let Some(c) = chars.next_if(|&c| !matches!(c, ',' | '\n' | '\r')) {
                    if c == '"' {
                        return Err(bad(
                            path,
                            line,
                            format!("field {} either quoted as a whole or free of `\"`", fields.len() + 1),
                            "a `\"` inside an unquoted field",
                        ));
                    }
                    field.push(c);
                }
            }
            fields.push(field);
            match chars.next() {
                Some(',') => continue,
                Some('\n') | None => break,
                Some('\r') if chars.next_if_eq(&'\n').is_some() => break,
                Some(_) => return Err(bad(path, line, "a line break `\\r\\n`", "a lone `\\r`")),
            }
        }
        line += 1;
        records.push(Record { line: start, fields });
    }
    Ok(records)
}

fn bad(path: &Path, line: usize, expected: impl Into<String>, found: impl Into<String>) -> DataError {
    DataError::format(path, format!("{} on line {line}", expected.into()), found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Vec<Vec<String>> {
        parse_csv(text, Path::new("t.csv")).unwrap().into_iter().map(|r| r.fields).collect()
    }

    fn err(text: &str) -> String {
        parse_csv(text, Path::new("t.csv")).unwrap_err().to_string()
    }

    #[test]
    fn quoted_and_bare_fields_with_escapes_commas_and_line_breaks() {
        assert_eq!(parse("a,b\n"), vec![vec!["a", "b"]]);
        assert_eq!(parse("\"a,b\",\"say \"\"hi\"\"\",c"), vec![vec!["a,b", "say \"hi\"", "c"]]);
        assert_eq!(parse("\"x\ny\",z\r\n1,\"\"\n"), vec![vec!["x\ny", "z"], vec!["1", ""]]);
        assert_eq!(parse(",\n"), vec![vec!["", ""]]);
        assert_eq!(parse("\n\na\n\n"), vec![vec!["a"]]);
        assert!(parse("").is_empty());
    }

    #[test]
    fn records_know_the_line_they_start_on() {
        let records = parse_csv("\"1\",\"two\nlines\"\n\n\"3\",\"x\"\n", Path::new("t.csv")).unwrap();
        assert_eq!(records.iter().map(|r| r.line).collect::<Vec<_>>(), vec![1, 4]);
    }

    #[test]
    fn malformed_records_name_the_file_line_and_expectation() {
        let e = err("\"1\",\"ok\"\n\"2\",\"bad\"x\n");
        assert!(
            e.starts_with("t.csv: expected `,` or the end of the line") && e.contains("line 2") && e.contains("`x`"),
            "{e}"
        );
        let e = err("a,b\"c\n");
        assert!(e.contains("line 1") && e.contains("inside an unquoted field"), "{e}");
        let e = err("1,2\n\"3,4\n");
        assert!(e.contains("closing `\"` for field 1") && e.contains("line 2") && e.contains("end of the file"), "{e}");
        let e = err("1,2\r3\n");
        assert!(e.contains("lone `\\r`"), "{e}");
    }
}
