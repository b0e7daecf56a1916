//! Manifests for `-f`: files, directories and stdin, each holding YAML documents (`---`), JSON
//! objects, or `kind: List`s — flattened into objects that have an apiVersion and a kind.

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::Read as _;
use std::path::Path;

/// One object from a manifest, and where it came from (for messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    pub source: String,
    pub object: Value,
}

/// Reads every `-f` argument: a file, a directory (its .yaml/.yml/.json files, sorted; its
/// subdirectories too with `recursive`) or `-` for stdin.
pub fn read(args: &[String], recursive: bool) -> Result<Vec<Doc>> {
    let mut docs = Vec::new();
    for arg in args {
        if arg == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("cannot read stdin")?;
            docs.extend(parse("STDIN", &text)?);
            continue;
        }
        let path = Path::new(arg);
        if !path.exists() {
            bail!("the path {arg:?} does not exist");
        }
        for file in files(path, recursive, true)? {
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            docs.extend(parse(&file.display().to_string(), &text)?);
        }
    }
    if docs.is_empty() {
        bail!("no objects passed to apply");
    }
    Ok(docs)
}

fn files(path: &Path, recursive: bool, top: bool) -> Result<Vec<std::path::PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !top && !recursive {
        return Ok(Vec::new());
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .with_context(|| format!("cannot read directory {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let mut out = Vec::new();
    for e in entries {
        if e.is_dir() {
            out.extend(files(&e, recursive, false)?);
        } else if e.extension().and_then(|x| x.to_str()).is_some_and(|x| matches!(x, "yaml" | "yml" | "json")) {
            out.push(e);
        }
    }
    Ok(out)
}

/// The objects in one manifest's text: JSON when it starts with `{` or `[`, else YAML documents.
pub fn parse(source: &str, text: &str) -> Result<Vec<Doc>> {
    let values: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("error parsing {source}: {e}"))?
    } else {
        serde_saphyr::from_multiple::<Value>(text)
            .map_err(|e| anyhow::anyhow!("error parsing {source}: {}", first_line(&e.to_string())))?
    };
    let mut out = Vec::new();
    for (i, v) in values.into_iter().enumerate() {
        flatten(source, i + 1, v, &mut out)?;
    }
    Ok(out)
}

fn flatten(source: &str, n: usize, v: Value, out: &mut Vec<Doc>) -> Result<()> {
    match v {
        Value::Null => Ok(()),
        Value::Array(items) => items.into_iter().try_for_each(|i| flatten(source, n, i, out)),
        Value::Object(ref m) if m.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")) => {
            let items = m.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
            items.into_iter().try_for_each(|i| flatten(source, n, i, out))
        }
        Value::Object(ref m) => {
            let missing: Vec<&str> = ["apiVersion", "kind"]
                .into_iter()
                .filter(|k| m.get(*k).and_then(Value::as_str).is_none_or(str::is_empty))
                .collect();
            if !missing.is_empty() {
                let list = missing.iter().map(|k| format!("{k} not set")).collect::<Vec<_>>().join(", ");
                bail!("error validating {source:?} (document {n}): {list}");
            }
            out.push(Doc { source: source.to_string(), object: v });
            Ok(())
        }
        _ => bail!("error validating {source:?} (document {n}): not an object"),
    }
}

/// The first line of a parser's message, without its own `error: ` prefix.
fn first_line(s: &str) -> &str {
    let line = s.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or(s);
    line.strip_prefix("error: ").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(docs: &[Doc]) -> Vec<String> {
        docs.iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d.object["kind"].as_str().unwrap_or(""),
                    d.object["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    #[test]
    fn yaml_documents_split_on_separators_and_skip_empty_ones() {
        let text = "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n# nothing\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: \"1\"\n...\n";
        let docs = parse("f.yaml", text).expect("parses");
        assert_eq!(names(&docs), ["Namespace/a", "ConfigMap/c"]);
        assert_eq!(docs[1].object["data"]["k"], "1");
    }

    #[test]
    fn json_objects_arrays_and_lists_are_flattened() {
        let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}]}
            [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}]"#;
        assert_eq!(names(&parse("f.json", text).expect("parses")), ["Pod/p", "Service/s"]);
    }

    #[test]
    fn a_document_without_kind_is_named_in_the_error() {
        let err = parse("f.yaml", "apiVersion: v1\nkind: Pod\n---\nmetadata: {name: x}\n").expect_err("no kind");
        assert_eq!(err.to_string(), "error validating \"f.yaml\" (document 2): apiVersion not set, kind not set");
    }

    #[test]
    fn malformed_yaml_is_one_line_naming_the_file() {
        let err = parse("bad.yaml", "apiVersion: v1\nkind: [Pod\n").expect_err("malformed");
        let msg = err.to_string();
        assert!(msg.starts_with("error parsing bad.yaml: line ") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn directories_are_read_in_name_order_and_only_manifests() {
        let dir = tempfile::tempdir().expect("tempdir");
        let obj = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).to_string();
        std::fs::write(dir.path().join("b.json"), obj("b")).expect("write");
        std::fs::write(dir.path().join("a.yaml"), obj("a")).expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not a manifest").expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/c.yml"), obj("c")).expect("write");
        let top = dir.path().to_string_lossy().to_string();
        assert_eq!(names(&read(std::slice::from_ref(&top), false).expect("reads")), ["ConfigMap/a", "ConfigMap/b"]);
        assert_eq!(names(&read(&[top], true).expect("reads")), ["ConfigMap/a", "ConfigMap/b", "ConfigMap/c"]);
        let err = read(&["/nonexistent.yaml".into()], false).expect_err("missing");
        assert_eq!(err.to_string(), "the path \"/nonexistent.yaml\" does not exist");
    }
}
