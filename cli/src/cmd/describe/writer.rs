//! The layout of `describe` output: lines of tab-separated cells, aligned the way kubectl's
//! tabwriter aligns them (consecutive lines with two or more cells share column widths, two
//! spaces of padding; a one-cell line such as `Containers:` ends the block).

/// Two spaces per nesting level, as kubectl indents.
fn indent(level: usize) -> String {
    "  ".repeat(level)
}

#[derive(Debug, Default)]
pub struct Out {
    lines: Vec<Vec<String>>,
}

impl Out {
    /// `Key:  value`; an empty value prints `<none>`.
    pub fn kv(&mut self, level: usize, key: &str, value: impl Into<String>) {
        let v: String = value.into();
        self.lines.push(vec![format!("{}{key}:", indent(level)), if v.is_empty() { "<none>".into() } else { v }]);
    }

    /// `Key:  first` and the other values under it, one per line (`<none>` when empty).
    pub fn kv_list(&mut self, level: usize, key: &str, values: &[String]) {
        match values.split_first() {
            None => self.kv(level, key, ""),
            Some((first, rest)) => {
                self.kv(level, key, first.clone());
                for v in rest {
                    self.lines.push(vec![String::new(), v.clone()]);
                }
            }
        }
    }

    /// A section title (`Containers:`), which also ends the current alignment block.
    pub fn header(&mut self, level: usize, text: &str) {
        self.lines.push(vec![format!("{}{text}", indent(level))]);
    }

    /// A table row (or header) at `level`.
    pub fn row(&mut self, level: usize, cells: &[String]) {
        let mut cells = cells.to_vec();
        if let Some(first) = cells.first_mut() {
            *first = format!("{}{first}", indent(level));
        }
        self.lines.push(cells);
    }

    /// A table: a header, the dashes under it, and the rows; `none` as `Key:  <none>` when empty.
    pub fn table(&mut self, level: usize, title: &str, header: &[&str], rows: &[Vec<String>]) {
        if rows.is_empty() {
            self.kv(level, title, "");
            return;
        }
        self.header(level, &format!("{title}:"));
        self.row(level + 1, &header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
        self.row(level + 1, &header.iter().map(|h| "-".repeat(h.len())).collect::<Vec<_>>());
        for r in rows {
            self.row(level + 1, r);
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut i = 0;
        while i < self.lines.len() {
            let end = (i..self.lines.len()).find(|&j| self.lines[j].len() < 2).unwrap_or(self.lines.len());
            if end == i {
                out.push_str(&self.lines[i][0]);
                out.push('\n');
                i += 1;
                continue;
            }
            let block = &self.lines[i..end];
            let cols = block.iter().map(Vec::len).max().unwrap_or(0);
            let widths: Vec<usize> = (0..cols)
                .map(|c| block.iter().filter(|l| l.len() > c + 1).map(|l| l[c].chars().count()).max().unwrap_or(0))
                .collect();
            for l in block {
                let mut line = String::new();
                for (c, cell) in l.iter().enumerate() {
                    line.push_str(cell);
                    if c + 1 < l.len() {
                        line.extend(std::iter::repeat_n(' ', widths[c] + 2 - cell.chars().count()));
                    }
                }
                out.push_str(line.trim_end());
                out.push('\n');
            }
            i = end;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_key_values_align_and_headers_break_the_block() {
        let mut o = Out::default();
        o.kv(0, "Name", "web");
        o.kv(0, "Service Account", "default");
        o.kv_list(0, "Labels", &["app=web".into(), "tier=fe".into()]);
        o.kv(0, "Annotations", "");
        o.header(0, "Containers:");
        o.header(1, "web:");
        o.kv(2, "Image", "nginx");
        o.kv(2, "Restart Count", "0");
        assert_eq!(
            o.render(),
            "Name:             web\n\
             Service Account:  default\n\
             Labels:           app=web\n                  \
             tier=fe\n\
             Annotations:      <none>\n\
             Containers:\n  \
             web:\n    \
             Image:          nginx\n    \
             Restart Count:  0\n"
        );
    }

    #[test]
    fn tables_get_dashes_and_a_following_key_value_aligns_with_them() {
        let mut o = Out::default();
        o.table(
            0,
            "Conditions",
            &["Type", "Status"],
            &[vec!["Ready".into(), "True".into()], vec!["PodScheduled".into(), "True".into()]],
        );
        o.table(0, "Events", &["Type", "Reason"], &[]);
        assert_eq!(
            o.render(),
            "Conditions:\n  Type          Status\n  ----          ------\n  Ready         True\n  PodScheduled  True\nEvents:         <none>\n"
        );
    }
}
