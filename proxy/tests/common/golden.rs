//! Golden files under `tests/golden/`: `KAJI_UPDATE_GOLDEN=1` rewrites them (review the diff
//! like code).

use std::path::PathBuf;

/// Compares `actual` with `tests/golden/<name>.txt` (`name` may hold a subdirectory).
pub fn assert_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.txt"));
    if std::env::var_os("KAJI_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("create golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if expected != actual {
        panic!("{name}: render output differs from {}\n--- expected\n{expected}\n--- actual\n{actual}", path.display());
    }
}
