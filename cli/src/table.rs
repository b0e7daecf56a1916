//! The server's meta.k8s.io/v1 Table printed as kubectl prints it: upper-case headers, columns
//! of priority 0 (all with `-o wide`), NAMESPACE first with `-A`, LABELS last with
//! `--show-labels`, cells padded to the widest plus three spaces.

use serde_json::Value;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub wide: bool,
    pub namespace: bool,
    pub labels: bool,
}

/// Which of the Table's columns are printed; fixed by the first Table of a watch, whose later
/// Tables carry no column definitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    headers: Vec<String>,
    indexes: Vec<usize>,
    opts: Options,
}

impl Columns {
    pub fn from_table(table: &Value, opts: Options) -> Self {
        let defs = table["columnDefinitions"].as_array().cloned().unwrap_or_default();
        let mut headers = Vec::new();
        let mut indexes = Vec::new();
        if opts.namespace {
            headers.push("NAMESPACE".to_string());
        }
        for (i, d) in defs.iter().enumerate() {
            if opts.wide || d["priority"].as_i64().unwrap_or(0) == 0 {
                headers.push(d["name"].as_str().unwrap_or("").to_uppercase());
                indexes.push(i);
            }
        }
        if opts.labels {
            headers.push("LABELS".to_string());
        }
        Self { headers, indexes, opts }
    }

    pub fn header(&self) -> Vec<String> {
        self.headers.clone()
    }

    /// The printed cells of each row of `table`.
    pub fn rows(&self, table: &Value) -> Vec<Vec<String>> {
        let rows = table["rows"].as_array().map(Vec::as_slice).unwrap_or_default();
        rows.iter().map(|r| self.row(r)).collect()
    }

    fn row(&self, row: &Value) -> Vec<String> {
        let meta = &row["object"]["metadata"];
        let mut out = Vec::new();
        if self.opts.namespace {
            out.push(meta["namespace"].as_str().unwrap_or("").to_string());
        }
        for &i in &self.indexes {
            out.push(cell(&row["cells"][i]));
        }
        if self.opts.labels {
            out.push(labels(&meta["labels"]));
        }
        out
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "<none>".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `k=v,k2=v2` in key order, `<none>` when there are none.
pub fn labels(v: &Value) -> String {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(",")
        }
        _ => "<none>".into(),
    }
}

/// Column widths that only grow, so a watch's later rows line up with the first ones.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    widths: Vec<usize>,
}

impl Layout {
    /// Widens the columns to fit `rows`, then renders them (one line each).
    pub fn render(&mut self, rows: &[Vec<String>]) -> String {
        for r in rows {
            if self.widths.len() < r.len() {
                self.widths.resize(r.len(), 0);
            }
            for (w, c) in self.widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in rows {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                line.push_str(c);
                if i + 1 < r.len() {
                    let pad = self.widths[i] - c.chars().count() + 3;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A whole Table as text: header and rows.
pub fn render(table: &Value, opts: Options) -> String {
    let cols = Columns::from_table(table, opts);
    let mut rows = vec![cols.header()];
    rows.extend(cols.rows(table));
    Layout::default().render(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> Value {
        json!({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "columnDefinitions": [
                {"name": "Name", "priority": 0}, {"name": "Ready", "priority": 0},
                {"name": "Status", "priority": 0}, {"name": "Age", "priority": 0},
                {"name": "IP", "priority": 1}, {"name": "Nominated Node", "priority": 1}],
            "rows": [
                {"cells": ["web", "1/1", "Running", "5m", "10.244.1.2", null],
                 "object": {"metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "fe"}}}},
                {"cells": ["database-0", "0/1", "Pending", "12s", "<none>", null],
                 "object": {"metadata": {"name": "database-0", "namespace": "prod"}}}]
        })
    }

    #[test]
    fn default_columns_are_padded_three_spaces_past_the_widest_cell() {
        assert_eq!(
            render(&pods(), Options::default()),
            "NAME         READY   STATUS    AGE\n\
             web          1/1     Running   5m\n\
             database-0   0/1     Pending   12s\n"
        );
    }

    #[test]
    fn wide_adds_priority_one_columns_and_all_namespaces_adds_namespace_first() {
        let out = render(&pods(), Options { wide: true, namespace: true, labels: false });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "NAMESPACE   NAME         READY   STATUS    AGE   IP           NOMINATED NODE");
        assert_eq!(lines[1], "default     web          1/1     Running   5m    10.244.1.2   <none>");
        assert_eq!(lines[2], "prod        database-0   0/1     Pending   12s   <none>       <none>");
    }

    #[test]
    fn show_labels_appends_them_sorted() {
        let out = render(&pods(), Options { labels: true, ..Options::default() });
        assert!(out.lines().nth(1).expect("row").ends_with("5m    app=web,tier=fe"), "{out}");
        assert!(out.lines().nth(2).expect("row").ends_with("<none>"), "{out}");
    }

    #[test]
    fn a_layout_keeps_columns_aligned_across_a_watch() {
        let cols = Columns::from_table(&pods(), Options::default());
        let mut layout = Layout::default();
        let first = layout.render(&[cols.header(), vec!["web".into(), "1/1".into(), "Running".into(), "5m".into()]]);
        let later = layout.render(&[vec!["web".into(), "0/1".into(), "Terminating".into(), "6m".into()]]);
        assert_eq!(first, "NAME   READY   STATUS    AGE\nweb    1/1     Running   5m\n");
        assert_eq!(later, "web    0/1     Terminating   6m\n");
    }
}
